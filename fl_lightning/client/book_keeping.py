"""Single-backward DP-SGD: book-keeping clipping (Bu, Wang, Zha & Karypis 2023, "Differentially
Private Optimization on Large Model at Small Cost", ICML, Alg. 1 "BK").

For a layer s_i = W a_i + b (``nn.Linear``; ``nn.Conv2d`` after ``unfold``, where a_i is a
T × D matrix of patches and s_i is T × O) the per-example gradient is

    ∇_W ℓ_i = (∂ℓ_i/∂s_i)ᵀ a_i = G_iᵀ a_i,        ∇_b ℓ_i = Σ_t G_i[t]          (BK eq. 2)

so one forward pass that books the layer inputs a_i and ONE backward pass for the output
gradients G_i (``torch.autograd.grad`` with respect to the layer outputs, which skips every
weight gradient) are enough for everything:

- per-example norms, per layer either from the instantiated G_iᵀ a_i (cost T·D·O per example) or
  from the ghost norm ‖G_iᵀ a_i‖²_F = ⟨a_i a_iᵀ, G_i G_iᵀ⟩ (cost T²·(D+O), memory T² instead of
  D·O; Li et al. 2022, eq. 4), whichever is cheaper (Bu et al.'s "hybrid" rule, §3.3);
- the clipped sum Σ_i c_i G_iᵀ a_i = (c ⊙ G)ᵀ a with c_i = min(1, C / (‖g_i‖ + 1e-6)), one matrix
  product per layer, or Σ_i c_i (G_iᵀ a_i) from the instantiated per-example gradients.

Normalisation layers y = x̂ ⊙ γ + β (``nn.GroupNorm``, ``nn.LayerNorm``) have per-example
gradients ∇_γ ℓ_i = Σ_positions G_i ⊙ x̂_i and ∇_β ℓ_i = Σ_positions G_i, with x̂ recomputed from
the booked input; they are small and always instantiated.

The backward pass is ``torch.autograd.grad(Σ_i ℓ_i, x)`` with respect to the model *input*:
autograd then computes activation gradients only (no weight gradient, the expensive half of a
conv backward), and tensor hooks on the layer outputs catch G_i. Tensor hooks receive the
gradient of the value the layer produced even when a later op (``ReLU(inplace=True)``) modifies
it in place.

Compared with ghost clipping (two backward passes) this saves a whole backward; compared with
Opacus hooks it never stores per-example gradients of large layers. It needs a floating-point
model input and every trainable parameter in a supported layer (``nn.Linear``, ``nn.Conv2d``
with zero padding and one group, ``nn.GroupNorm``, ``nn.LayerNorm``), each used once per
forward pass; ``unsupported_layers`` names the others (``nn.Embedding``, recurrent layers, ...),
and ``engine: auto`` only picks this engine when there are none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from fl_lightning.privacy.mechanisms.clipping import clip_factors

#: Per-layer memory (bytes) of per-example gradients kept at once. Above it a Linear uses the
#: ghost norm and a convolution computes its norms chunk by chunk and its clipped sum as one
#: weight gradient of the clipped output gradients (slower, memory of one chunk).
MAX_INSTANTIATED_BYTES = 256 * 2**20
#: Examples per grouped convolution backward when instantiating per-example conv gradients.
CONV_CHUNK = 64
#: Input channels (per group, i.e. per example) from which the per-example conv gradients use
#: oneDNN's grouped kernels on the CPU; below, ATen's grouped path (one im2col + GEMM per
#: group, then a concatenation). Measured with one thread (CPU time, median of 9): MNIST CNN
#: conv2 (32 channels) 19.6 vs 26.3 ms at B = 64 and 101 vs 170 ms at 256; CIFAR CNN conv1
#: (3 channels) 6.0 vs 3.4 ms; conv2 (6) and MNIST conv1 (1) equal within 10 %.
ONEDNN_MIN_IN_CHANNELS = 8

_NORMS = (nn.GroupNorm, nn.LayerNorm)
#: The layers BK handles (``_is_supported``).
_Supported = nn.Linear | nn.Conv2d | nn.GroupNorm | nn.LayerNorm


def _is_supported(module: nn.Module) -> bool:
    if isinstance(module, nn.Conv2d):
        return (
            module.groups == 1
            and module.padding_mode == "zeros"
            and not isinstance(module.padding, str)
        )
    return isinstance(module, (nn.Linear, *_NORMS))


def unsupported_layers(net: nn.Module) -> list[str]:
    """Names (and classes) of the modules holding trainable parameters that BK cannot handle."""
    bad = []
    for name, module in net.named_modules():
        if not any(p.requires_grad for p in module.parameters(recurse=False)):
            continue
        if not _is_supported(module):
            bad.append(f"{name or '<root>'} ({type(module).__name__})")
    return bad


class _BookedLayer:
    """Hooks of one layer: the forward hook books its input, a tensor hook on its output catches
    G = ∂(Σ_i ℓ_i)/∂s during the backward pass."""

    def __init__(self, module: nn.Module, index: dict[int, int]) -> None:
        # BookKeeper refuses any other layer holding trainable parameters (unsupported_layers).
        assert isinstance(module, nn.Linear | nn.Conv2d | nn.GroupNorm | nn.LayerNorm)
        self.module: _Supported = module
        self.active = False
        self.inputs: torch.Tensor | None = None
        self.output: torch.Tensor | None = None
        self.output_version = 0
        self.grad_output: torch.Tensor | None = None
        self._booked = False
        self.weight_index = index.get(id(module.weight)) if module.weight is not None else None
        self.bias_index = index.get(id(module.bias)) if module.bias is not None else None
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if not self.active:
            return
        if self._booked:
            raise RuntimeError(
                f"client.dp_sgd.engine: bk: {type(module).__name__} is used twice in one forward "
                "pass (shared weights); use engine functorch or opacus"
            )
        self._booked = True
        self.inputs = args[0].detach()
        self.output = output
        self.output_version = output._version
        output.register_hook(self._catch)

    @property
    def modified_in_place(self) -> bool:
        return self.output is not None and self.output._version != self.output_version

    def _catch(self, grad: torch.Tensor) -> None:
        self.grad_output = grad

    def clear(self) -> None:
        self.inputs = None
        self.output = None
        self.grad_output = None
        self._booked = False


@contextmanager
def _without_onednn() -> Iterator[None]:
    """Disables oneDNN (CPU) convolutions only, leaving its other flags (TF32, determinism)."""
    mkldnn = torch.backends.mkldnn
    enabled = mkldnn.set_flags(False, None, None, None)[0]
    try:
        yield
    finally:
        mkldnn.set_flags(enabled, None, None, None)


def phase(name: str) -> AbstractContextManager:
    """A named range for torch.profiler (``benchmarks/dpsgd_step.py --profile``), only while
    a profiler runs: ``record_function`` costs ≈ 6 µs even when nothing records it."""
    return record_function(name) if torch.autograd._profiler_enabled() else nullcontext()


def _squared_norms(t: torch.Tensor) -> torch.Tensor:
    """‖t_i‖² of every row i of the leading dimension."""
    return torch.linalg.vector_norm(t.flatten(1), dim=1).square()


class _LayerGrads:
    """Per-example squared norms and the clipped sum of one layer's parameters (BK eq. 2)."""

    def __init__(self, layer: _BookedLayer) -> None:
        self.layer = layer
        self.module = layer.module
        self.x = layer.inputs
        self.grad_output = layer.grad_output
        self._rows: tuple[torch.Tensor, torch.Tensor] | None = None
        # Instantiated per-example weight gradients, B × (weight shape), as consecutive chunks
        # of examples (one chunk unless a convolution's were computed chunk by chunk).
        self.weight_grads: list[torch.Tensor] | None = None
        self.bias_grads: torch.Tensor | None = None  # B × (bias shape)

    def _activations(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, G): the booked input and output gradient, until ``_release_activations``."""
        assert self.x is not None and self.grad_output is not None, "bk: activations released"
        return self.x, self.grad_output

    def _conv(self) -> nn.Conv2d:
        assert isinstance(self.module, nn.Conv2d)  # only the convolution paths call this
        return self.module

    def _norm(self) -> nn.GroupNorm | nn.LayerNorm:
        assert isinstance(self.module, _NORMS)  # only the normalisation paths call this
        return self.module

    # ----- Linear ----------------------------------------------------------------------------
    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, G) of a Linear: its input as B × T × D rows and ∂ℓ/∂s as B × T × O (T = tokens)."""
        if self._rows is None:
            x, g = self._activations()
            self._rows = (
                x.reshape(x.shape[0], -1, x.shape[-1]),
                g.reshape(g.shape[0], -1, g.shape[-1]),
            )
        return self._rows

    def _linear_weight_norms(self) -> torch.Tensor:
        """‖∇_W ℓ_i‖² of a Linear: ‖g_i‖·‖a_i‖ for one position (Goodfellow 2015), else the
        instantiated G_iᵀ a_i (cost T·D·O per example) or the ghost norm ⟨a_i a_iᵀ, G_i G_iᵀ⟩
        (Li et al. 2022, eq. 4; cost T²·(D+O)), whichever is cheaper (Bu et al. 2023, §3.3)
        and, for the instantiated one, fits in ``MAX_INSTANTIATED_BYTES``."""
        x, g = self._activations()
        if g.dim() == 2:
            return _squared_norms(x) * _squared_norms(g)
        a, g = self.rows()
        batch, t, d = a.shape
        o = g.shape[-1]
        fits = batch * d * o * a.element_size() <= MAX_INSTANTIATED_BYTES
        if fits and t * d * o <= t * t * (d + o):
            self.weight_grads = [torch.bmm(g.transpose(1, 2), a)]
            return _squared_norms(self.weight_grads[0])
        return torch.bmm(a, a.transpose(1, 2)).mul_(torch.bmm(g, g.transpose(1, 2))).sum((1, 2))

    # ----- Conv2d ----------------------------------------------------------------------------
    def _conv_weight_norms(self) -> torch.Tensor:
        """‖∇_W ℓ_i‖² of a convolution from the per-example gradients G_i ⋆ x_i, computed by one
        grouped convolution backward per chunk of examples (one group per example, Rochette et
        al. 2019; no ``unfold``). They are kept for the clipped sum when all of them fit in
        ``MAX_INSTANTIATED_BYTES``, as the chunks themselves (no copy into one B × D tensor:
        a fresh buffer of that size costs its page faults on every step); otherwise each chunk
        is dropped after its norms (memory of one chunk) and the clipped sum is one ordinary
        weight gradient (``add_clipped_sum_``)."""
        m, (x, g) = self._conv(), self._activations()
        batch, per_example = x.shape[0], m.weight.numel()
        budget = MAX_INSTANTIATED_BYTES // (per_example * x.element_size())
        keep = batch <= budget
        chunk = min(CONV_CHUNK, max(1, budget))
        norms, kept = [], []
        for lo in range(0, batch, chunk):
            hi = min(batch, lo + chunk)
            grads = self._grouped_weight_grads(x[lo:hi], g[lo:hi]).view(hi - lo, per_example)
            norms.append(_squared_norms(grads))
            if keep:
                kept.append(grads)
        self.weight_grads = kept if keep else None
        return norms[0] if len(norms) == 1 else torch.cat(norms)

    def _grouped_weight_grads(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        m, batch = self._conv(), x.shape[0]
        # Only the weight's shape is read, but convolution_backward makes it contiguous: an
        # expanded zero would be copied into a B·O × I × k × k buffer (13 MB a chunk of 64 for
        # the MNIST CNN's conv2, 4 ms a step); an uninitialised one is never touched.
        placeholder = m.weight.new_empty((batch * m.out_channels, *m.weight.shape[1:]))
        if m.in_channels >= ONEDNN_MIN_IN_CHANNELS:
            return self._weight_grad(g, x, placeholder, groups=batch)
        # ATen's own grouped path: oneDNN's kernels for groups of fewer input channels than
        # its vector blocks are slower on the CPU (2x on the CIFAR CNN's first conv).
        with _without_onednn():
            return self._weight_grad(g, x, placeholder, groups=batch)

    def _weight_grad(
        self, g: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, *, groups: int
    ) -> torch.Tensor:
        """The weight gradient of the convolution of ``x`` (examples folded into channels when
        ``groups`` > 1) given the output gradient ``g``."""
        m = self._conv()
        if groups > 1:  # example i's channels form group i of a batch of one
            g = g.reshape(1, -1, *g.shape[2:])
            x = x.reshape(1, -1, *x.shape[2:])
        return torch.ops.aten.convolution_backward(
            g,
            x,
            weight,  # only its shape is read for the weight gradient
            None,
            list(m.stride),
            list(m.padding),
            list(m.dilation),
            False,
            [0, 0],
            groups,
            [False, True, False],
        )[1]

    # ----- normalisation layers: GroupNorm and LayerNorm ------------------------------------
    def _normalised_input(self) -> torch.Tensor:
        m, (x, _) = self._norm(), self._activations()
        if isinstance(m, nn.GroupNorm):
            return F.group_norm(x, m.num_groups, eps=m.eps)
        return F.layer_norm(x, m.normalized_shape, eps=m.eps)

    def _reduce_to_parameter(self, t: torch.Tensor) -> torch.Tensor:
        """Sums B × ... positions ... down to B × (parameter shape)."""
        m = self._norm()
        if isinstance(m, nn.GroupNorm):
            return t.flatten(2).sum(2)  # B × C
        k = len(m.normalized_shape)
        return t.flatten(1, t.dim() - k - 1).sum(1) if t.dim() > k + 1 else t

    # ----- both ------------------------------------------------------------------------------
    def squared_norms(self) -> torch.Tensor:
        m, (_, g) = self.module, self._activations()
        sq = g.new_zeros(g.shape[0])
        if m.weight is not None and m.weight.requires_grad:
            if isinstance(m, _NORMS):
                self.weight_grads = [self._reduce_to_parameter(g * self._normalised_input())]
                sq = _squared_norms(self.weight_grads[0])
            elif isinstance(m, nn.Conv2d):
                sq = self._conv_weight_norms()
            else:
                sq = self._linear_weight_norms()
        if m.bias is not None and m.bias.requires_grad:
            if isinstance(m, _NORMS):
                self.bias_grads = self._reduce_to_parameter(g)
            elif isinstance(m, nn.Conv2d):
                self.bias_grads = g.sum((2, 3))
            else:
                self.bias_grads = self.rows()[1].sum(1)
            sq = sq + _squared_norms(self.bias_grads)
        if self.weight_grads is not None or not (m.weight is not None and m.weight.requires_grad):
            self._release_activations()
        return sq

    def _release_activations(self) -> None:
        """Drops this layer's booked input and output gradient once the per-example gradients
        are kept (the MNIST CNN's first conv: 800 floats per example instead of 25,088)."""
        self.x = self.grad_output = self._rows = None
        self.layer.inputs = self.layer.grad_output = None

    def add_clipped_sum_(self, factors: torch.Tensor, sums: list[torch.Tensor]) -> None:
        """Adds Σ_i c_i ∇ℓ_i of this layer's weight and bias to their entries of ``sums``."""
        m = self.module
        if m.weight is not None and m.weight.requires_grad:
            assert self.layer.weight_index is not None  # a trainable weight is one of params
            # Computed, then added: the arithmetic of the stored reproduction runs (a fused
            # addmv_/addmm_ into the sum would save a temporary but round differently).
            if self.weight_grads is not None:  # Σ over chunks of Σ_i c_i ∇_W ℓ_i
                weight, lo = None, 0
                for grads in self.weight_grads:
                    part = torch.tensordot(factors[lo : lo + len(grads)], grads, dims=1)
                    weight = part if weight is None else weight.add_(part)
                    lo += len(grads)
                assert weight is not None  # at least one chunk
            elif isinstance(m, nn.Conv2d):  # Σ_i c_i (G_i ⋆ x_i): the weight gradient of c ⊙ G
                x, g = self._activations()  # kept: no weight_grads, so not released
                weight = self._weight_grad(g * factors.view(-1, 1, 1, 1), x, m.weight, groups=1)
            else:  # (c ⊙ G)ᵀ a, one product
                a, g = self.rows()
                weight = (g * factors.view(-1, 1, 1)).flatten(0, 1).t() @ a.flatten(0, 1)
            sums[self.layer.weight_index].add_(weight.view_as(m.weight))
        if self.bias_grads is not None:
            assert self.layer.bias_index is not None and m.bias is not None  # a trainable bias
            sums[self.layer.bias_index].add_(
                torch.tensordot(factors, self.bias_grads, dims=1).view_as(m.bias)
            )


class BookKeeper:
    """Books the layers of ``net`` and computes the clipped per-example gradient sum of a batch
    with one forward and one activation-only backward pass (BK, Alg. 1).

    Args:
        net: the model; every trainable parameter must sit in a supported layer.
        params: the trainable parameters, in the order of the engine's sums.
    """

    def __init__(self, net: nn.Module, params: Sequence[torch.Tensor]) -> None:
        bad = unsupported_layers(net)
        if bad:
            raise ValueError(
                "client.dp_sgd.engine: bk supports nn.Linear, nn.Conv2d (zero padding, one "
                f"group), nn.GroupNorm and nn.LayerNorm; unsupported: {', '.join(bad)}; use "
                "functorch, ghost or opacus"
            )
        index = {id(p): i for i, p in enumerate(params)}
        self.net = net
        self.layers = [
            _BookedLayer(m, index)
            for m in net.modules()
            if any(p.requires_grad for p in m.parameters(recurse=False))
        ]

    def _backward(self, loss: torch.Tensor, model_input: torch.Tensor) -> None:
        """The one activation-only backward pass: gradients with respect to the layer outputs
        (no weight gradient is computed). An output modified in place after the layer (e.g. by
        ``ReLU(inplace=True)``) is not a valid ``inputs=`` target any more; its tensor hook
        catches its gradient instead, provided the backward runs through the layer, which a
        backward to the model input guarantees."""
        booked = [layer for layer in self.layers if layer.output is not None]
        direct = [layer for layer in booked if not layer.modified_in_place]
        inputs = [out for layer in direct if (out := layer.output) is not None]  # all: booked
        if len(direct) < len(booked):
            if not model_input.requires_grad:
                raise ValueError(
                    "client.dp_sgd.engine: bk needs a floating-point model input when a layer's "
                    "output is modified in place; use functorch"
                )
            inputs.append(model_input)
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        for layer, grad in zip(direct, grads):
            layer.grad_output = grad

    def clipped_sum_(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],  # dp_sgd.LossFn
        *,
        max_grad_norm: float,
        sums: list[torch.Tensor],
    ) -> torch.Tensor:
        """Adds Σ_i min(1, C/(‖g_i‖+1e-6)) g_i to ``sums``; returns Σ_i ℓ_i.

        ``loss_fn`` is mean-reduced over the examples (the engines' contract), so
        ``len(x) · loss_fn`` is Σ_i ℓ_i and its gradient with respect to example i's layer
        outputs is ∂ℓ_i/∂s_i (examples do not interact: no batch statistics).
        """
        if torch.is_floating_point(x):
            # Requires grad only so that a backward to the input exists (see ``_backward``).
            x = x.detach().requires_grad_(True)
        for layer in self.layers:
            layer.clear()
            layer.active = True
        try:
            with phase("bk.forward"):
                logits = self.net(x)
        finally:
            for layer in self.layers:
                layer.active = False
        try:
            with phase("bk.forward"):  # the loss, outside the booking (the layers are inactive)
                loss_sum = loss_fn(logits, y) * len(x)
            with phase("bk.backward"):
                self._backward(loss_sum, x)
            parts = [_LayerGrads(layer) for layer in self.layers if layer.grad_output is not None]
            with phase("bk.norms"):
                sq = torch.stack([part.squared_norms() for part in parts]).sum(0)
                factors = clip_factors(sq.sqrt(), max_grad_norm)
            with phase("bk.clipped_sum"):
                for part in parts:
                    part.add_clipped_sum_(factors, sums)
            return loss_sum.detach()
        finally:
            for layer in self.layers:
                layer.clear()
