"""The MNIST "RNN" of ADP-FL (Wu et al. 2025, Table 1: 24,714 parameters).

The count matches exactly a one-layer LSTM(input 28, hidden 64) reading the 28 image rows as
time steps, followed by Linear(64 → 10): 4·(28·64 + 64·64 + 2·64) + 650 = 24,714.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn


class MnistLSTM(nn.Module):
    """Row-by-row LSTM classifier.

    Args:
        input_size: features per time step (image width, 28).
        hidden_size: LSTM width (64).
        num_classes: output classes.
        impl: ``torch`` (``nn.LSTM``, fast) or ``opacus`` (``opacus.layers.DPLSTM``, same
            parameters, needed for per-sample gradients under DP-SGD).
    """

    def __init__(
        self,
        input_size: int = 28,
        hidden_size: int = 64,
        num_classes: int = 10,
        impl: Literal["torch", "opacus"] = "torch",
    ) -> None:
        super().__init__()
        if impl == "opacus":
            from opacus.layers import DPLSTM

            self.lstm: nn.Module = DPLSTM(input_size, hidden_size, batch_first=True)
        elif impl == "torch":
            self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        else:
            raise ValueError(f"client.net.impl: expected torch or opacus, got {impl!r}")
        self.input_size = input_size
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.reshape(x.shape[0], -1, self.input_size)  # (B, 1, 28, 28) → (B, 28, 28)
        out, _ = self.lstm(seq)
        return self.fc(out[:, -1])
