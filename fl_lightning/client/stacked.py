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
clip factors c = min(1, C/(‖g‖ + 1e-6)) (``privacy/clipping.py``) and each client's clipped sum
Σ_n c_kn g_kn as one product per layer.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.book_keeping import _squared_norms, _without_onednn
from fl_lightning.privacy.clipping import clip_factors

_NORM_STATS = (nn.modules.batchnorm._NormBase,)
#: per convolution shape: whether oneDNN computes per-example gradients faster (timed once)
_ONEDNN_CHOICE: dict[tuple, bool] = {}  # BatchNorm / InstanceNorm (batch statistics)


class _Stack:
    """What the stacked layers read during one forward: the clients' parameters and K."""

    def __init__(self) -> None:
        self.k = 1
        self.params: dict[str, torch.Tensor] = {}
        self.book: list[_StackedLayer] | None = None
        self.fused_lr: float | None = None  # plain SGD fused into Linear backward passes
        self.low_rank: LowRankSteps | None = None  # plain SGD of Linear layers as factors


class _StackedLayer(nn.Module):
    """A layer whose parameters are ``stack.params[prefix + name]`` with a leading client axis."""

    param_names: tuple[str, ...] = ()
    stack: _Stack  # shared, not a submodule
    x: Any  # booked input (DP-SGD), None outside clipped_sums
    out: Any  # booked output
    grad_out: Any  # its gradient
    weight_grads: Any
    bias_grads: Any
    grads: list[torch.Tensor]

    def __init__(self, prefix: str, module: nn.Module, stack: _Stack) -> None:
        super().__init__()
        self.keys = tuple(
            f"{prefix}{n}" for n in self.param_names if getattr(module, n, None) is not None
        )
        self.has_bias = getattr(module, "bias", None) is not None
        self.__dict__["stack"] = stack  # not a submodule
        self.x = self.out = self.grad_out = None
        self.out_version = 0

    def _p(self, i: int) -> torch.Tensor:
        return self.stack.params[self.keys[i]]

    def _book(self, x: torch.Tensor, out: torch.Tensor) -> None:
        book = self.stack.book
        if book is None:
            return
        if self.out is not None:
            raise RuntimeError(f"{self.keys[0]}: layer used twice in one forward pass")
        book.append(self)
        self.x, self.out, self.out_version = x.detach(), out, out._version
        out.register_hook(self._catch)

    def _catch(self, grad: torch.Tensor) -> None:
        self.grad_out = grad

    def clear(self) -> None:
        self.x = self.out = self.grad_out = None

    # DP-SGD: per-example squared norms (N, K) and the clipped sums (K, *shape)
    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} under DP-SGD")

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError


class _FusedSGDLinear(torch.autograd.Function):
    """y = x Wᵀ + b per client whose backward takes the plain SGD step W ← W − η·Gᵀx in place
    (one ``baddbmm_``, the clients × weights gradient is never written) after computing the
    input gradient with the old W. Returns no weight gradient."""

    @staticmethod
    def forward(ctx, x, w, b, lr):  # noqa: ANN001, ANN205
        ctx.save_for_backward(x, w)
        ctx.lr, ctx.has_bias = lr, b is not None
        ctx.bias = b
        if b is not None:
            return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        return torch.bmm(x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, gy):  # noqa: ANN001, ANN205
        x, w = ctx.saved_tensors
        gx = torch.bmm(gy, w) if ctx.needs_input_grad[0] else None
        w.detach().baddbmm_(gy.transpose(1, 2), x, alpha=-ctx.lr)
        if ctx.has_bias:
            ctx.bias.detach().add_(gy.sum(1), alpha=-ctx.lr)
        return gx, None, None, None


class LowRankSteps:
    """Plain SGD steps of stacked Linear layers kept as low-rank factors over a bucket.

    Every client of a bucket starts from the same weights W₀ (the global model), and a plain
    SGD step on a Linear layer is W ← W − η Gᵀ X (G: the output gradients, X: the inputs of the
    step's R rows), so after t steps W_t = W₀ − η Σ_{s<t} G_sᵀ X_s. Its forward
    X W_tᵀ = X W₀ᵀ − η Σ_s (X X_sᵀ) G_s is then one matmul with the *shared* W₀ for all clients
    plus products with the R·t rows of history, and likewise the input gradient
    G W_t = G W₀ − η Σ_s (G G_sᵀ) X_s; ``finish_`` writes W_t into the stacked weights once.
    The K clients × weights are then streamed once per bucket instead of about four times per
    step (forward, input gradient, in-place update), which is what bounds stacked Linear
    layers at small batches. Exact in real arithmetic; float rounding differs from the step
    by step update (the sums are ordered differently).

    A layer uses it when its history stays small: the bucket's rows per client R_total
    (predicted at its first step) satisfy R_total · (in + out) ≤ ``ratio`` · in · out.

    Args:
        start: per weight key, the (out, in) weights every client starts from.
        lr: the SGD learning rate η (no momentum, no weight decay).
        clients: the bucket's K (later steps run a suffix of its clients).
        examples: examples per client over the bucket's steps (the widest client).
        ratio: the history-size rule above.
    """

    def __init__(
        self,
        start: dict[str, torch.Tensor],
        lr: float,
        *,
        clients: int,
        examples: int,
        ratio: float = 0.5,
    ) -> None:
        self.start, self.lr, self.clients = start, lr, clients
        self.examples, self.ratio = examples, ratio
        self.use: dict[str, bool] = {}
        self.history: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def applies(self, key: str, rows: int, examples: int, w: torch.Tensor) -> bool:
        """Whether the layer ``key`` (weights ``w``: (K, out, in)) runs as factors this bucket,
        decided on its first step (``rows`` per client of ``examples`` per client)."""
        if key not in self.use:
            out_f, in_f = w.shape[1], w.shape[2]
            total = rows * self.examples / max(examples, 1)
            self.use[key] = key in self.start and total * (in_f + out_f) <= (
                self.ratio * in_f * out_f
            )
            self.history[key] = []
        return self.use[key]

    def finish_(self, weights: dict[str, torch.Tensor]) -> None:
        """W ← W₀ − η Σ_s G_sᵀ X_s for every factored layer (``weights``: the (K, out, in)
        stacked weights, still W₀), in one batched GEMM each (the clients that left the bucket
        early have zero rows in the later steps)."""
        for key, steps in self.history.items():
            if not steps:
                continue
            w = weights[key]
            k = w.shape[0]
            xs, gs = [], []
            for x, g in steps:
                if x.shape[0] < k:  # a suffix of the clients took this step
                    pad = k - x.shape[0]
                    x = torch.cat([x.new_zeros(pad, *x.shape[1:]), x])
                    g = torch.cat([g.new_zeros(pad, *g.shape[1:]), g])
                xs.append(x)
                gs.append(g)
            w.baddbmm_(  # w still holds W₀: the factored steps never wrote it
                torch.cat(gs, 1).transpose(1, 2), torch.cat(xs, 1), alpha=-self.lr
            )
        self.history = {key: [] for key in self.history}


class _LowRankLinear(torch.autograd.Function):
    """y_k = x_k W_tᵀ + b_k with W_t = W₀ − η Σ_s G_sᵀ X_s (``LowRankSteps``); the backward
    returns the input gradient through W_t, records (X, G) as the step's update and steps the
    bias in place; no weight gradient."""

    @staticmethod
    def forward(ctx, x, b, steps, key):  # noqa: ANN001, ANN205
        k = x.shape[0]
        w0 = steps.start[key]
        past = [(hx[-k:], hg[-k:]) for hx, hg in steps.history[key]]
        y = torch.mm(x.reshape(-1, x.shape[-1]), w0.t()).view(k, x.shape[1], -1)  # shared W₀
        if b is not None:
            y += b.unsqueeze(1)
        for hx, hg in past:
            y.baddbmm_(torch.bmm(x, hx.transpose(1, 2)), hg, alpha=-steps.lr)
        ctx.save_for_backward(x)
        ctx.steps, ctx.key, ctx.past, ctx.bias = steps, key, past, b
        return y

    @staticmethod
    def backward(ctx, gy):  # noqa: ANN001, ANN205
        (x,) = ctx.saved_tensors
        steps = ctx.steps
        gy = gy.contiguous()
        gx = None
        if ctx.needs_input_grad[0]:
            w0 = steps.start[ctx.key]
            gx = torch.mm(gy.view(-1, gy.shape[-1]), w0).view(*gy.shape[:2], -1)
            for hx, hg in ctx.past:
                gx.baddbmm_(torch.bmm(gy, hg.transpose(1, 2)), hx, alpha=-steps.lr)
        steps.history[ctx.key].append((x.detach(), gy))
        if ctx.bias is not None:
            ctx.bias.detach().add_(gy.sum(1), alpha=-steps.lr)
        return gx, None, None, None


class _Linear(_StackedLayer):
    param_names = ("weight", "bias")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.stack.k
        w = self._p(0)
        d, o = x.shape[-1], w.shape[1]
        n = x.shape[0] // k
        xk = x.reshape(n, k, -1, d).transpose(0, 1).reshape(k, -1, d)  # (K, N·R, in)
        bias = self._p(1) if self.has_bias else None
        steps = self.stack.low_rank
        if steps is not None and steps.applies(self.keys[0], xk.shape[1], n, w):
            y = _LowRankLinear.apply(xk, bias, steps, self.keys[0])
        elif self.stack.fused_lr is not None:
            y = _FusedSGDLinear.apply(xk, w, bias, self.stack.fused_lr)
        elif bias is not None:
            y = torch.baddbmm(bias.unsqueeze(1), xk, w.transpose(1, 2))
        else:
            y = torch.bmm(xk, w.transpose(1, 2))
        self._book(xk, y)
        return y.view(k, n, -1, o).transpose(0, 1).reshape(*x.shape[:-1], o)

    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        return _linear_squared_norms(self.x, self.grad_out, n, k, self.has_bias)

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        return _linear_clipped_sums(self.x, self.grad_out, factors, self.has_bias)


def _linear_squared_norms(
    a: torch.Tensor, g: torch.Tensor, n: int, k: int, has_bias: bool
) -> torch.Tensor:
    """(N, K) per-example ‖∇W‖² (+ ‖∇b‖²) of y = a Wᵀ + b from the inputs ``a`` (K, N·R, in)
    and output gradients ``g`` (K, N·R, out) of R rows per example (example-major)."""
    r = a.shape[1] // n
    if r == 1:  # ‖G_iᵀ a_i‖ = ‖g_i‖·‖a_i‖ (Goodfellow 2015)
        sq = a.square().sum(-1) * g.square().sum(-1)  # (K, N)
    else:  # ghost norm ⟨a aᵀ, G Gᵀ⟩ (Li et al. 2022, eq. 4)
        a3 = a.reshape(k * n, r, a.shape[-1])
        g3 = g.reshape(k * n, r, g.shape[-1])
        sq = (a3 @ a3.transpose(1, 2)).mul_(g3 @ g3.transpose(1, 2)).sum((1, 2)).view(k, n)
    if has_bias:
        sq = sq + g.reshape(k, n, r, -1).sum(2).square().sum(-1)
    return sq.t()


def _linear_clipped_sums(
    a: torch.Tensor, g: torch.Tensor, factors: torch.Tensor, has_bias: bool
) -> list[torch.Tensor]:
    """Each client's Σ_n c_kn ∇W_kn (and ∇b) of y = a Wᵀ + b, as one product: (K, out, in)."""
    k, rows = g.shape[:2]
    n = factors.shape[0]
    c = factors.t().repeat_interleave(rows // n, dim=1).unsqueeze(-1)  # (K, N·R, 1)
    if a.shape[-1] <= g.shape[-1]:  # Gᵀ (c ⊙ a) = (c ⊙ G)ᵀ a: scale the narrower operand
        out = [torch.bmm(g.transpose(1, 2), a * c)]
    else:
        out = [torch.bmm((g * c).transpose(1, 2), a)]
    if has_bias:
        out.append(torch.bmm(c.transpose(1, 2), g).squeeze(1))
    return out


class _Conv(_StackedLayer):
    param_names = ("weight", "bias")

    def __init__(self, prefix: str, module: nn.Conv1d | nn.Conv2d, stack: _Stack) -> None:
        super().__init__(prefix, module, stack)
        self.dim = 1 if isinstance(module, nn.Conv1d) else 2
        self.stride, self.dilation = list(module.stride), list(module.dilation)
        self.groups = module.groups
        self.pad_mode = module.padding_mode
        self.pad_args = module._reversed_padding_repeated_twice
        self.padding: Any = module.padding if module.padding_mode == "zeros" else 0
        self.conv: Any = F.conv1d if self.dim == 1 else F.conv2d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.stack.k
        w = self._p(0)
        if self.pad_mode != "zeros":
            x = F.pad(x, self.pad_args, mode=self.pad_mode)
        n = x.shape[0] // k
        xg = x.reshape(n, k * x.shape[1], *x.shape[2:])  # (N, K·C, ...): the same memory
        bias = self._p(1).reshape(-1) if self.has_bias else None
        y = self.conv(
            xg,
            w.reshape(-1, *w.shape[2:]),
            bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups * k,
        )
        self._book(xg, y)
        return y.contiguous().view(n * k, w.shape[1], *y.shape[2:])

    def _padding_list(self) -> list[int]:
        if isinstance(self.padding, str):
            raise NotImplementedError("Conv with padding='same' under DP-SGD")
        return list(self.padding) if not isinstance(self.padding, int) else [self.padding] * 2

    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        """Per-example weight gradients G_i ⋆ x_i by one grouped convolution backward, one group
        per example (Rochette et al. 2019), as ``book_keeping.py`` does."""
        if self.groups != 1:
            raise NotImplementedError("grouped Conv under DP-SGD")
        w = self._p(0)
        x, g = self.x, self.grad_out
        per_example = w[0].numel()
        placeholder = w.new_zeros(1).expand(n * k * w.shape[1], *w.shape[2:])

        def per_example_grads() -> torch.Tensor:
            return torch.ops.aten.convolution_backward(
                g.reshape(1, -1, *g.shape[2:]),
                x.reshape(1, -1, *x.shape[2:]),
                placeholder,
                None,
                self.stride,
                self._padding_list()[: self.dim],
                self.dilation,
                False,
                [0] * self.dim,
                n * k,
                [False, True, False],
            )[1]

        # oneDNN's kernels for many tiny groups are faster for some shapes and slower for
        # others (measured on the CPU: 2.3x faster for the MNIST CNN's second conv, 1.7x
        # slower for its first); the first call of each shape times both and keeps the faster
        key = (tuple(x.shape), tuple(g.shape), x.device.type)
        choice = _ONEDNN_CHOICE.get(key)
        if choice is None:
            timings = {}
            for use in (False, True):
                start = time.perf_counter()
                if use:
                    grads = per_example_grads()
                else:
                    with _without_onednn():
                        grads = per_example_grads()
                timings[use] = time.perf_counter() - start
            _ONEDNN_CHOICE[key] = timings[True] < timings[False]
        elif choice:
            grads = per_example_grads()
        else:
            with _without_onednn():
                grads = per_example_grads()
        self.weight_grads = grads.view(n, k, per_example)
        sq = _squared_norms(self.weight_grads.view(n * k, -1)).view(n, k)
        if self.has_bias:
            self.bias_grads = g.reshape(n, k, w.shape[1], -1).sum(-1)
            sq = sq + self.bias_grads.square().sum(-1)
        return sq

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        w = self._p(0)
        out = [torch.einsum("nk,nkp->kp", factors, self.weight_grads).view_as(w)]
        if self.has_bias:
            out.append(torch.einsum("nk,nko->ko", factors, self.bias_grads))
        self.weight_grads = self.bias_grads = None
        return out


class _Norm(_StackedLayer):
    """GroupNorm / LayerNorm: per-example normalisation x̂, then each client's x̂ ⊙ γ + β."""

    param_names = ("weight", "bias")

    def __init__(self, prefix: str, module: nn.GroupNorm | nn.LayerNorm, stack: _Stack) -> None:
        super().__init__(prefix, module, stack)
        self.group = isinstance(module, nn.GroupNorm)
        self.num_groups = getattr(module, "num_groups", 0)
        self.shape = tuple(getattr(module, "normalized_shape", ()))
        self.eps = module.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.stack.k
        n = x.shape[0] // k
        if self.group:
            xhat = F.group_norm(x, self.num_groups, eps=self.eps)
            view = xhat.reshape(n, k, x.shape[1], -1)  # (N, K, C, S)
            pshape = (1, k, x.shape[1], 1)
        else:
            xhat = F.layer_norm(x, self.shape, eps=self.eps)
            view = xhat.reshape(n, k, -1, self.stack.params[self.keys[0]][0].numel())  # (N,K,M,D)
            pshape = (1, k, 1, -1)
        y = view * self._p(0).reshape(pshape)
        if self.has_bias:
            y = y + self._p(1).reshape(pshape)
        self._book(view, y)
        return y.reshape(x.shape)

    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        g, xhat = self.grad_out, self.x
        axis = -1 if self.group else 2
        self.grads = [(g * xhat).sum(axis)]  # (N, K, C) or (N, K, D)
        if self.has_bias:
            self.grads.append(g.sum(axis))
        sq = self.grads[0].square().sum(-1)
        for t in self.grads[1:]:
            sq = sq + t.square().sum(-1)
        return sq

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        out = [
            torch.einsum("nk,nkp->kp", factors, t).view_as(self._p(i))
            for i, t in enumerate(self.grads)
        ]
        self.grads = []
        return out


class _Embedding(_StackedLayer):
    param_names = ("weight",)

    def __init__(self, prefix: str, module: nn.Embedding, stack: _Stack) -> None:
        super().__init__(prefix, module, stack)
        self.scale_grad_by_freq, self.sparse = module.scale_grad_by_freq, module.sparse

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.stack.k
        w = self._p(0)
        client = torch.arange(x.shape[0], device=x.device) % k
        offset = (client * w.shape[1]).view(-1, *[1] * (x.dim() - 1))
        rows = x + offset  # row of the (K·V, D) stacked table each token reads
        y = F.embedding(rows, w.reshape(-1, w.shape[-1]))
        if self.stack.book is not None and not y.requires_grad:
            # DP-SGD books layer outputs in an activation-only backward: with integer tokens
            # and weights outside the graph, the lookup starts the graph itself.
            y.requires_grad_(True)
        self._book(rows, y)
        return y

    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        """‖Σ_l e_{t_l} G_lᵀ‖² of each example's L tokens t and output gradients G, as the
        ghost norm Σ_{l,l'} [t_l = t_l'] ⟨G_l, G_l'⟩ (Li et al. 2022, the same rule as Opacus'
        ghost clipping of embeddings), without the per-example table gradient."""
        rows = self.x.reshape(n * k, -1)  # (N·K, L), example-major like the folded batch
        g = self.grad_out.reshape(n * k, rows.shape[1], -1)  # (N·K, L, D)
        same = (rows.unsqueeze(2) == rows.unsqueeze(1)).to(g.dtype)
        return (g @ g.transpose(1, 2)).mul_(same).sum((1, 2)).view(n, k)

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        """Each client's Σ_n c_kn ∇ℓ_kn: every token's clipped output gradient added to the
        row it read (rows of different clients never overlap in the stacked table)."""
        w = self._p(0)
        d = w.shape[-1]
        g = self.grad_out.reshape(factors.numel(), -1, d) * factors.reshape(-1, 1, 1)
        table = g.new_zeros(w.shape[0] * w.shape[1], d)
        table.index_add_(0, self.x.reshape(-1), g.reshape(-1, d))
        return [table.view_as(w)]


def _rnn_mode(module: nn.Module) -> str | None:
    """``LSTM``, ``GRU``, ``RNN_TANH`` or ``RNN_RELU`` for torch's recurrent layers and Opacus'
    drop-ins (``DPLSTM``/``DPGRU``/``DPRNN``: the same equations and parameter names); None for
    any other module."""
    if isinstance(module, nn.RNNBase):
        return module.mode
    kind = type(module).__name__
    if kind in ("DPLSTM", "DPGRU") and hasattr(module, "cell_params"):
        return kind[2:]
    params: Any = getattr(module, "cell_params", None)
    if kind == "DPRNN" and params is not None:
        return "RNN_" + str(params.get("nonlinearity", "tanh")).upper()
    return None


class _LSTMSteps(torch.autograd.Function):
    """The recurrence of one LSTM cell over all time steps for K clients, given the input
    projections ``gi`` (K, T, N, 4H) (x W_ihᵀ + b_ih + b_hh): per step
    pre = gi_t + h W_hhᵀ, i, f, o = σ(·), g = tanh(·), c = f c + i g, h = o tanh(c) (the
    ``nn.LSTM`` equations). Its backward runs backpropagation through time by hand, one
    ``bmm`` a step for the hidden gradient, and forms ∇W_hh = Σ_t G_tᵀ h_{t-1} as one batched
    GEMM over all steps (instead of one small weight-gradient GEMM and sum per step), with
    G_t = ∂ℓ/∂pre_t returned as the gradient of ``gi``. Returns the (K, T, N, H) outputs and
    the last (h, c)."""

    @staticmethod
    def forward(ctx, gi, h0, c0, w_hh, reverse, probe=None, sink=None):  # noqa: ANN001, ANN205
        # states time-major inside, (T, K, N, ·): every step writes contiguous slices
        k, t, n, four = gi.shape
        hidden = four // 4
        g_block = slice(2 * hidden, 3 * hidden)
        acts = gi.new_empty(t, k, n, four)  # σ(i), σ(f), tanh(g), σ(o)
        hs = gi.new_empty(t, k, n, hidden)
        cs = gi.new_empty(t, k, n, hidden)
        tanh_cs = gi.new_empty(t, k, n, hidden)
        h, c = h0, c0
        w_t = w_hh.transpose(1, 2)
        for s in range(t - 1, -1, -1) if reverse else range(t):
            pre = gi[:, s].clone() if h is None else torch.baddbmm(gi[:, s], h, w_t)
            # tanh(x) = 2σ(2x) − 1: one sigmoid for all four gates (torch's CPU tanh is
            # several times slower than its sigmoid; the results agree to float rounding)
            pre[..., g_block] *= 2
            a = torch.sigmoid(pre, out=acts[s])
            a[..., g_block].mul_(2).sub_(1)
            gate_i, gate_f, gate_g, gate_o = a.chunk(4, -1)
            if c is None:
                c = torch.mul(gate_i, gate_g, out=cs[s])
            else:
                c = torch.addcmul(gate_i * gate_g, gate_f, c, out=cs[s])
            tanh_c = torch.sigmoid(c * 2, out=tanh_cs[s]).mul_(2).sub_(1)
            h = torch.mul(gate_o, tanh_c, out=hs[s])
        ctx.save_for_backward(acts, hs, cs, tanh_cs, h0, c0, w_hh)
        ctx.reverse, ctx.sink, ctx.probe = reverse, sink, probe is not None
        return hs.transpose(0, 1), h.clone(), c.clone()

    @staticmethod
    def backward(ctx, d_hs, d_h, d_c):  # noqa: ANN001, ANN205
        acts, hs, cs, tanh_cs, h0, c0, w_hh = ctx.saved_tensors
        t, k, n, hidden = hs.shape
        order = list(range(t - 1, -1, -1)) if ctx.reverse else list(range(t))
        d_pre = acts.new_empty(k, t, n, 4 * hidden)  # the layout of gi
        d_h, d_c = d_h.clone(), d_c.clone()
        prev_c = [c0, *[cs[s] for s in order[:-1]]]
        g_block = slice(2 * hidden, 3 * hidden)
        for j in range(t - 1, -1, -1):
            s = order[j]
            d_h += d_hs[:, s]
            a = acts[s]
            gate_i, gate_f, gate_g, gate_o = a.chunk(4, -1)
            # the gates' slopes σ' = σ(1 − σ), tanh' = 1 − tanh² (per step: cache-hot)
            slope = a * (1 - a)
            torch.mul(gate_g, gate_g, out=slope[..., g_block]).neg_().add_(1)
            tanh_c = tanh_cs[s]
            d_c.addcmul_(d_h * gate_o, 1 - tanh_c * tanh_c)
            d_s = d_pre[:, s]
            di, df, dg, do = d_s.chunk(4, -1)  # ∂ℓ/∂(gate outputs), then × slope
            torch.mul(d_c, gate_g, out=di)
            torch.mul(d_c, gate_i, out=dg)
            torch.mul(d_h, tanh_c, out=do)
            if prev_c[j] is not None:
                torch.mul(d_c, prev_c[j], out=df)
            else:  # c₋₁ = 0
                df.zero_()
            d_s.mul_(slope)
            d_c = d_c * gate_f
            d_h = torch.bmm(d_s, w_hh)
        d_w = None
        if ctx.needs_input_grad[3]:
            h_prev = _previous_states(hs.transpose(0, 1), h0, ctx.reverse)
            d_w = torch.bmm(
                d_pre.reshape(k, t * n, -1).transpose(1, 2), h_prev.reshape(k, t * n, hidden)
            )
        if ctx.sink is not None:  # DP-SGD: G_t of every step, for the per-example norms
            ctx.sink[0][ctx.sink[1]] = d_pre
        d_probe = d_pre.new_zeros(()) if ctx.probe else None
        d_h0 = d_h if h0 is not None else None
        return d_pre, d_h0, d_c if c0 is not None else None, d_w, None, d_probe, None


def _previous_states(hs: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """h_{t-1} of every step t of the (K, T, N, H) outputs ``hs`` (h0, or zeros, first; the
    next step's state for a reverse direction)."""
    first = h0.unsqueeze(1) if h0 is not None else hs.new_zeros(hs.shape[0], 1, *hs.shape[2:])
    if reverse:
        return torch.cat([hs[:, 1:], first], 1)
    return torch.cat([first, hs[:, :-1]], 1)


class _Recurrent(_StackedLayer):
    """``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (and Opacus' ``DPLSTM``/``DPGRU``/``DPRNN``), any
    ``num_layers``, ``batch_first``, ``bias``, ``bidirectional`` and inter-layer ``dropout``,
    with each client's weights (the equations of the ``torch.nn`` docs; gate order i, f, g, o
    and r, z, n as there).

    Each cell (layer, direction) computes the input projections of all time steps as one
    batched GEMM per client, x W_ihᵀ + b_ih, then runs the recurrence over time with one
    ``baddbmm`` a step for the K clients' h W_hhᵀ. Per example, W_ih and W_hh are Linear layers
    applied at T positions: ∇W_ih = Σ_t G_tᵀ x_t and ∇W_hh = Σ_t H_tᵀ h_{t-1}, with G_t and H_t
    the gradients of the input and hidden projections at step t (one and the same for LSTM and
    RNN, whose gates add them; different for GRU, whose candidate gate multiplies the hidden
    projection by r). Under DP-SGD the LSTM's Function hands over every G_t from its backward
    (GRU and RNN: both projections get a zero "probe" added, whose gradients are the G_t and
    H_t), so one activation-only backward yields them all; the per-example squared norms
    are then the ghost norms of a Linear layer over the T positions (Li et al. 2022, eq. 4) and
    the clipped sums one product per weight, exactly the per-sample gradients Opacus' DPLSTM
    accumulates over its time steps and ``torch.func`` computes through ``nn.LSTM``.
    """

    def __init__(self, prefix: str, module: nn.Module, stack: _Stack) -> None:
        super().__init__(prefix, module, stack)
        mode = _rnn_mode(module)
        assert mode is not None
        # the module's own attributes, which a model's forward may read
        m: Any = module
        self.mode = mode
        self.input_size, self.hidden_size = int(m.input_size), int(m.hidden_size)
        self.num_layers, self.bias = int(m.num_layers), bool(m.bias)
        self.batch_first, self.dropout = bool(m.batch_first), float(m.dropout)
        self.bidirectional, self.proj_size = bool(m.bidirectional), 0
        self.dirs = 2 if m.bidirectional else 1
        self.has_bias = self.bias
        names = []
        for layer in range(self.num_layers):
            for d in range(self.dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                names += [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                if self.has_bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
        self.keys = tuple(f"{prefix}{n}" for n in names)
        self.per_cell = 4 if self.has_bias else 2
        self.inputs: list[tuple[torch.Tensor, torch.Tensor]] = []  # per cell, under DP-SGD
        self.parts: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        self.captured: list[torch.Tensor | None] = []  # LSTM: G_t per cell, under DP-SGD

    def clear(self) -> None:
        super().clear()
        self.inputs, self.parts, self.captured = [], [], []

    def forward(self, input: torch.Tensor, hx: Any = None) -> tuple[torch.Tensor, Any]:  # noqa: A002
        if not isinstance(input, torch.Tensor):
            raise NotImplementedError(
                f"{self.keys[0]}: stacked recurrent layers take tensors, not {type(input).__name__}"
            )
        if input.dim() != 3:
            raise ValueError(f"{self.keys[0]}: stacked recurrent layers need batched input")
        k = self.stack.k
        # inside: time-major per client, (K, T, N, D), so each step reads one contiguous slice
        if self.batch_first:
            b, t = input.shape[:2]
            x = input.reshape(b // k, k, t, -1).permute(1, 2, 0, 3)
        else:
            t, b = input.shape[:2]
            x = input.reshape(t, b // k, k, -1).permute(2, 0, 1, 3)
        x = x.contiguous()
        n, cells = b // k, self.num_layers * self.dirs
        h0: Any = None
        c0: Any = None
        if hx is not None:  # (L·D, N·K, H) -> (L·D, K, N, H)
            h0, c0 = hx if self.mode == "LSTM" else (hx, None)
            h0 = h0.reshape(cells, n, k, -1).transpose(1, 2)
            if c0 is not None:
                c0 = c0.reshape(cells, n, k, -1).transpose(1, 2)
        probe = None
        if self.stack.book is not None:
            gates = self._p(0).shape[1]
            # the LSTM Function hands its G_t to ``captured`` and needs only some input to
            # differentiate for; GRU and RNN add a zero probe to the projections
            shape = (
                ()
                if self.mode == "LSTM"
                else (cells, 2 if self.mode == "GRU" else 1, k, t, n, gates)
            )
            probe = x.new_zeros(shape, requires_grad=True)
            self.inputs, self.captured = [], [None] * cells
        hn: list[torch.Tensor] = []
        cn: list[Any] = []  # LSTM cell states
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.dirs):
                cell = layer * self.dirs + d
                seq, h, c = self._cell(
                    layer_in,
                    cell,
                    reverse=d == 1,
                    h0=None if h0 is None else h0[cell],
                    c0=None if c0 is None else c0[cell],
                    probe=None if probe is None or probe.dim() == 0 else probe[cell],
                    scalar=probe if probe is not None and probe.dim() == 0 else None,
                )
                outs.append(seq)
                hn.append(h)
                cn.append(c)
            layer_in = outs[0] if self.dirs == 1 else torch.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, training=True)
        if probe is not None:
            self._book(x, probe)
        if self.batch_first:  # (K, T, N, H·D) -> (N·K, T, H·D)
            out = layer_in.permute(2, 0, 1, 3).reshape(b, t, -1)
        else:
            out = layer_in.permute(1, 2, 0, 3).reshape(t, b, -1)

        def fold(states: list[torch.Tensor]) -> torch.Tensor:  # (L·D, N·K, H)
            return torch.stack(states).transpose(1, 2).reshape(cells, b, -1)

        if self.mode == "LSTM":
            return out, (fold(hn), fold(cn))
        return out, fold(hn)

    def _cell(
        self,
        x: torch.Tensor,
        cell: int,
        *,
        reverse: bool,
        h0: torch.Tensor | None,
        c0: torch.Tensor | None,
        probe: torch.Tensor | None,
        scalar: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One layer and direction over the (K, T, N, D) input: its (K, T, N, H) outputs and
        last (h, c)."""
        i = cell * self.per_cell
        w_ih, w_hh = self._p(i), self._p(i + 1)
        b_ih = self._p(i + 2) if self.has_bias else None
        b_hh = self._p(i + 3) if self.has_bias else None
        k, t, n, d = x.shape
        hidden, gru = self.hidden_size, self.mode == "GRU"
        x2 = x.reshape(k, t * n, d)
        bias = b_ih
        if b_ih is not None and b_hh is not None and not gru:  # the gates add both biases
            bias = b_ih + b_hh
        if bias is not None:
            gi = torch.baddbmm(bias.unsqueeze(1), x2, w_ih.transpose(1, 2))
        else:
            gi = torch.bmm(x2, w_ih.transpose(1, 2))
        gi = gi.view(k, t, n, -1)
        if probe is not None:
            gi = gi + probe[0]
        if self.mode == "LSTM":
            sink = (self.captured, cell) if scalar is not None else None
            seq, h, c = _LSTMSteps.apply(gi, h0, c0, w_hh, reverse, scalar, sink)
            if scalar is not None:
                self.inputs.append((x.detach(), _previous_states(seq.detach(), h0, reverse)))
            return seq, h, c
        steps = gi.unbind(1)  # its backward is one stack, not a zero-filled copy a step
        probes_h = probe[1].unbind(1) if probe is not None and gru else None
        w_hh_t = w_hh.transpose(1, 2)
        h, c = h0, c0
        outs: list[Any] = [None] * t
        prevs: list[Any] = [None] * t
        for s in range(t - 1, -1, -1) if reverse else range(t):
            prevs[s] = h
            gx = steps[s]
            if gru:
                hp = h if h is not None else x.new_zeros(k, n, hidden)
                if b_hh is not None:
                    gh = torch.baddbmm(b_hh.unsqueeze(1), hp, w_hh_t)
                else:
                    gh = torch.bmm(hp, w_hh_t)
                if probes_h is not None:
                    gh = gh + probes_h[s]
                xr, xz, xn = gx.chunk(3, -1)
                hr, hz, hn = gh.chunk(3, -1)
                r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                cand = torch.tanh(xn + r * hn)
                h = (1 - z) * cand + z * hp
            else:
                pre = gx if h is None else torch.baddbmm(gx, h, w_hh_t)
                h = torch.relu(pre) if self.mode == "RNN_RELU" else torch.tanh(pre)
            outs[s] = h
        if probe is not None:
            zero = x.new_zeros(k, n, hidden)
            prev = torch.stack([zero if p is None else p.detach() for p in prevs], 1)
            self.inputs.append((x.detach(), prev))
        assert h is not None
        return torch.stack(outs, 1), h, c

    def _parts(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Per cell, the Linear maps of its weights as (inputs, output gradients), each
        (K, N·T, ·) example-major like ``_Linear``'s: for LSTM and RNN, whose gates add both
        projections (one G), the one map [x_t, h_{t-1}] ↦ [W_ih W_hh] (G Gᵀ formed once); for
        GRU x_t ↦ W_ih (G) and h_{t-1} ↦ W_hh (H)."""
        g, g_width = self.grad_out, self._p(0).shape[1]

        def rows(a: torch.Tensor) -> torch.Tensor:  # (K, T, N, F) -> (K, N·T, F)
            return a.transpose(1, 2).reshape(a.shape[0], -1, a.shape[-1])

        parts = []
        for cell, (xin, hprev) in enumerate(self.inputs):
            if self.mode == "LSTM":
                got = self.captured[cell]  # None: the loss does not depend on this layer
                gates = got if got is not None else xin.new_zeros(*xin.shape[:3], g_width)
                parts.append([(rows(torch.cat([xin, hprev], -1)), rows(gates))])
            elif g.shape[1] == 1:
                parts.append([(rows(torch.cat([xin, hprev], -1)), rows(g[cell, 0]))])
            else:
                parts.append([(rows(xin), rows(g[cell, 0])), (rows(hprev), rows(g[cell, 1]))])
        return parts

    def squared_norms(self, n: int, k: int) -> torch.Tensor:
        """Σ over cells of the ghost norms of W_ih (inputs x_t, gradients G_t) and W_hh
        (inputs h_{t-1}, gradients H_t) over the T positions, plus ‖Σ_t G_t‖² and ‖Σ_t H_t‖²
        for the biases."""
        self.parts = self._parts()
        sq = self.grad_out.new_zeros(n, k)
        for parts in self.parts:
            if len(parts) == 1:  # one G for both weights and both biases
                a, g = parts[0]
                sq = sq + _linear_squared_norms(a, g, n, k, False)
                if self.has_bias:
                    sq = sq + 2 * g.reshape(k, n, -1, g.shape[-1]).sum(2).square().sum(-1).t()
            else:
                for a, g in parts:
                    sq = sq + _linear_squared_norms(a, g, n, k, self.has_bias)
        return sq

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for (xin, _), parts in zip(self.inputs, self.parts):
            if len(parts) == 1:
                w, *b = _linear_clipped_sums(*parts[0], factors, self.has_bias)
                d = xin.shape[-1]
                out += [w[..., :d], w[..., d:], *b, *[t.clone() for t in b]]
            else:
                w_ih = _linear_clipped_sums(*parts[0], factors, self.has_bias)
                w_hh = _linear_clipped_sums(*parts[1], factors, self.has_bias)
                out += [w_ih[0], w_hh[0], *w_ih[1:], *w_hh[1:]]
        self.inputs, self.parts, self.captured = [], [], []
        return out


def _stacked_layer(prefix: str, module: nn.Module, stack: _Stack, dp: bool) -> _StackedLayer | str:
    kind = type(module).__name__
    if isinstance(module, nn.Linear):
        return _Linear(prefix, module, stack)
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        if dp and (module.groups != 1 or isinstance(module.padding, str)):
            return f"{kind} with groups or padding={module.padding!r} under DP-SGD"
        return _Conv(prefix, module, stack)
    if isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
        return _Norm(prefix, module, stack)
    if isinstance(module, nn.Embedding):
        if module.padding_idx is not None or module.max_norm is not None:
            return "Embedding with padding_idx or max_norm"
        if module.scale_grad_by_freq or module.sparse:
            return "Embedding with scale_grad_by_freq or sparse"
        return _Embedding(prefix, module, stack)
    if _rnn_mode(module) is not None:
        if getattr(module, "proj_size", 0):
            return f"{kind} with proj_size > 0"
        return _Recurrent(prefix, module, stack)
    return (
        f"{kind} (stacked layers: Linear, Conv1d/2d, GroupNorm, LayerNorm, Embedding, LSTM/GRU/RNN)"
    )


def stack_blocker(net: nn.Module, *, dp: bool = False) -> str | None:
    """Why ``net`` cannot be run as a stack of clients (None when it can)."""
    inside: str | None = None  # a recurrent layer's name: its submodules are its own
    for name, m in net.named_modules():
        if inside is not None and name.startswith(inside):
            continue
        if _rnn_mode(m) is not None:
            inside = f"{name}."
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return f"{name} ({type(m).__name__}) normalises across the examples of a batch"
        if isinstance(m, _NORM_STATS) and getattr(m, "track_running_stats", False):
            return f"{name} ({type(m).__name__}) keeps running statistics"
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if own:
            layer = _stacked_layer(f"{name}.", m, _Stack(), dp)
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
        self.stack = _Stack()
        self.net = copy.deepcopy(self.template)
        self.layers: list[_StackedLayer] = []
        inside: str | None = None  # a replaced recurrent layer: skip its submodules
        for name, m in list(self.net.named_modules()):
            if inside is not None and name.startswith(inside):
                continue
            if _rnn_mode(m) is not None:
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
            n: torch.cat([p, p + 0.1 * torch.randn(p.shape, generator=g, device=p.device)])
            for n, p in one.items()
        }
        folded = x[torch.arange(4, device=x.device) % len(x)]  # row n·2 + k
        if torch.is_floating_point(folded):  # four different examples
            noise = torch.randn(folded.shape, generator=g, device=x.device, dtype=x.dtype)
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
