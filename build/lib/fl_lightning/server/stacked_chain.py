"""Hand-written forward and backward of a chain of standard layers for a stack of clients.

``StackedChain`` runs one local SGD step of ``K`` clients at once, each client with its own
weights (a leading client axis on every parameter), without autograd or ``vmap``:

- ``nn.Linear``: one batched GEMM (``baddbmm``) per pass; the weight gradient ``gyᵀ x`` is
  accumulated straight into the weights (``W.baddbmm_(gyᵀ, x, alpha=-lr)``) when the step is
  plain SGD, so the ``K × out × in`` gradient is never written to memory;
- ``nn.Conv2d`` (and max-pooling): the clients are folded into the channel axis, activations are
  kept as ``(batch, K·C, H, W)`` in ``channels_last`` layout, and one grouped convolution with
  ``K·groups`` groups does every client's convolution (oneDNN's grouped kernels, forward and
  ``convolution_backward``);
- ReLU / Tanh / Flatten / Identity, and the cross-entropy of ``ClientModule.loss`` with a padding
  mask (padded examples get exactly zero gradient).

It is the executor's fast path for the models of the zoo that are such chains (MnistCNN,
CifarCNN, MLP, LogisticRegression, ...); anything else (another loss, other layers, branches) is
reported by ``build_chain`` and left to the executor's ``vmap`` path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.nn.modules.utils import _pair

STACKED, GROUPED = "stacked", "grouped"  # (K, N, *features) or (N, K*C, H, W) channels_last


def to_grouped(x: torch.Tensor) -> torch.Tensor:
    """(K, N, C, H, W) -> (N, K*C, H, W) in channels_last memory (one copy)."""
    k, n, c, h, w = x.shape
    return x.permute(1, 3, 4, 0, 2).contiguous().view(n, h, w, k * c).permute(0, 3, 1, 2)


def from_grouped(x: torch.Tensor, k: int) -> torch.Tensor:
    """(N, K*C, H, W) -> a (K, N, C, H, W) view of channels_last memory."""
    n, kc, h, w = x.shape
    x = x.contiguous(memory_format=torch.channels_last)
    return x.permute(0, 2, 3, 1).view(n, h, w, k, kc // k).permute(3, 0, 4, 1, 2)


class _Layer:
    """One layer; ``forward`` keeps what ``backward`` needs. ``params`` are (K, ...) tensors."""

    names: tuple[str, ...] = ()
    layout_in: str | None = None  # required input layout (None: any)

    def out_layout(self, layout: str) -> str:
        return layout

    def forward(self, x: torch.Tensor, params: list[torch.Tensor], k: int) -> torch.Tensor:
        raise NotImplementedError

    def backward(
        self,
        gy: torch.Tensor,
        params: list[torch.Tensor],
        grads: list[torch.Tensor] | None,
        lr: float,
        need_gx: bool,
    ) -> torch.Tensor | None:
        raise NotImplementedError


class _Linear(_Layer):
    layout_in = STACKED

    def __init__(self, prefix: str, bias: bool) -> None:
        self.names = (f"{prefix}weight", f"{prefix}bias") if bias else (f"{prefix}weight",)

    def forward(self, x, params, k):
        w = params[0]
        self.shape = x.shape
        self.x = x.reshape(k, -1, x.shape[-1])
        if len(params) > 1:
            y = torch.baddbmm(params[1].unsqueeze(1), self.x, w.transpose(1, 2))
        else:
            y = torch.bmm(self.x, w.transpose(1, 2))
        return y.view(*x.shape[:-1], w.shape[1])

    def backward(self, gy, params, grads, lr, need_gx):
        w = params[0]
        gy = gy.reshape(w.shape[0], -1, w.shape[1])
        gx = torch.bmm(gy, w).view(self.shape) if need_gx else None  # before w changes
        if grads is None:  # plain SGD: accumulate -lr · gyᵀx into the weights in place
            w.baddbmm_(gy.transpose(1, 2), self.x, alpha=-lr)
            if len(params) > 1:
                params[1].add_(gy.sum(1), alpha=-lr)
        else:
            torch.bmm(gy.transpose(1, 2), self.x, out=grads[0])
            if len(params) > 1:
                torch.sum(gy, 1, out=grads[1])
        self.x = None
        return gx


class _Conv2d(_Layer):
    layout_in = GROUPED

    def __init__(self, prefix: str, m: nn.Conv2d) -> None:
        self.names = (
            (f"{prefix}weight", f"{prefix}bias") if m.bias is not None else (f"{prefix}weight",)
        )
        padding = (0, 0) if m.padding == "valid" else m.padding
        self.stride, self.padding, self.dilation = list(m.stride), list(padding), list(m.dilation)
        self.groups = m.groups

    def forward(self, x, params, k):
        w = params[0]
        self.k, self.wshape = k, (k * w.shape[1], *w.shape[2:])
        self.x = x
        bias = params[1].view(-1) if len(params) > 1 else None
        return F.conv2d(
            x,
            w.view(self.wshape),
            bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups * k,
        )

    def backward(self, gy, params, grads, lr, need_gx):
        w = params[0]
        has_bias = len(params) > 1
        gx, gw, gb = torch.ops.aten.convolution_backward(
            gy.contiguous(memory_format=torch.channels_last),
            self.x,
            w.view(self.wshape),
            [self.wshape[0]] if has_bias else None,
            self.stride,
            self.padding,
            self.dilation,
            False,
            [0, 0],
            self.groups * self.k,
            [need_gx, True, has_bias],
        )
        if grads is None:
            w.add_(gw.view_as(w), alpha=-lr)
            if has_bias:
                params[1].add_(gb.view_as(params[1]), alpha=-lr)
        else:
            grads[0].copy_(gw.view_as(w))
            if has_bias:
                grads[1].copy_(gb.view_as(params[1]))
        self.x = None
        return gx


class _MaxPool2d(_Layer):
    layout_in = GROUPED

    def __init__(self, m: nn.MaxPool2d) -> None:
        self.kernel = list(_pair(m.kernel_size))
        self.stride = list(_pair(m.stride if m.stride is not None else m.kernel_size))
        self.padding, self.dilation = list(_pair(m.padding)), list(_pair(m.dilation))
        self.ceil_mode = m.ceil_mode

    def forward(self, x, params, k):
        self.x = x
        y, self.idx = torch.ops.aten.max_pool2d_with_indices(
            x, self.kernel, self.stride, self.padding, self.dilation, self.ceil_mode
        )
        return y

    def backward(self, gy, params, grads, lr, need_gx):
        gx = torch.ops.aten.max_pool2d_with_indices_backward(
            gy, self.x, self.kernel, self.stride, self.padding, self.dilation, self.ceil_mode,
            self.idx,
        )  # fmt: skip
        self.x = self.idx = None
        return gx


class _ReLU(_Layer):
    def forward(self, x, params, k):
        self.y = torch.relu(x)
        return self.y

    def backward(self, gy, params, grads, lr, need_gx):
        gx = torch.ops.aten.threshold_backward(gy, self.y, 0)
        self.y = None
        return gx


class _Tanh(_Layer):
    def forward(self, x, params, k):
        self.y = torch.tanh(x)
        return self.y

    def backward(self, gy, params, grads, lr, need_gx):
        gx = torch.ops.aten.tanh_backward(gy, self.y)
        self.y = None
        return gx


class _Identity(_Layer):
    def forward(self, x, params, k):
        return x

    def backward(self, gy, params, grads, lr, need_gx):
        return gy


class _Flatten(_Layer):
    """``nn.Flatten()`` / ``torch.flatten(x, 1)`` of each example."""

    def out_layout(self, layout: str) -> str:
        return STACKED

    def forward(self, x, params, k):
        self.grouped_shape = x.shape if self._grouped else None
        if self._grouped:
            x = from_grouped(x, k)
        self.shape = x.shape
        return x.reshape(k, x.shape[1], -1)

    def backward(self, gy, params, grads, lr, need_gx):
        gx = gy.view(self.shape)
        return to_grouped(gx) if self.grouped_shape is not None else gx


_ACTIVATIONS = {nn.ReLU: _ReLU, nn.Tanh: _Tanh, nn.Identity: _Identity}


def _module_layer(prefix: str, m: nn.Module) -> _Layer | str:
    if isinstance(m, nn.Linear):
        return _Linear(prefix, m.bias is not None)
    if isinstance(m, nn.Conv2d):
        if m.padding_mode != "zeros" or m.padding == "same":
            return f"Conv2d with padding {m.padding!r} / padding_mode {m.padding_mode!r}"
        return _Conv2d(prefix, m)
    if isinstance(m, nn.MaxPool2d):
        if m.return_indices:
            return "MaxPool2d(return_indices=True)"
        return _MaxPool2d(m)
    if isinstance(m, nn.Flatten):
        if (m.start_dim, m.end_dim) != (1, -1):
            return f"Flatten(start_dim={m.start_dim}, end_dim={m.end_dim})"
        return _Flatten()
    for cls, layer in _ACTIVATIONS.items():
        if type(m) is cls:
            return layer()
    return f"layer {type(m).__name__}"


def _function_layer(node: fx.Node) -> _Layer | str:
    if node.target in (F.relu, torch.relu):
        return _ReLU()
    if node.target is torch.tanh:
        return _Tanh()
    if node.target is torch.flatten and list(node.args[1:]) == [1] and not node.kwargs:
        return _Flatten()
    return f"function {getattr(node.target, '__name__', node.target)}"


class StackedChain:
    """Forward + backward + SGD update of K clients' copies of one chain-shaped model."""

    def __init__(self, layers: list[_Layer]) -> None:
        self.layers = layers
        # backward stops at the first layer with weights (no input gradient below it)
        self._first = next((i for i, layer in enumerate(layers) if layer.names), len(layers))

    @property
    def names(self) -> list[str]:
        return [n for layer in self.layers for n in layer.names]

    def step(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        *,
        lr: float,
        grads: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One step for every client: ``x`` (K, N, ...), ``y`` (K, N), ``mask`` (K, N) with 1 for
        real and 0 for padded examples. Loss per client = mean cross-entropy over its real
        examples. With ``grads=None`` the weights take the SGD step ``p -= lr · ∇p`` in place;
        otherwise the gradients are written into ``grads`` (same shapes) and weights are left.
        Returns the per-client losses (K,)."""
        k = x.shape[0]
        plist = [[params[n] for n in layer.names] for layer in self.layers]
        h = x
        for layer, p in zip(self.layers, plist):
            if layer.layout_in == GROUPED and h.dim() == 5:
                h = to_grouped(h)
            h = layer.forward(h, p, k)
        # cross-entropy with a padding mask; d loss_k / d logits = (softmax − onehot)·m / count
        logp = torch.log_softmax(h, dim=-1)
        count = mask.sum(1).clamp(min=1)
        weight = mask / count.unsqueeze(1)
        nll = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        losses = (nll * mask).sum(1) / count
        g = logp.exp_()
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(nll, -1.0).unsqueeze(-1))
        g.mul_(weight.unsqueeze(-1))
        for i in range(len(self.layers) - 1, self._first - 1, -1):
            layer = self.layers[i]
            gl = [grads[n] for n in layer.names] if grads is not None else None
            g = layer.backward(g, plist[i], gl, lr, need_gx=i > self._first)
        return losses


def build_chain(net: nn.Module, names: list[str]) -> tuple[StackedChain | None, str | None]:
    """The ``StackedChain`` of ``net`` (whose trainable parameters are ``names``), or None and
    why ``net`` is not a chain of supported layers ending in class logits."""
    try:
        gm = fx.symbolic_trace(net)
    except Exception as err:  # noqa: BLE001 - any tracing failure means "not a chain"
        return None, f"torch.fx cannot trace the model ({type(err).__name__})"
    modules = dict(gm.named_modules())
    layers: list[_Layer] = []
    prev: fx.Node | None = None
    layout = STACKED
    reshaped = False
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if prev is not None:
                return None, "the model takes more than one input"
            prev = node
            continue
        if node.op == "output":
            if node.args[0] is not prev:
                return None, "the model's output is not the last layer's"
            break
        tensor_args = [a for a in node.args if isinstance(a, fx.Node)]
        if tensor_args != [prev] or node.args[0] is not prev:
            return None, f"{node.name} is not a link of a single chain"
        if node.op == "call_module":
            layer = _module_layer(f"{node.target}.", modules[node.target])
            if not isinstance(layer, str) and len(node.args) != 1:
                layer = f"{node.target} called with extra arguments"
        elif node.op == "call_function":
            layer = _function_layer(node)
        else:
            layer = f"{node.op} {node.target}"
        if isinstance(layer, str):
            return None, f"unsupported {layer}"
        if layer.layout_in == STACKED and layout == GROUPED:
            return None, "a Linear layer applied to a feature map (no Flatten before it)"
        if layer.layout_in == GROUPED and reshaped:
            return None, "a convolution or pooling after a Linear or Flatten layer"
        reshaped = reshaped or isinstance(layer, (_Linear, _Flatten))
        if isinstance(layer, _Flatten):
            layer._grouped = layout == GROUPED
        layout = layer.layout_in or layout
        layout = layer.out_layout(layout)
        layers.append(layer)
        prev = node
    if layout != STACKED:
        return None, "the model does not end in a Linear layer of logits"
    chain = StackedChain(layers)
    if sorted(chain.names) != sorted(names):
        return None, "the chain's layers do not own exactly the model's trainable parameters"
    return chain, None
