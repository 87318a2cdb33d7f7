"""Tests of the chunked SFC64 uniforms behind the local-DP mechanisms (``fast_random.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fl_lightning.privacy.mechanisms.fast_random import (
    NUMPY_MIN_SIZE,
    UNIFORM_BITS,
    ChunkedUniforms,
    grid_probability,
    numpy_generator,
    uses_numpy,
)

N = 1_000_000


def _uniforms(seed: int, *, n: int = N, dtype=torch.float32, chunk_size: int = 1 << 16, draws=1):
    """Concatenated uniforms of a ChunkedUniforms run (copied: the buffers are reused)."""
    x = torch.zeros(n, dtype=dtype)
    run = ChunkedUniforms(
        x, generator=torch.Generator().manual_seed(seed), draws=draws, chunk_size=chunk_size
    )
    parts = [[] for _ in range(draws)]
    for c in run:
        for k in range(draws):
            parts[k].append(c.u[k].clone())
    return [torch.cat(p) for p in parts]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_moments_histogram_and_grid(dtype):
    (u,) = _uniforms(0, dtype=dtype)
    assert u.dtype == dtype and u.numel() == N
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    se = math.sqrt(1 / 12 / N)
    assert abs(float(u.double().mean()) - 0.5) < 5 * se
    assert abs(float(u.double().var()) - 1 / 12) < 0.01 / 12
    counts = torch.histc(u.double(), bins=64, min=0.0, max=1.0)
    expected = N / 64
    assert torch.all((counts - expected).abs() < 5 * math.sqrt(expected))
    # Values lie on the k·2^-b grid.
    k = u.double() * 2.0 ** UNIFORM_BITS[dtype]
    assert torch.equal(k, k.floor())


def test_uniforms_use_all_mantissa_bits():
    """Every one of the 23 bits of k is 0 or 1 about half the time (no stuck bits)."""
    (u,) = _uniforms(1)
    k = (u.double() * 2.0**23).long()
    for b in range(23):
        frac = float(((k >> b) & 1).double().mean())
        assert abs(frac - 0.5) < 5 * math.sqrt(0.25 / N), b


@pytest.mark.parametrize("p", [0.5 + 1e-9, 0.5744425168116589, 0.98, 0.999])
def test_bernoulli_rate_is_grid_probability(p):
    (u,) = _uniforms(2)
    q = grid_probability(p, torch.float32)
    assert q <= p and p - q < 2.0**-23
    rate = float((u < q).double().mean())
    assert abs(rate - q) < 5 * math.sqrt(q * (1 - q) / N)


def test_two_draws_are_independent():
    u, v = _uniforms(3, draws=2)
    corr = torch.corrcoef(torch.stack([u.double(), v.double()]))[0, 1]
    assert abs(float(corr)) < 5 / math.sqrt(N)
    assert not torch.equal(u, v)


def test_determinism_and_distinct_streams():
    a, b = _uniforms(7)[0], _uniforms(7)[0]
    assert torch.equal(a, b)
    assert not torch.equal(a, _uniforms(8)[0])
    # Two runs in a row on one generator get different streams (the seed draw advances it).
    g = torch.Generator().manual_seed(7)
    x = torch.zeros(NUMPY_MIN_SIZE)
    first = [c.u[0].clone() for c in ChunkedUniforms(x, generator=g)][0]
    second = [c.u[0].clone() for c in ChunkedUniforms(x, generator=g)][0]
    assert not torch.equal(first, second)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunk_size_does_not_change_the_stream(dtype):
    n = 100_001  # odd: the last chunk is odd-sized
    ref = _uniforms(9, n=n, dtype=dtype, chunk_size=1 << 16)[0]
    for cs in (16, 1000, 1 << 20):
        assert torch.equal(_uniforms(9, n=n, dtype=dtype, chunk_size=cs)[0], ref)
    with pytest.raises(ValueError, match="chunk_size"):
        ChunkedUniforms(torch.zeros(4), generator=torch.Generator(), chunk_size=3)


def test_small_inputs_use_torch_rand_on_its_24_bit_grid():
    n = NUMPY_MIN_SIZE - 2
    x = torch.zeros(n)
    (u,) = _uniforms(5, n=n)
    assert torch.equal(u, torch.rand(n, generator=torch.Generator().manual_seed(5)))
    assert not uses_numpy(x) and uses_numpy(torch.zeros(NUMPY_MIN_SIZE))
    q = grid_probability(0.7310585786300049, torch.float32)  # on the 2^-24 grid too
    assert abs(float((u < q).double().mean()) - q) < 5 * math.sqrt(q * (1 - q) / n)


def test_torch_fallback_for_other_dtypes():
    (u,) = _uniforms(4, n=10_000, dtype=torch.bfloat16)
    assert u.dtype == torch.bfloat16 and float(u.min()) >= 0 and float(u.max()) < 1
    assert torch.equal(u, _uniforms(4, n=10_000, dtype=torch.bfloat16)[0])


def test_output_shape_and_empty_input():
    x = torch.ones(3, 5)
    run = ChunkedUniforms(x, generator=torch.Generator().manual_seed(0), chunk_size=4)
    for c in run:
        torch.mul(c.x, c.u[0], out=c.out)
    out = run.result()
    assert out.shape == (3, 5) and torch.all(out < 1) and torch.equal(x, torch.ones(3, 5))
    empty = ChunkedUniforms(torch.zeros(0), generator=torch.Generator())
    assert list(empty) == [] and empty.result().numel() == 0


def test_uniforms_are_the_documented_functions_of_the_raw_sfc64_words():
    """float32: top 23 bits of each 32-bit half of a word; float64: numpy's Generator.random."""
    n = NUMPY_MIN_SIZE + 2
    (u32,) = _uniforms(6, n=n)
    words = numpy_generator(torch.Generator().manual_seed(6)).bit_generator.random_raw(n // 2)
    expected = (words.view(np.uint32) >> 9).astype(np.float64)
    assert np.array_equal(u32.double().numpy() * 2.0**23, expected)
    (u64,) = _uniforms(6, n=n, dtype=torch.float64)
    assert np.array_equal(u64.numpy(), numpy_generator(torch.Generator().manual_seed(6)).random(n))
