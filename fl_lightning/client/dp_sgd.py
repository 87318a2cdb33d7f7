"""Gradient engines of the local loop: plain SGD gradients and sample-level DP-SGD.

An engine turns one batch into gradients in ``p.grad``. The DP-SGD engines follow Abadi et al.
2016, Alg. 1: per-example gradients, each clipped to L2 norm C, summed, plus N(0, σ²C²), divided
by the *expected* batch size (Poisson sampling, so the sum's sensitivity is C). Engines are built
once per process and reconfigured per client (noise generator, σ, batch size), never rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class GradientEngine:
    """Non-private gradients: mean loss over the batch, backward."""

    def __init__(self, net: nn.Module) -> None:
        self.net = net
        self.params = [p for p in net.parameters() if p.requires_grad]

    @property
    def forward_module(self) -> nn.Module:
        return self.net

    def configure_client(
        self,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: float,
        generator: torch.Generator,
    ) -> None:
        """Per-client settings (ignored without DP)."""

    def compute_gradients(self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
        """Leaves the batch gradient in ``p.grad``; returns the batch's mean loss."""
        for p in self.params:
            p.grad = None
        if len(x) == 0:
            for p in self.params:
                p.grad = torch.zeros_like(p)
            return float("nan")
        loss = loss_fn(self.net(x), y)
        loss.backward()
        return float(loss.detach())


class OpacusEngine(GradientEngine):
    """DP-SGD through Opacus' ``GradSampleModule`` hooks and ``DPOptimizer`` phases.

    The ``DPOptimizer`` is used for its clip / noise / scale phases (``pre_step``); the
    parameter update itself is done by the local loop's optimizer so that proximal terms and
    strategy corrections (post-processing of the noisy gradient) can be added in between.
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__(net)
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        self.grad_sample_module = GradSampleModule(net, loss_reduction="mean")
        # A placeholder optimizer: DPOptimizer needs one, but only its pre_step is used.
        self._dp = DPOptimizer(
            torch.optim.SGD(self.params, lr=0.0),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            expected_batch_size=1,
            loss_reduction="mean",
        )

    @property
    def forward_module(self) -> nn.Module:
        return self.grad_sample_module

    def configure_client(
        self,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: float,
        generator: torch.Generator,
    ) -> None:
        self._dp.noise_multiplier = float(noise_multiplier)
        self._dp.max_grad_norm = float(max_grad_norm)
        self._dp.expected_batch_size = expected_batch_size
        self._dp.generator = generator

    def compute_gradients(self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
        self._dp.zero_grad(set_to_none=True)
        if len(x) == 0:
            # An empty Poisson batch still releases noise (Abadi et al.; Opacus does the same).
            for p in self.params:
                p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
            loss_value = float("nan")
        else:
            loss = loss_fn(self.grad_sample_module(x), y)
            loss.backward()
            loss_value = float(loss.detach())
        self._dp.pre_step()
        for p in self.params:
            p.grad_sample = None
            p.summed_grad = None
        return loss_value


DP_SGD_ENGINES: dict[str, type[GradientEngine]] = {"opacus": OpacusEngine}


def build_engine(net: nn.Module, engine: str | None) -> GradientEngine:
    """The non-private engine for ``engine=None``, else the named DP-SGD engine."""
    if engine is None:
        return GradientEngine(net)
    if engine not in DP_SGD_ENGINES:
        raise ValueError(
            f"client.dp_sgd.engine: unknown engine {engine!r}; choose from {sorted(DP_SGD_ENGINES)}"
        )
    return DP_SGD_ENGINES[engine](net)
