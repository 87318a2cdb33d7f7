"""The Shakespeare next-character LSTM of DP-FedASGP (Zhang et al. 2024, Sec. V-A) and Reddi
et al. 2021 (TFF Shakespeare): embedding 8, two LSTM layers of 256 units, dense layer to the
90-character vocabulary, sequences of 80 characters.

DP-FedASGP adds noise to the client's *update*, not per example, so a plain ``nn.LSTM`` is fine.
Sample-level DP-SGD through Opacus would need ``opacus.layers.DPLSTM`` (Opacus cannot compute
per-sample gradients of ``nn.LSTM``); ``dp_lstm: true`` builds that drop-in instead.
"""

from __future__ import annotations

import torch
from torch import nn


class CharLSTM(nn.Module):
    """Embedding → 2×LSTM → linear; returns logits of shape (batch, vocab, seq) so that
    ``F.cross_entropy(logits, y)`` with targets (batch, seq) is the per-character loss.

    Args:
        vocab_size: characters (90 in LEAF/TFF Shakespeare, index 0 = padding).
        embedding_dim: 8.
        hidden_size: 256.
        num_layers: 2.
        dp_lstm: use ``opacus.layers.DPLSTM`` (for DP-SGD clients).
        last_only: return only the prediction of the last position, (batch, vocab).
    """

    def __init__(
        self,
        vocab_size: int = 90,
        embedding_dim: int = 8,
        hidden_size: int = 256,
        num_layers: int = 2,
        dp_lstm: bool = False,
        last_only: bool = False,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        if dp_lstm:
            from opacus.layers import DPLSTM

            self.lstm: nn.Module = DPLSTM(embedding_dim, hidden_size, num_layers, batch_first=True)
        else:
            self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)
        self.last_only = last_only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x.long()))
        logits = self.head(out)  # (batch, seq, vocab)
        if self.last_only:
            return logits[:, -1]
        return logits.transpose(1, 2)
