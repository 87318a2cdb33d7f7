"""Fast, reproducible uniforms for the per-coordinate local-DP mechanisms (paper 003).

Why: one ``privatize`` call on a 10M-coordinate vector must draw 10M uniforms. With one
thread, ``torch.rand`` (mt19937) takes ~60 ms for them and ``torch.where`` with a random mask
~90 ms more (a mispredicted branch per element), which capped every sign mechanism below the
100 M coordinates/s/core goal (``benchmarks/results/mechanism_throughput.md``).

How: numpy's ``SFC64`` bit generator emits raw 64-bit words (``random_raw``), each split into
two 32-bit halves; the top 23 bits of a half become the mantissa of a float in [1, 2) (bits
``(h >> 9) | 0x3F800000``), minus 1: a float32 uniform k·2^-23 on [0, 1), 3-4x cheaper than
``torch.rand`` (CPU time). float64 tensors use one word per uniform, (w >> 11)·2^-53 (the same
as numpy's ``Generator.random``). Only ``SeedSequence`` and ``random_raw`` are used, whose
streams numpy keeps stable across releases. The arithmetic is cheap only if it stays in cache,
so the mechanisms work on chunks of :data:`CHUNK_SIZE` coordinates with preallocated buffers
(``out=`` / in-place ops, branch-free {0, 1} masks instead of ``torch.where``). The output is
allocated through numpy, which asks the kernel for transparent huge pages (first-touch page
faults of a fresh 40 MB tensor otherwise cost as much as the whole computation).

Reproducibility contract (unchanged ``privatize(x, *, generator)``): the stream is derived
deterministically from the caller's ``torch.Generator``: one small ``torch.randint`` call draws
126 bits of seed entropy (advancing the torch generator, so two calls in a row get different
streams), fed to ``np.random.SeedSequence`` and ``SFC64``. Same torch generator state -> same
uniforms -> same output; different states -> unrelated streams. With one draw per coordinate
the (even) chunk size does not change the stream; with several draws (HM) the draws are taken
chunk by chunk, so the output is deterministic for the fixed :data:`CHUNK_SIZE`.

Statistical argument: SFC64 is Chris Doty-Humphrey's Small Fast Chaotic PRNG (he wrote the
PractRand test suite; the SFC family is reported to pass PractRand and TestU01 BigCrush). Per
numpy's documentation it has a 256-bit state with a 64-bit counter (minimum period 2^64,
expected ~2^255; distinct seeds do not overlap for at least 2^64 draws), and a fixed seed gives
the same raw stream across numpy releases. ``SeedSequence`` hashes the seed, so nearby torch
seeds give unrelated streams. Like PyTorch's mt19937, SFC64 is **not cryptographically
secure**: an adversary who saw enough raw outputs could in principle predict the others. The
mechanisms' ε-LDP guarantees assume ideal randomness, exactly as they did with mt19937, so
this changes the speed, not the threat model; a deployment that must resist an adversary
inspecting the generator needs a CSPRNG for both. float32 uniforms have 23 random bits
(``torch.rand``: 24): a Bernoulli draw ``u < p`` has probability p rounded up to the 2^-23
grid (float64: 2^-53). Where p is a fixed keep-probability the mechanisms round it *down*
first (:func:`grid_probability`), so the realised probability is exact and never above the
nominal one.

Non-CPU tensors, dtypes numpy cannot fill (half, bfloat16) and small tensors (fewer than
:data:`NUMPY_MIN_SIZE` coordinates, where seeding SFC64 costs more than it saves) use
``torch.rand`` with the caller's generator, chunk by chunk, through the same code path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

CHUNK_SIZE = 1 << 16
"""Coordinates per chunk: float32 buffers of 256 KiB, so a chunk's working set stays in cache."""

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
_SHIFT = np.uint32(32 - 23)
_ONE_BITS = np.uint32(0x3F800000)  # float32 1.0: exponent 127, mantissa 0
_ONE = np.float32(1.0)
_SHIFT64 = np.uint64(64 - 53)
_ULP64 = 2.0**-53

UNIFORM_BITS = {torch.float32: 23, torch.float64: 53}
"""Random bits per uniform: float32 uniforms are k·2^-23, float64 ones k·2^-53 (0 ≤ k < 2^b)."""


def grid_probability(p: float, dtype: torch.dtype) -> float:
    """``p`` rounded **down** to the uniforms' grid: P(u < grid_probability(p)) is exactly that
    value and never exceeds ``p`` (so a keep-probability rounds towards less disclosure)."""
    scale = 2.0 ** UNIFORM_BITS.get(dtype, 24)
    return math.floor(p * scale) / scale


def numpy_generator(generator: torch.Generator) -> np.random.Generator:
    """A numpy SFC64 generator seeded from (and advancing) the torch ``generator``."""
    words = torch.randint(
        0, 2**63 - 1, (2,), generator=generator, dtype=torch.int64, device=generator.device
    )
    entropy = [int(w) for w in words.tolist()]
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(entropy)))


NUMPY_MIN_SIZE = 1 << 15
"""Below this many coordinates ``torch.rand`` is used: seeding SFC64 costs ~0.1 ms, more than
``torch.rand`` needs for 30k uniforms (this matters for per-layer calls on small layers)."""


def uses_numpy(x: torch.Tensor) -> bool:
    """True when uniforms for ``x`` come from numpy (CPU, float32/float64, not tiny)."""
    return x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES and x.numel() >= NUMPY_MIN_SIZE


@dataclass
class Chunk:
    """One chunk: input slice ``x``, output slice ``out``, fresh uniforms ``u`` (one tensor
    per requested draw, U[0, 1), same dtype as ``x``) and scratch buffers ``tmp``. All but
    ``x`` may be overwritten; ``u`` and ``tmp`` are reused by the next chunk."""

    x: torch.Tensor
    out: torch.Tensor
    u: tuple[torch.Tensor, ...]
    tmp: tuple[torch.Tensor, ...]


class ChunkedUniforms:
    """Iterates over ``x`` in chunks with ``draws`` independent uniforms per coordinate.

    Usage (the output is complete after the loop)::

        run = ChunkedUniforms(x, generator=g, draws=1, scratch=1)
        for c in run:
            torch.lt(c.u[0], p, out=c.out) ...
        return run.result()

    Args:
        x: input tensor (any shape; read as a flat contiguous copy if needed; never modified).
        generator: the torch generator the stream derives from.
        draws: independent uniforms per coordinate.
        scratch: number of scratch buffers of the chunk's length.
        chunk_size: coordinates per chunk (even; with ``draws=1`` it does not change the
            output). Non-CPU tensors are processed in one chunk.
    """

    def __init__(
        self,
        x: torch.Tensor,
        *,
        generator: torch.Generator,
        draws: int = 1,
        scratch: int = 0,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        if chunk_size <= 0 or chunk_size % 2:
            raise ValueError(f"chunk_size must be a positive even number, got {chunk_size}")
        self._shape = x.shape
        self.x = x.detach().reshape(-1).contiguous()
        if uses_numpy(self.x):  # numpy asks for transparent huge pages: ~4x fewer page faults
            self.out = torch.from_numpy(np.empty(self.x.numel(), dtype=_NUMPY_DTYPES[x.dtype]))
        else:
            self.out = torch.empty_like(self.x)
        self.generator = generator
        if x.device.type != "cpu":  # one kernel launch per op, not per chunk
            chunk_size = max(chunk_size, self.x.numel() + self.x.numel() % 2)
        self.chunk_size = chunk_size
        size = min(chunk_size, self.x.numel())
        self._u = [torch.empty(size, dtype=x.dtype, device=x.device) for _ in range(draws)]
        self._tmp = tuple(torch.empty(size, dtype=x.dtype, device=x.device) for _ in range(scratch))
        self._rng = numpy_generator(generator) if uses_numpy(x) else None
        self._u_np = [u.numpy() for u in self._u] if self._rng is not None else []

    def _fill(self, k: int, m: int) -> torch.Tensor:
        if self._rng is None:
            return torch.rand(m, generator=self.generator, out=self._u[k][:m])
        buf = self._u_np[k][:m]
        if buf.dtype == np.float64:  # (w >> 11)·2^-53, as numpy's Generator.random
            raw = self._rng.bit_generator.random_raw(m)
            np.right_shift(raw, _SHIFT64, out=raw)
            np.multiply(raw, _ULP64, out=buf, casting="unsafe")
        else:  # two float32 uniforms per 64-bit word: high 23 bits of each half, [1, 2) - 1
            bits = buf.view(np.uint32)
            halves = self._rng.bit_generator.random_raw((m + 1) // 2).view(np.uint32)[:m]
            np.right_shift(halves, _SHIFT, out=bits)
            np.bitwise_or(bits, _ONE_BITS, out=bits)
            np.subtract(buf, _ONE, out=buf)
        return self._u[k][:m]

    def __iter__(self) -> Iterator[Chunk]:
        n = self.x.numel()
        with torch.no_grad():
            for i in range(0, n, self.chunk_size):
                j = min(i + self.chunk_size, n)
                m = j - i
                yield Chunk(
                    x=self.x[i:j],
                    out=self.out[i:j],
                    u=tuple(self._fill(k, m) for k in range(len(self._u))),
                    tmp=tuple(t[:m] for t in self._tmp),
                )

    def result(self) -> torch.Tensor:
        return self.out.view(self._shape)


def scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor for ``torch.add(scalar, u, alpha=b, out=...)`` (= value + b·u in one op).
    Cached (read-only use): building a tensor costs more than a small chunk's arithmetic."""
    return _scalar(float(value), like.dtype, like.device)


@functools.lru_cache(maxsize=256)
def _scalar(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype, device=device)
