"""Gradient engines of the local loop: plain SGD gradients and sample-level DP-SGD.

An engine turns one batch into gradients in ``p.grad``. The DP-SGD engines follow Abadi et al.
2016, Alg. 1: per-example gradients, each clipped to L2 norm C, summed, plus N(0, σ²C²), divided
by the *expected* batch size (Poisson sampling, so the sum's sensitivity is C). Engines are built
once per process and reconfigured per client (noise generator, σ, batch size), never rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from fl_lightning.client.book_keeping import phase
from fl_lightning.privacy.mechanisms.clipping import clip_factors
from fl_lightning.privacy.mechanisms.counter_noise import CounterStream
from fl_lightning.privacy.mechanisms.dp_sgd_noise import stream_noise
from fl_lightning.utils.heap import retain_freed_heap

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def forward_precision(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context of the local forward and loss for ``client.precision``: nothing for ``"32"``,
    ``torch.autocast(device.type, dtype=torch.bfloat16)`` for ``"bf16-mixed"`` (parameters,
    gradients and optimizer state stay float32; backward runs outside the context)."""
    if precision == "32":
        return contextlib.nullcontext()
    if precision == "bf16-mixed":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    raise ValueError(f"client.precision: expected '32' or 'bf16-mixed', got {precision!r}")


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
        generator: torch.Generator | CounterStream,
    ) -> None:
        """Per-client settings (ignored without DP)."""

    def compute_gradients(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, *, precision: str = "32"
    ) -> torch.Tensor:
        """Leaves the batch gradient in ``p.grad``; returns the batch's mean loss as a 0-dim
        tensor on the batch's device (NaN for an empty batch), so that a step does not wait for
        the device: the local loop reads the client's losses once, after its last step. The
        forward and loss run under ``forward_precision(precision)``, the backward outside it."""
        for p in self.params:
            p.grad = None
        if len(x) == 0:
            for p in self.params:
                p.grad = torch.zeros_like(p)
            return torch.full((), float("nan"), device=x.device)
        with forward_precision(precision, x.device):
            loss = loss_fn(self.net(x), y)
        loss.backward()
        return loss.detach()


class DPSGDEngine(GradientEngine):
    """Shared DP-SGD skeleton (Abadi et al. 2016, Alg. 1, lines "clip", "add noise", "descent").

    A logical (Poisson) batch is processed in physical chunks of at most
    ``max_physical_batch_size`` examples ("virtual batches": the memory of per-example state is
    bounded by the chunk, not the batch). Each chunk adds its *clipped* per-example gradients
    g̃_i = g_i · min(1, C / (‖g_i‖ + 1e-6)) to a preallocated sum; then once per logical batch

        g = (Σ_i g̃_i + N(0, σ²C² I)) / (q · n_i)        (Abadi et al. 2016, Alg. 1)

    with the noise drawn parameter by parameter, in parameter order, by Opacus'
    ``_generate_noise`` from the client's generator. Engines differ only in how they get the
    clipped sum of one chunk (``_clipped_sum_``), so with the same generator every engine
    releases the same gradient up to float rounding.
    """

    name = "dp"

    def __init__(self, net: nn.Module, *, max_physical_batch_size: int | None = None) -> None:
        super().__init__(net)
        self.max_physical_batch_size = max_physical_batch_size
        self.noise_multiplier = 1.0
        self.max_grad_norm = 1.0
        self.expected_batch_size = 1.0
        self.generator: torch.Generator | CounterStream | None = None
        self._sums = [torch.zeros_like(p) for p in self.params]
        # A step's per-example buffers would otherwise page-fault on every step (utils/heap.py).
        retain_freed_heap()

    def configure_client(
        self,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: float,
        generator: torch.Generator | CounterStream,
    ) -> None:
        self.noise_multiplier = float(noise_multiplier)
        self.max_grad_norm = float(max_grad_norm)
        self.expected_batch_size = float(expected_batch_size)
        self.generator = generator

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        size = self.max_physical_batch_size or n
        if n == 0:
            # An empty Poisson batch: no clipped gradient, the step releases noise only.
            return []
        return [(i, min(n, i + size)) for i in range(0, n, size)]

    def _clipped_sum_(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, sums: list[torch.Tensor]
    ) -> torch.Tensor:
        """Adds the chunk's clipped per-example gradients to ``sums``; returns its loss sum (a
        0-dim tensor on the chunk's device)."""
        raise NotImplementedError

    def clipped_sum(self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> list[torch.Tensor]:
        """Σ_i clip_C(g_i) over the batch, before noise (exposed for tests)."""
        for s in self._sums:
            s.zero_()
        for lo, hi in self._chunks(len(x)):
            self._clipped_sum_(x[lo:hi], y[lo:hi], loss_fn, self._sums)
        return [s.clone() for s in self._sums]

    def compute_gradients(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, *, precision: str = "32"
    ) -> torch.Tensor:
        if precision != "32":  # LocalTrainingConfig refuses it first; see its docstring
            raise ValueError(f"client.precision: {precision!r} is refused under client.dp_sgd")
        if self._sums:  # one call for every parameter
            torch._foreach_zero_(self._sums)
        chunk_losses = [
            self._clipped_sum_(x[lo:hi], y[lo:hi], loss_fn, self._sums)
            for lo, hi in self._chunks(len(x))
        ]
        with phase("dp_sgd.noise"):
            released = noisy_mean(
                self._sums,
                std=self.noise_multiplier * self.max_grad_norm,
                expected_batch_size=self.expected_batch_size,
                generator=self.generator,
            )
        for p, g in zip(self.params, released):
            p.grad = g
        if not chunk_losses:  # an empty Poisson batch
            return torch.full((), float("nan"), device=x.device)
        total = chunk_losses[0] if len(chunk_losses) == 1 else torch.stack(chunk_losses).sum()
        return total / len(x)


def noisy_mean_(
    sums: list[torch.Tensor],
    *,
    std: float,
    expected_batch_size: float,
    generator: torch.Generator | None,
) -> list[torch.Tensor]:
    """(Σ_i clip_C(g_i) + N(0, σ²C² I)) / (q · n_i) in place (Abadi et al. 2016, Alg. 1, "add
    noise"): the one DP-SGD release of every engine and of the vectorised executor. Noise is
    drawn parameter by parameter, in parameter order, by Opacus' ``_generate_noise`` from the
    client's generator; an empty Poisson batch (all-zero sums) still releases noise, as in
    Abadi et al. and Opacus."""
    from opacus.optimizers.optimizer import _generate_noise

    for s in sums:
        s.add_(_generate_noise(std=std, reference=s, generator=generator))
        s.div_(expected_batch_size)
    return sums


def noisy_mean(
    sums: list[torch.Tensor],
    *,
    std: float,
    expected_batch_size: float,
    generator: torch.Generator | CounterStream | None,
) -> list[torch.Tensor]:
    """The release of :func:`noisy_mean_`, bit for bit (the same draws in the same order;
    N + S equals S + N exactly in floating point), into fresh tensors, leaving ``sums``
    unchanged: each parameter's noise buffer becomes its released gradient, which saves the
    engines a copy of the sums per step. With a ``CounterStream`` (``client.dp_sgd.noise_rng:
    philox``) the noise is the stream's next step (``privacy/mechanisms/dp_sgd_noise.py:
    stream_noise``), the values the stacked executor draws for the client at that step."""
    from opacus.optimizers.optimizer import _generate_noise

    if isinstance(generator, CounterStream):  # client.dp_sgd.noise_rng: philox
        ref = sums[0]
        shapes = [s.shape for s in sums]
        released = stream_noise(generator, shapes, std=std, device=ref.device, dtype=ref.dtype)
    else:
        released = [_generate_noise(std=std, reference=s, generator=generator) for s in sums]
    if released:  # one call for every parameter, the same arithmetic as add_ and div_
        torch._foreach_add_(released, sums)
        torch._foreach_div_(released, expected_batch_size)
    return released


def per_sample_losses(loss_fn: LossFn, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The vector of per-example losses of a mean-reduced ``loss_fn`` (vmap over examples)."""
    from torch.func import vmap

    return vmap(lambda out, target: loss_fn(out.unsqueeze(0), target.unsqueeze(0)))(logits, y)


class OpacusEngine(DPSGDEngine):
    """Per-example gradients through Opacus' ``GradSampleModule`` hooks (``p.grad_sample``),
    clipped and summed by ``DPOptimizer.clip_and_accumulate`` (Yousefpour et al. 2021).

    The parameter update itself is done by the local loop's optimizer so that proximal terms
    and strategy corrections (post-processing of the noisy gradient) can be added in between.
    """

    name = "opacus"

    def __init__(self, net: nn.Module, *, max_physical_batch_size: int | None = None) -> None:
        super().__init__(net, max_physical_batch_size=max_physical_batch_size)
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        self.grad_sample_module = GradSampleModule(net, loss_reduction="mean")
        # A placeholder optimizer: DPOptimizer needs one, only clip_and_accumulate is used.
        self._dp = DPOptimizer(
            torch.optim.SGD(self.params, lr=0.0),
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            expected_batch_size=1,
            loss_reduction="mean",
        )

    @property
    def forward_module(self) -> nn.Module:
        return self.grad_sample_module

    def _clipped_sum_(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, sums: list[torch.Tensor]
    ) -> torch.Tensor:
        self._dp.zero_grad(set_to_none=True)
        self._dp.max_grad_norm = self.max_grad_norm
        loss = loss_fn(self.grad_sample_module(x), y)
        loss.backward()
        self._dp.clip_and_accumulate()
        # Opacus keeps its per-example and clipped-sum gradients as attributes of each parameter.
        for p, s in zip(self.params, sums):
            s.add_(p.summed_grad.view_as(s))  # type: ignore[attr-defined]  # set by Opacus
            p.grad_sample = None  # type: ignore[attr-defined]  # set by Opacus
            p.summed_grad = None  # type: ignore[attr-defined]  # set by Opacus
            p.grad = None
        return loss.detach() * len(x)


class GhostEngine(DPSGDEngine):
    """Ghost / fast gradient clipping (Goodfellow 2015; Li et al. 2022, "Large Language Models
    Can Be Strong Differentially Private Learners", §4) with Opacus'
    ``GradSampleModuleFastGradientClipping``.

    Pass 1: backward of the mean loss; the hooks compute per-example gradient *norms* (for
    ``nn.Linear``/``nn.Embedding`` without materialising per-example gradients, ghost norms;
    other layers from per-example gradients, freed at once). Pass 2: backward of
    Σ_i c_i ℓ_i with c_i = min(1, C/(‖g_i‖+1e-6)), which leaves Σ_i c_i g_i in ``p.grad``.
    This is ``opacus.utils.fast_gradient_clipping_utils.DPTensorFastGradientClipping.backward``,
    written out so that the loss may be any mean-reduced function.
    """

    name = "ghost"

    def __init__(self, net: nn.Module, *, max_physical_batch_size: int | None = None) -> None:
        super().__init__(net, max_physical_batch_size=max_physical_batch_size)
        from opacus.grad_sample import GradSampleModuleFastGradientClipping

        self.grad_sample_module = GradSampleModuleFastGradientClipping(
            net, loss_reduction="mean", max_grad_norm=1.0, use_ghost_clipping=True
        )

    @property
    def forward_module(self) -> nn.Module:
        return self.grad_sample_module

    def _clipped_sum_(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, sums: list[torch.Tensor]
    ) -> torch.Tensor:
        gsm = self.grad_sample_module
        gsm.max_grad_norm = self.max_grad_norm
        for p in self.params:
            p.grad = None
        losses = per_sample_losses(loss_fn, gsm(x), y)
        losses.mean().backward(retain_graph=True)
        coeff = gsm.get_clipping_coef()
        for p in self.params:
            p.grad = None
        gsm.disable_hooks()
        try:
            (coeff.detach() * losses).sum().backward()
        finally:
            gsm.enable_hooks()
        for p, s in zip(self.params, sums):
            assert p.grad is not None  # the second backward left Σ_i c_i g_i there
            s.add_(p.grad)
            p.grad = None
        return losses.detach().sum()


class FunctorchEngine(DPSGDEngine):
    """Per-example gradients as ``torch.func.vmap(grad(loss))`` over the examples of a chunk,
    through ``torch.func.functional_call`` on the live parameters (no hooks, no copies);
    clipped and summed with one ``einsum`` per parameter.
    """

    name = "functorch"

    def __init__(self, net: nn.Module, *, max_physical_batch_size: int | None = None) -> None:
        super().__init__(net, max_physical_batch_size=max_physical_batch_size)
        from torch.func import functional_call, grad_and_value, vmap

        self._names = [n for n, p in net.named_parameters() if p.requires_grad]

        def loss_one(
            params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor, fn: LossFn
        ) -> torch.Tensor:
            out = functional_call(net, (params, buffers), (x.unsqueeze(0),))
            return fn(out, y.unsqueeze(0))

        self._per_sample = vmap(grad_and_value(loss_one), in_dims=(None, None, 0, 0, None))

    def _clipped_sum_(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, sums: list[torch.Tensor]
    ) -> torch.Tensor:
        params = {n: p.detach() for n, p in zip(self._names, self.params)}
        buffers = dict(self.net.named_buffers())
        grads, losses = self._per_sample(params, buffers, x, y, loss_fn)
        g = [grads[n] for n in self._names]
        norms = torch.stack([gi.reshape(len(x), -1).norm(2, dim=1) for gi in g], dim=1).norm(
            2, dim=1
        )
        factors = clip_factors(norms, self.max_grad_norm)
        for gi, s in zip(g, sums):
            s.add_(torch.einsum("i,i...->...", factors, gi))
        return losses.detach().sum()


class BookKeepingEngine(DPSGDEngine):
    """Book-keeping clipping (Bu et al. 2023, Alg. 1): one forward that books every layer's
    input, one backward for the layer-output gradients only, then per-example norms (ghost or
    instantiated per layer) and the clipped sum as one product per layer; see
    ``fl_lightning.client.book_keeping``. ``nn.Linear``/``nn.Conv2d`` models only.
    """

    name = "bk"

    def __init__(self, net: nn.Module, *, max_physical_batch_size: int | None = None) -> None:
        super().__init__(net, max_physical_batch_size=max_physical_batch_size)
        from fl_lightning.client.book_keeping import BookKeeper

        self.keeper = BookKeeper(net, self.params)

    def _clipped_sum_(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, sums: list[torch.Tensor]
    ) -> torch.Tensor:
        with torch.enable_grad():
            loss_sum = self.keeper.clipped_sum_(
                x, y, loss_fn, max_grad_norm=self.max_grad_norm, sums=sums
            )
        return loss_sum.detach()


DP_SGD_ENGINES: dict[str, type[DPSGDEngine]] = {
    "opacus": OpacusEngine,
    "ghost": GhostEngine,
    "functorch": FunctorchEngine,
    "bk": BookKeepingEngine,
}
ENGINE_NAMES = (*DP_SGD_ENGINES, "auto")

#: Per-example gradient memory (chunk size × parameters × 4 bytes) above which ``auto`` picks
#: ghost clipping, which never holds per-example gradients of linear layers.
AUTO_PER_SAMPLE_BYTES = 2**30
#: Parameters in ``nn.Linear``/``nn.Embedding`` layers above which ``auto`` picks ghost clipping
#: (their ghost norms replace the largest per-example gradients; benchmarks/dpsgd_step.py).
AUTO_GHOST_LINEAR_PARAMS = 1_000_000


def auto_engine(net: nn.Module, *, batch_size: int | None = None) -> str:
    """The rule of ``engine: auto`` (docs/performance.md), from benchmarks/dpsgd_step.py:

    1. ``opacus`` if the model has Opacus recurrent layers (DPLSTM/DPGRU/DPRNN: their
       per-step hooks are the supported path) or buffers (functional_call would not update
       running statistics like the hooks do);
    2. ``bk`` if every trainable parameter sits in a layer book-keeping supports (Linear,
       Conv2d, GroupNorm, LayerNorm): one backward pass instead of two (MNIST CNN 1.2-1.4x a
       non-private step vs 2.3x for ghost on CPU); its memory is bounded per layer by ghost
       norms;
    3. ``ghost`` if the layers with ghost norms (``nn.Linear``, ``nn.Embedding``) hold at least
       ``AUTO_GHOST_LINEAR_PARAMS`` parameters, or if the per-example gradients of one physical
       batch would exceed ``AUTO_PER_SAMPLE_BYTES`` (memory bound);
    4. ``functorch`` otherwise.
    """
    from opacus.layers.dp_rnn import DPGRU, DPLSTM, DPRNN

    from fl_lightning.client.book_keeping import unsupported_layers

    if any(isinstance(m, (DPGRU, DPLSTM, DPRNN)) for m in net.modules()):
        return "opacus"
    if any(True for _ in net.buffers()):
        return "opacus"
    if not unsupported_layers(net):
        return "bk"
    n_params = sum(p.numel() for p in net.parameters() if p.requires_grad)
    ghosted = sum(
        p.numel()
        for m in net.modules()
        if isinstance(m, (nn.Linear, nn.Embedding))
        for p in m.parameters(recurse=False)
        if p.requires_grad
    )
    if ghosted >= AUTO_GHOST_LINEAR_PARAMS:
        return "ghost"
    if batch_size is not None and batch_size * n_params * 4 > AUTO_PER_SAMPLE_BYTES:
        return "ghost"
    return "functorch"


def build_engine(
    net: nn.Module,
    engine: str | None,
    *,
    max_physical_batch_size: int | None = None,
    batch_size: int | None = None,
) -> GradientEngine:
    """The non-private engine for ``engine=None``, else the named DP-SGD engine.

    ``batch_size`` (the expected logical batch) only informs ``auto``.
    """
    if engine is None:
        return GradientEngine(net)
    if engine == "auto":
        physical = batch_size
        if max_physical_batch_size is not None and batch_size is not None:
            physical = min(batch_size, max_physical_batch_size)
        engine = auto_engine(net, batch_size=physical)
    if engine not in DP_SGD_ENGINES:
        raise ValueError(
            f"client.dp_sgd.engine: unknown engine {engine!r}; choose from {list(ENGINE_NAMES)}"
        )
    return DP_SGD_ENGINES[engine](net, max_physical_batch_size=max_physical_batch_size)
