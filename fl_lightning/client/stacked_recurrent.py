"""Stacked recurrent layers: ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` and Opacus' ``DPLSTM`` /
``DPGRU`` / ``DPRNN`` for K clients at once (``client/stacked.py``).

The input projections of all time steps run as one batched GEMM, then one ``baddbmm`` a time
step for the clients' recurrent products; the LSTM and RNN recurrences are one autograd Function
each (``LSTMSteps``, ``RNNSteps``) with hand-written backpropagation through time (GRU: autograd
over a per-step loop). Under DP-SGD the per-example
squared norms of W_ih and W_hh are ghost norms over the T steps (Li et al. 2022, eq. 4), and the
clipped sums one product per weight (``stacked_layers.linear_clipped_sums``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.stacked_layers import (
    Stack,
    StackedLayer,
    linear_clipped_sums,
    linear_squared_norms,
)


def rnn_mode(module: nn.Module) -> str | None:
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


#: bytes of W_hh one chunk of clients runs its whole recurrence over, on CPU (a core's L2 cache,
#: 1 MiB on the 2-core EPYC of benchmarks/results/cohort_speed.md): one ``baddbmm`` a step over
#: all K clients streams every client's W_hh from memory at every step, up to 3× slower than
#: recurring over a few clients whose weights stay cached (CharLSTM's 256-unit W_hh is 1 MiB a
#: client).
CHUNK_BYTES = 4 << 20


def client_chunks(w_hh: torch.Tensor) -> list[slice]:
    """The clients of the (K, G, H) stacked W_hh in chunks of at most ``CHUNK_BYTES`` of
    weights (at least one client a chunk; one chunk of all K off the CPU)."""
    k = w_hh.shape[0]
    per = max(1, w_hh[0].numel() * w_hh.element_size())
    size = k if w_hh.device.type != "cpu" else max(1, CHUNK_BYTES // per)
    return [slice(lo, min(k, lo + size)) for lo in range(0, k, size)]


class LSTMSteps(torch.autograd.Function):
    """The recurrence of one LSTM cell over all time steps for K clients, given the input
    projections ``gi`` (K, T, N, 4H) (x W_ihᵀ + b_ih + b_hh): per step
    pre = gi_t + h W_hhᵀ, i, f, o = σ(·), g = tanh(·), c = f c + i g, h = o tanh(c) (the
    ``nn.LSTM`` equations). Its backward runs backpropagation through time by hand, one
    ``bmm`` a step for the hidden gradient, and forms ∇W_hh = Σ_t G_tᵀ h_{t-1} as one batched
    GEMM over all steps (instead of one small weight-gradient GEMM and sum per step), with
    G_t = ∂ℓ/∂pre_t returned as the gradient of ``gi``. Returns the (K, T, N, H) outputs and
    the last (h, c)."""

    @staticmethod
    def forward(ctx, gi, h0, c0, w_hh, reverse, probe=None, sink=None):  # noqa: ANN001, ANN205, PLR0913
        # states time-major inside, (T, K, N, ·): every step writes contiguous slices
        k, t, n, four = gi.shape
        hidden = four // 4
        g_block = slice(2 * hidden, 3 * hidden)
        acts = gi.new_empty(t, k, n, four)  # σ(i), σ(f), tanh(g), σ(o)
        hs = gi.new_empty(t, k, n, hidden)
        cs = gi.new_empty(t, k, n, hidden)
        tanh_cs = gi.new_empty(t, k, n, hidden)
        order = range(t - 1, -1, -1) if reverse else range(t)
        for ks in client_chunks(w_hh):  # each chunk's whole recurrence, its W_hh cache-hot
            h = None if h0 is None else h0[ks]
            c = None if c0 is None else c0[ks]
            w_t = w_hh[ks].transpose(1, 2)
            for s in order:
                pre = gi[ks, s].clone() if h is None else torch.baddbmm(gi[ks, s], h, w_t)
                # tanh(x) = 2σ(2x) − 1: one sigmoid for all four gates (torch's CPU tanh is
                # several times slower than its sigmoid; the results agree to float rounding)
                pre[..., g_block] *= 2
                a = torch.sigmoid(pre, out=acts[s, ks])
                a[..., g_block].mul_(2).sub_(1)
                gate_i, gate_f, gate_g, gate_o = a.chunk(4, -1)
                if c is None:
                    c = torch.mul(gate_i, gate_g, out=cs[s, ks])
                else:
                    c = torch.addcmul(gate_i * gate_g, gate_f, c, out=cs[s, ks])
                tanh_c = torch.sigmoid(c * 2, out=tanh_cs[s, ks]).mul_(2).sub_(1)
                h = torch.mul(gate_o, tanh_c, out=hs[s, ks])
        ctx.save_for_backward(acts, hs, cs, tanh_cs, h0, c0, w_hh)
        ctx.reverse, ctx.sink, ctx.probe = reverse, sink, probe is not None
        last = order[-1]
        return hs.transpose(0, 1), hs[last].clone(), cs[last].clone()

    @staticmethod
    def backward(ctx, d_hs, d_h_last, d_c_last):  # noqa: ANN001, ANN205
        acts, hs, cs, tanh_cs, h0, c0, w_hh = ctx.saved_tensors
        t, k, n, hidden = hs.shape
        order = list(range(t - 1, -1, -1)) if ctx.reverse else list(range(t))
        d_pre = acts.new_empty(k, t, n, 4 * hidden)  # the layout of gi
        d_h0 = torch.empty_like(h0) if h0 is not None else None
        d_c0 = torch.empty_like(c0) if c0 is not None else None
        g_block = slice(2 * hidden, 3 * hidden)
        for ks in client_chunks(w_hh):
            d_h, d_c = d_h_last[ks].clone(), d_c_last[ks].clone()
            w = w_hh[ks]
            for j in range(t - 1, -1, -1):
                s = order[j]
                d_h += d_hs[ks, s]
                a = acts[s, ks]
                gate_i, gate_f, gate_g, gate_o = a.chunk(4, -1)
                # the gates' slopes σ' = σ(1 − σ), tanh' = 1 − tanh² (per step: cache-hot)
                slope = a * (1 - a)
                torch.mul(gate_g, gate_g, out=slope[..., g_block]).neg_().add_(1)
                tanh_c = tanh_cs[s, ks]
                d_c.addcmul_(d_h * gate_o, 1 - tanh_c * tanh_c)
                d_s = d_pre[ks, s]
                di, df, dg, do = d_s.chunk(4, -1)  # ∂ℓ/∂(gate outputs), then × slope
                torch.mul(d_c, gate_g, out=di)
                torch.mul(d_c, gate_i, out=dg)
                torch.mul(d_h, tanh_c, out=do)
                c_prev = cs[order[j - 1], ks] if j > 0 else (None if c0 is None else c0[ks])
                if c_prev is not None:
                    torch.mul(d_c, c_prev, out=df)
                else:  # c₋₁ = 0
                    df.zero_()
                d_s.mul_(slope)
                d_c = d_c * gate_f
                if j > 0 or h0 is not None:
                    d_h = torch.bmm(d_s, w)
            if d_h0 is not None:
                d_h0[ks] = d_h
            if d_c0 is not None:
                d_c0[ks] = d_c
        d_w, d_probe = finish_backward(ctx, d_pre, hs, h0, needs_w=ctx.needs_input_grad[3])
        return d_pre, d_h0, d_c0, d_w, None, d_probe, None


class RNNSteps(torch.autograd.Function):
    """The recurrence of one Elman RNN cell (``nn.RNN``, tanh or ReLU) over all time steps for K
    clients, given the input projections ``gi`` (K, T, N, H) (x W_ihᵀ + b_ih + b_hh): per step
    h_t = φ(gi_t + h_{t-1} W_hhᵀ) (the ``nn.RNN`` equation). As ``LSTMSteps``: the backward runs
    backpropagation through time by hand, G_t = ∂ℓ/∂pre_t = (∂ℓ/∂h_t) φ'(pre_t) with
    tanh' = 1 − h_t² and relu' = [h_t > 0], ∂ℓ/∂h_{t-1} += G_t W_hh (one ``bmm`` a step), and
    ∇W_hh = Σ_t G_tᵀ h_{t-1} as one batched GEMM over all steps; G_t is the gradient of ``gi``
    and, under DP-SGD, handed to ``sink`` for the ghost norms. Returns the (K, T, N, H) outputs
    and the last h."""

    @staticmethod
    def forward(ctx, gi, h0, w_hh, reverse, relu, probe=None, sink=None):  # noqa: ANN001, ANN205, PLR0913
        k, t, n, hidden = gi.shape
        hs = gi.new_empty(t, k, n, hidden)  # time-major inside: contiguous slices a step
        order = range(t - 1, -1, -1) if reverse else range(t)
        for ks in client_chunks(w_hh):  # each chunk's whole recurrence, its W_hh cache-hot
            h = None if h0 is None else h0[ks]
            w_t = w_hh[ks].transpose(1, 2)
            for s in order:
                out = hs[s, ks]
                if h is None:
                    out.copy_(gi[ks, s])
                else:
                    torch.baddbmm(gi[ks, s], h, w_t, out=out)
                if relu:
                    out.clamp_(min=0)
                else:  # tanh(x) = 2σ(2x) − 1 (torch's CPU tanh is several times slower)
                    out.mul_(2).sigmoid_().mul_(2).sub_(1)
                h = out
        ctx.save_for_backward(hs, h0, w_hh)
        ctx.reverse, ctx.relu, ctx.sink, ctx.probe = reverse, relu, sink, probe is not None
        return hs.transpose(0, 1), hs[order[-1]].clone()

    @staticmethod
    def backward(ctx, d_hs, d_h_last):  # noqa: ANN001, ANN205
        hs, h0, w_hh = ctx.saved_tensors
        t, k, n, hidden = hs.shape
        order = list(range(t - 1, -1, -1)) if ctx.reverse else list(range(t))
        d_pre = hs.new_empty(k, t, n, hidden)  # the layout of gi
        d_h0 = torch.empty_like(h0) if h0 is not None else None
        for ks in client_chunks(w_hh):
            d_h = d_h_last[ks].clone()
            w = w_hh[ks]
            for j in range(t - 1, -1, -1):
                s = order[j]
                d_h += d_hs[ks, s]
                h, d_s = hs[s, ks], d_pre[ks, s]
                if ctx.relu:
                    torch.mul(d_h, h > 0, out=d_s)
                else:
                    torch.mul(h, h, out=d_s).neg_().add_(1).mul_(d_h)
                if j > 0 or h0 is not None:
                    d_h = torch.bmm(d_s, w)
            if d_h0 is not None:
                d_h0[ks] = d_h
        d_w, d_probe = finish_backward(ctx, d_pre, hs, h0, needs_w=ctx.needs_input_grad[2])
        return d_pre, d_h0, d_w, None, None, d_probe, None


def finish_backward(
    ctx: Any, d_pre: torch.Tensor, hs: torch.Tensor, h0: torch.Tensor | None, *, needs_w: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The end of ``LSTMSteps``/``RNNSteps``' backward, from the gates' gradients ``d_pre``
    (K, T, N, G) and the time-major states ``hs`` (T, K, N, H): ∇W_hh = Σ_t G_tᵀ h_{t-1} as one
    batched GEMM over all steps (when asked), every G_t handed to the DP-SGD sink, and the
    probe's zero gradient."""
    k, t, n, _ = d_pre.shape
    hidden = hs.shape[-1]
    d_w = None
    if needs_w:
        h_prev = previous_states(hs.transpose(0, 1), h0, ctx.reverse)
        d_w = torch.bmm(
            d_pre.reshape(k, t * n, -1).transpose(1, 2), h_prev.reshape(k, t * n, hidden)
        )
    if ctx.sink is not None:  # DP-SGD: G_t of every step, for the per-example norms
        ctx.sink[0][ctx.sink[1]] = d_pre
    return d_w, (d_pre.new_zeros(()) if ctx.probe else None)


def previous_states(hs: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """h_{t-1} of every step t of the (K, T, N, H) outputs ``hs`` (h0, or zeros, first; the
    next step's state for a reverse direction)."""
    first = h0.unsqueeze(1) if h0 is not None else hs.new_zeros(hs.shape[0], 1, *hs.shape[2:])
    if reverse:
        return torch.cat([hs[:, 1:], first], 1)
    return torch.cat([first, hs[:, :-1]], 1)


class StackedRecurrent(StackedLayer):
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
    projection by r). Under DP-SGD the LSTM's and RNN's Functions hand over every G_t from their
    backward (GRU: both projections get a zero "probe" added, whose gradients are the G_t and
    H_t), so one activation-only backward yields them all; the per-example squared norms
    are then the ghost norms of a Linear layer over the T positions (Li et al. 2022, eq. 4) and
    the clipped sums one product per weight, exactly the per-sample gradients Opacus' DPLSTM
    accumulates over its time steps and ``torch.func`` computes through ``nn.LSTM``.
    """

    def __init__(self, prefix: str, module: nn.Module, stack: Stack) -> None:
        super().__init__(prefix, module, stack)
        mode = rnn_mode(module)
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
        self.captured: list[torch.Tensor | None] = []  # LSTM, RNN: G_t per cell, under DP-SGD

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
            # the LSTM and RNN Functions hand their G_t to ``captured`` and need only some
            # input to differentiate for; GRU adds a zero probe to both projections
            shape = () if self.mode != "GRU" else (cells, 2, k, t, n, gates)
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
            seq, h, c = LSTMSteps.apply(gi, h0, c0, w_hh, reverse, scalar, sink)
            if scalar is not None:
                self.inputs.append((x.detach(), previous_states(seq.detach(), h0, reverse)))
            return seq, h, c
        if not gru:
            sink = (self.captured, cell) if scalar is not None else None
            relu = self.mode == "RNN_RELU"
            seq, h = RNNSteps.apply(gi, h0, w_hh, reverse, relu, scalar, sink)
            if scalar is not None:
                self.inputs.append((x.detach(), previous_states(seq.detach(), h0, reverse)))
            return seq, h, None
        # GRU: autograd over a per-step loop
        steps = gi.unbind(1)  # its backward is one stack, not a zero-filled copy a step
        probes_h = probe[1].unbind(1) if probe is not None else None
        w_hh_t = w_hh.transpose(1, 2)
        h, c = h0, c0
        outs: list[Any] = [None] * t
        prevs: list[Any] = [None] * t
        for s in range(t - 1, -1, -1) if reverse else range(t):
            prevs[s] = h
            gx = steps[s]
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
            outs[s] = h
        if probe is not None:
            zero = x.new_zeros(k, n, hidden)
            prev = torch.stack([zero if p is None else p.detach() for p in prevs], 1)
            self.inputs.append((x.detach(), prev))
        assert h is not None
        return torch.stack(outs, 1), h, c

    def _parts(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Per cell, the Linear maps of its weights as (inputs, output gradients), each
        (K, N·T, ·) example-major like ``StackedLinear``'s: for LSTM and RNN, whose gates add both
        projections (one G), the one map [x_t, h_{t-1}] ↦ [W_ih W_hh] (G Gᵀ formed once); for
        GRU x_t ↦ W_ih (G) and h_{t-1} ↦ W_hh (H)."""
        g, g_width = self.grad_out, self._p(0).shape[1]

        def rows(a: torch.Tensor) -> torch.Tensor:  # (K, T, N, F) -> (K, N·T, F)
            return a.transpose(1, 2).reshape(a.shape[0], -1, a.shape[-1])

        parts = []
        for cell, (xin, hprev) in enumerate(self.inputs):
            if self.mode != "GRU":  # the Functions' G_t
                got = self.captured[cell]  # None: the loss does not depend on this layer
                gates = got if got is not None else xin.new_zeros(*xin.shape[:3], g_width)
                parts.append([(rows(torch.cat([xin, hprev], -1)), rows(gates))])
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
                sq = sq + linear_squared_norms(a, g, n, k, False)
                if self.has_bias:
                    sq = sq + 2 * g.reshape(k, n, -1, g.shape[-1]).sum(2).square().sum(-1).t()
            else:
                for a, g in parts:
                    sq = sq + linear_squared_norms(a, g, n, k, self.has_bias)
        return sq

    def clipped_sums(self, factors: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for (xin, _), parts in zip(self.inputs, self.parts):
            if len(parts) == 1:
                w, *b = linear_clipped_sums(*parts[0], factors, self.has_bias)
                d = xin.shape[-1]
                out += [w[..., :d], w[..., d:], *b, *[t.clone() for t in b]]
            else:
                w_ih = linear_clipped_sums(*parts[0], factors, self.has_bias)
                w_hh = linear_clipped_sums(*parts[1], factors, self.has_bias)
                out += [w_ih[0], w_hh[0], *w_ih[1:], *w_hh[1:]]
        self.inputs, self.parts, self.captured = [], [], []
        return out
