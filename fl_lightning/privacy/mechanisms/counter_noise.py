"""DP-SGD noise from a counter-based generator: every client's noise of a bucket in one draw.

A stateful ``torch.Generator`` per client forces one draw per client, parameter and step (the
stacked round of issue 59 issued 1,600 of them, 4,800 kernel launches on a GPU). A counter-based
generator (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3", SC'11) is a pure
function of a key and a counter, so the noise of many clients, steps and parameters is one
evaluation over a tensor of counters: Philox4x32-10 (their §4.2: ten rounds of two 32×32→64-bit
products, the halves XORed with the other counter words and the round key; the key bumped by the
Weyl constants), written in int64 tensor operations (the products wrap modulo 2⁶⁴, which keeps
their low and high 32-bit words exact) and evaluated the same way on every device.

The stream of one client and round is keyed by ``derive_seed(seed, round, client, "dp_sgd")``
(``utils/rng.py``; under ``privacy.secure_mode`` the run's secret seed is ``seed``, as for the
legacy generators), split into the two 32-bit key words. The counter of the 4 values
``4g .. 4g+3`` of the flat parameter vector (trainable parameters in order, concatenated) at local
step ``t`` is ``(g mod 2³², g div 2³², t, 0)``: distinct (client, round) keys, steps and
parameter blocks never share a counter. Each word w becomes a uniform u = (w + ½)·2⁻³² in (0, 1)
(float64) and pairs become standard normals by Box and Muller (1958): √(−2 ln u₁)·(cos 2πu₂,
sin 2πu₂). The noise is σC times these, in the parameters' dtype.

Because the values depend only on (key, counter), the sequential loop (one client, one step) and
the stacked executor (a bucket of clients, every step at once) draw the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fl_lightning.utils.rng import derive_seed

_MASK32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers (Salmon et al. 2011, Table 2)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments (golden ratio, √3 − 1)
ROUNDS = 10
#: most counters evaluated at once (int64 words of four such tensors live together)
CHUNK_COUNTERS = 1 << 20


def philox4x32(
    counter: Sequence[torch.Tensor], key: Sequence[torch.Tensor], rounds: int = ROUNDS
) -> list[torch.Tensor]:
    """Philox4x32-``rounds`` of broadcastable int64 tensors holding 32-bit words: the four
    counter words ``counter`` under the two key words ``key``; returns the four output words
    (int64, in [0, 2³²))."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        p0 = c0 * _M0  # < 2⁶⁴: wraps in int64, its two 32-bit halves stay exact
        p1 = c2 * _M1
        hi0, lo0 = (p0 >> 32) & _MASK32, p0 & _MASK32
        hi1, lo1 = (p1 >> 32) & _MASK32, p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return [c0, c1, c2, c3]


def stream_key(seed: int, round_idx: int, client_id: int) -> int:
    """The 64-bit key of one client's DP-SGD noise in one round (the legacy generator's seed,
    ``generator_for(seed, round, client, "dp_sgd")``)."""
    return derive_seed(seed, round_idx, client_id, "dp_sgd")


def standard_normals(
    keys: Sequence[int],
    steps: Sequence[int],
    size: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """N(0, 1) values of shape (len(keys), len(steps), size): stream ``keys[k]`` at local step
    ``steps[s]``, flat parameter positions 0 .. size − 1 (module docstring)."""
    device = torch.device(device)
    groups = -(-size // 4)
    key = torch.tensor(list(keys), dtype=torch.int64, device=device).view(-1, 1, 1)
    k0, k1 = key & _MASK32, (key >> 32) & _MASK32
    step = torch.tensor(list(steps), dtype=torch.int64, device=device).view(1, -1, 1)
    out = torch.empty(len(keys), len(steps), groups * 4, dtype=dtype, device=device)
    per = max(1, CHUNK_COUNTERS // max(1, len(keys) * len(steps)))
    for lo in range(0, groups, per):
        g = torch.arange(lo, min(groups, lo + per), dtype=torch.int64, device=device)
        g = g.view(1, 1, -1)
        words = philox4x32((g & _MASK32, g >> 32, step, torch.zeros_like(step)), (k0, k1))
        u = (torch.stack(words, dim=-1).double() + 0.5) * 2.0**-32  # (K, S, G, 4) in (0, 1)
        radius = torch.sqrt(-2.0 * torch.log(u[..., 0::2]))
        angle = (2.0 * math.pi) * u[..., 1::2]
        z = torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), dim=-1)
        out[:, :, 4 * lo : 4 * lo + 4 * g.shape[-1]] = z.flatten(-3)
    return out[:, :, :size]


class CounterStream:
    """One client's DP-SGD noise in one round (``client.dp_sgd.noise_rng: philox``): the
    sequential engines' counterpart of a ``torch.Generator``; each :meth:`normals` call is the
    next local step."""

    def __init__(self, seed: int, round_idx: int, client_id: int) -> None:
        self.key = stream_key(seed, round_idx, client_id)
        self.step = 0

    def normals(self, size: int, *, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The next step's ``size`` standard normals (flat parameter order)."""
        z = standard_normals([self.key], [self.step], size, device=device, dtype=dtype)
        self.step += 1
        return z.view(size)


__all__ = ["CounterStream", "philox4x32", "standard_normals", "stream_key"]
