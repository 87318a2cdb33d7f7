"""K clients' copies of one model, run as one model on a folded batch.

``StackedNet`` is a copy of the user's network in which every layer that holds parameters is
replaced by a *stacked* twin whose parameters carry a leading client axis ``K``. Activations
keep the model's own shapes, with the clients folded into the batch axis, example-major: row
``n·K + k`` is example ``n`` of client ``k``. Every parameter-free operation of the model's own
``forward`` (activations, pooling, dropout, ``view(x.size(0), -1)``, ``flatten``, residual sums,
softmax, ...) acts on each example alone, so it runs unchanged on the folded batch; only the
stacked layers need to know the clients:

- ``nn.Linear``: one batched GEMM over the client axis (``baddbmm``); with plain SGD (no
  momentum, no weight decay) its backward applies the update in place (``_FusedSGDLinear``), so
  the clients × weights gradient is never written (MNIST CNN, 10 clients: 35 ms instead of
  49 ms a client-step on the CPU); with plain SGD from shared start weights and a small
  history (``LowRankSteps``) it keeps the steps as factors W₀ − η Σ G_sᵀ X_s instead, so the
  forward and input-gradient products run against the one shared W₀ and the clients' weights
  are written once per bucket;
- ``nn.Conv1d`` / ``nn.Conv2d``: the folded batch ``(N·K, C, ...)`` *is* ``(N, K·C, ...)`` in
  memory, so one grouped convolution with ``K·groups`` groups does every client's convolution
  (measured: ``channels_last`` copies around it were not faster on the CPU);
- ``nn.GroupNorm`` / ``nn.LayerNorm``: the normalisation is per example; the affine part uses
  each client's (γ, β);
- ``nn.Embedding``: one lookup in the (K·V, D) stacked table (under DP-SGD: ghost norms over
  each example's tokens, clipped sums by one ``index_add_``);
- ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` and Opacus' ``DPLSTM``/``DPGRU``/``DPRNN`` (any
  ``num_layers``, ``bias``, ``batch_first``, ``bidirectional``; not ``proj_size``): the input
  projections of all time steps as one batched GEMM, then one ``baddbmm`` a time step for the
  clients' recurrent products (under DP-SGD: ghost norms of W_ih and W_hh over the T steps).

The stacked layers live in ``stacked_layers.py`` (Linear, convolutions, norms, Embedding and
``LowRankSteps``) and ``stacked_recurrent.py``; this module picks a layer's twin
(``stack_blocker`` says why there is none) and runs the model (``StackedNet``).

Backward is autograd's, so any graph built from these layers works (branches, shared
parameter-free modules, custom losses). ``stack_blocker`` names what cannot be stacked (layers
with batch statistics such as BatchNorm, LSTM projections, parameters in other layer types) and
``StackedNet.check`` verifies, on the first real batch, that the stacked forward equals each
client's own forward (a model that mixes the examples of a batch is caught there).

Sample-level DP-SGD (``clipped_sums``) is book-keeping clipping (Bu et al. 2023, Alg. 1, as in
``client/book_keeping.py``) over all clients × examples at once: one forward that books every
stacked layer's input, one activation-only backward for the layer-output gradients G, then
per-example squared norms (‖x‖²‖G‖² for a Linear on one position, the ghost norm
⟨a aᵀ, G Gᵀ⟩ for sequences, instantiated per-example gradients for convolutions and norms),
clip factors c = min(1, C/(‖g‖ + 1e-6)) (``privacy/mechanisms/clipping.py``) and each client's
clipped sum Σ_n c_kn g_kn as one product per layer.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from fl_lightning.client.stacked_layers import (
    LowRankSteps,
    Stack,
    StackedConv,
    StackedEmbedding,
    StackedLayer,
    StackedLinear,
    StackedNorm,
)
from fl_lightning.client.stacked_recurrent import StackedRecurrent, rnn_mode
from fl_lightning.privacy.mechanisms.clipping import clip_factors
from fl_lightning.utils.rng import probe_normal

NORM_STATS = (nn.modules.batchnorm._NormBase,)  # BatchNorm / InstanceNorm (batch statistics)


def _stacked_layer(prefix: str, module: nn.Module, stack: Stack, dp: bool) -> StackedLayer | str:
    kind = type(module).__name__
    if isinstance(module, nn.Linear):
        return StackedLinear(prefix, module, stack)
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        if dp and (module.groups != 1 or isinstance(module.padding, str)):
            return f"{kind} with groups or padding={module.padding!r} under DP-SGD"
        return StackedConv(prefix, module, stack)
    if isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
        return StackedNorm(prefix, module, stack)
    if isinstance(module, nn.Embedding):
        if module.padding_idx is not None or module.max_norm is not None:
            return "Embedding with padding_idx or max_norm"
        if module.scale_grad_by_freq or module.sparse:
            return "Embedding with scale_grad_by_freq or sparse"
        return StackedEmbedding(prefix, module, stack)
    if rnn_mode(module) is not None:
        if getattr(module, "proj_size", 0):
            return f"{kind} with proj_size > 0"
        return StackedRecurrent(prefix, module, stack)
    return (
        f"{kind} (stacked layers: Linear, Conv1d/2d, GroupNorm, LayerNorm, Embedding, LSTM/GRU/RNN)"
    )


def stack_blocker(net: nn.Module, *, dp: bool = False) -> str | None:
    """Why ``net`` cannot be run as a stack of clients (None when it can)."""
    inside: str | None = None  # a recurrent layer's name: its submodules are its own
    for name, m in net.named_modules():
        if inside is not None and name.startswith(inside):
            continue
        if rnn_mode(m) is not None:
            inside = f"{name}."
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return f"{name} ({type(m).__name__}) normalises across the examples of a batch"
        if isinstance(m, NORM_STATS) and getattr(m, "track_running_stats", False):
            return f"{name} ({type(m).__name__}) keeps running statistics"
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if own:
            layer = _stacked_layer(f"{name}.", m, Stack(), dp)
            if isinstance(layer, str):
                return f"parameters of {name or '<root>'} sit in {layer}"
            if len(own) != len(layer.keys):
                return f"{name} ({type(m).__name__}) has parameters besides weight/bias"
    return None


def _without_hooks(net: nn.Module) -> nn.Module:
    clone = copy.deepcopy(net)
    for m in clone.modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
            getattr(m, attr).clear()
        m._backward_pre_hooks.clear()
    return clone


class StackedNet:
    """``net`` with its parameter layers stacked over a client axis (see the module docstring).

    Args:
        net: the model (left untouched; a copy without hooks is transformed).
        names: the trainable parameters' names, in parameter order.
        dp: whether DP-SGD's ``clipped_sums`` will be used (stricter layer rules).
    """

    def __init__(self, net: nn.Module, names: list[str], *, dp: bool = False) -> None:
        reason = stack_blocker(net, dp=dp)
        if reason:
            raise ValueError(reason)
        self.template = _without_hooks(net)
        self.names = list(names)
        self.stack = Stack()
        self.net = copy.deepcopy(self.template)
        self.layers: list[StackedLayer] = []
        inside: str | None = None  # a replaced recurrent layer: skip its submodules
        for name, m in list(self.net.named_modules()):
            if inside is not None and name.startswith(inside):
                continue
            if rnn_mode(m) is not None:
                inside = f"{name}."
            if not any(p.requires_grad for p in m.parameters(recurse=False)):
                continue
            layer = _stacked_layer(f"{name}.", m, self.stack, dp)
            assert not isinstance(layer, str)
            self.layers.append(layer)
            if not name:
                raise ValueError("the model itself is a parameter layer; wrap it in a Sequential")
            parent_name, _, attr = name.rpartition(".")
            setattr(self.net.get_submodule(parent_name), attr, layer)
        keys = sorted(key for layer in self.layers for key in layer.keys)
        if keys != sorted(self.names):
            raise ValueError("the stacked layers do not own exactly the trainable parameters")

    def forward(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        *,
        fused_lr: float | None = None,
        low_rank: LowRankSteps | None = None,
    ) -> torch.Tensor:
        """The folded outputs of K = len(params[...]) clients on the folded batch ``x``. With
        ``fused_lr``, the backward pass of every Linear layer takes the plain SGD step
        W ← W − η·∇W on ``params`` in place and yields no gradient for it (memory traffic:
        the clients' weight gradients are never stored). With ``low_rank`` (plain SGD from
        shared start weights), the Linear layers it selects keep their steps as factors
        instead (their ``params`` stay W₀ until ``low_rank.finish_``)."""
        self.stack.params = params
        self.stack.k = next(iter(params.values())).shape[0]
        self.stack.fused_lr = fused_lr
        self.stack.low_rank = low_rank
        try:
            return self.net(x)
        finally:
            self.stack.params = {}
            self.stack.fused_lr = None
            self.stack.low_rank = None

    def train(self, mode: bool = True) -> StackedNet:
        self.net.train(mode)
        return self

    def check(self, params: dict[str, torch.Tensor], x: torch.Tensor, atol: float = 1e-4) -> None:
        """Raises ValueError unless the stacked forward of two clients (weights ``params[0]`` and
        a perturbed copy), each on two examples of its own, equals each client's own
        ``functional_call`` on them."""
        from torch.func import functional_call

        one = {n: p[:1] for n, p in params.items()}
        g = torch.Generator(device=x.device).manual_seed(0)
        two = {
            n: torch.cat([p, p + 0.1 * probe_normal(p.shape, generator=g, device=p.device)])
            for n, p in one.items()
        }
        folded = x[torch.arange(4, device=x.device) % len(x)]  # row n·2 + k
        if torch.is_floating_point(folded):  # four different examples
            noise = probe_normal(folded.shape, generator=g, device=x.device, dtype=x.dtype)
            folded = folded + 0.5 * noise
        self.net.eval()
        self.template.eval()
        try:
            with torch.no_grad():
                got = self.forward(two, folded)
                for k in range(2):
                    mine = {n: p[k] for n, p in two.items()}
                    want = functional_call(self.template, mine, (folded[k::2],))
                    if got[k::2].shape != want.shape or not torch.allclose(
                        got[k::2], want, atol=atol, rtol=1e-3
                    ):
                        raise ValueError(
                            "the stacked forward differs from the model's own (its forward "
                            "mixes the examples of a batch or reshapes across the batch axis)"
                        )
        finally:
            self.net.train()
            self.template.train()

    def clipped_sums(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        losses_of,  # noqa: ANN001 - (outputs) -> per-example losses, zero on padding
        *,
        n: int,
        max_grad_norm: float,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Σ_n clip_C(∇ℓ_kn) per client k (list in ``names`` order, each (K, *shape)) and the
        per-example losses (N·K), for the folded batch ``x`` of N examples per client (BK)."""
        k = next(iter(params.values())).shape[0]
        for layer in self.layers:
            layer.clear()
        self.stack.book = []
        if torch.is_floating_point(x):
            x = x.detach().requires_grad_(True)
        try:
            out = self.forward(params, x)
        finally:
            booked, self.stack.book = self.stack.book, None
        self.stack.params = params  # the layers' norms and sums read the weights' shapes
        try:
            losses = losses_of(out)
            direct = [layer for layer in booked if layer.out._version == layer.out_version]
            inputs = [layer.out for layer in direct]
            if len(direct) < len(booked):
                inputs.append(x)
            grads = torch.autograd.grad(losses.sum(), inputs, allow_unused=True)
            for layer, grad in zip(direct, grads):
                layer.grad_out = grad
            sq = x.new_zeros(n, k)
            for layer in booked:
                if layer.grad_out is None:
                    layer.grad_out = torch.zeros_like(layer.out)
                sq = sq + layer.squared_norms(n, k)
            factors = clip_factors(sq.sqrt(), max_grad_norm)
            sums: dict[str, torch.Tensor] = {}
            for layer in booked:
                for key, value in zip(layer.keys, layer.clipped_sums(factors)):
                    sums[key] = value
            zeros = {n_: torch.zeros_like(p) for n_, p in params.items() if n_ not in sums}
            sums.update(zeros)
            return [sums[name] for name in self.names], losses.detach()
        finally:
            self.stack.params = {}
            for layer in self.layers:
                layer.clear()
