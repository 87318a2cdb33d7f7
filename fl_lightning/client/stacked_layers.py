"""The stacked twins of the layers that hold parameters (``client/stacked.py``).

Each layer's parameters are ``Stack.params[prefix + name]`` with a leading client axis K, and
its input is the clients' folded batch (row ``n·K + k`` is example ``n`` of client ``k``):
``StackedLinear`` (one batched GEMM; plain SGD fused into its backward, or kept as low-rank
factors by ``LowRankSteps``), ``StackedConv`` (one grouped convolution), ``StackedNorm``
(GroupNorm / LayerNorm with each client's affine) and ``StackedEmbedding``. Under DP-SGD each
gives per-example squared gradient norms and the clients' clipped sums (book-keeping clipping,
Bu et al. 2023, Alg. 1). The recurrent layers are in ``stacked_recurrent.py``; the stacked
model that uses them is ``stacked.py: StackedNet``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.book_keeping import _squared_norms, _without_onednn

#: per convolution shape: whether oneDNN computes per-example gradients faster (timed once)
_ONEDNN_CHOICE: dict[tuple, bool] = {}


class Stack:
    """What the stacked layers read during one forward: the clients' parameters and K."""

    def __init__(self) -> None:
        self.k = 1
        self.params: dict[str, torch.Tensor] = {}
        self.book: list[StackedLayer] | None = None
        self.fused_lr: float | None = None  # plain SGD fused into Linear backward passes
        self.low_rank: LowRankSteps | None = None  # plain SGD of Linear layers as factors


class StackedLayer(nn.Module):
    """A layer whose parameters are ``stack.params[prefix + name]`` with a leading client axis."""

    param_names: tuple[str, ...] = ()
    stack: Stack  # shared, not a submodule
    x: Any  # booked input (DP-SGD), None outside clipped_sums
    out: Any  # booked output
    grad_out: Any  # its gradient
    weight_grads: Any
    bias_grads: Any
    grads: list[torch.Tensor]

    def __init__(self, prefix: str, module: nn.Module, stack: Stack) -> None:
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


class StackedLinear(StackedLayer):
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
        return linear_squared_norms(self.x, self.grad_out, n, k, self.has_bias)

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        return linear_clipped_sums(self.x, self.grad_out, factors, self.has_bias)


def linear_squared_norms(
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


def linear_clipped_sums(
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


class StackedConv(StackedLayer):
    param_names = ("weight", "bias")

    def __init__(self, prefix: str, module: nn.Conv1d | nn.Conv2d, stack: Stack) -> None:
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


class StackedNorm(StackedLayer):
    """GroupNorm / LayerNorm: per-example normalisation x̂, then each client's x̂ ⊙ γ + β."""

    param_names = ("weight", "bias")

    def __init__(self, prefix: str, module: nn.GroupNorm | nn.LayerNorm, stack: Stack) -> None:
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


class StackedEmbedding(StackedLayer):
    param_names = ("weight",)

    def __init__(self, prefix: str, module: nn.Embedding, stack: Stack) -> None:
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
