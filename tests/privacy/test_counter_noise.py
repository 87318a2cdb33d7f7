"""The counter-based DP-SGD noise (``privacy/mechanisms/counter_noise.py``,
``privacy/mechanisms/dp_sgd_noise.py``): Philox4x32-10's published answers, the normal distribution
(moments, Kolmogorov–Smirnov), independence across clients, steps and parameters, one bucket's draw
equal to the clients' own streams, and the legacy ``torch`` generators unchanged bit for bit."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from fl_lightning.privacy.mechanisms.counter_noise import (
    CounterStream,
    philox4x32,
    standard_normals,
    stream_key,
)
from fl_lightning.privacy.mechanisms.dp_sgd_noise import BucketNoise, generator_noise, stream_noise
from fl_lightning.utils.rng import generator_for


def _words(*values: int) -> list[torch.Tensor]:
    return [torch.tensor([v], dtype=torch.int64) for v in values]


@pytest.mark.parametrize(
    ("counter", "key", "want"),
    [  # Random123's known-answer vectors (kat_vectors, philox4x32 10 rounds)
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers(counter, key, want) -> None:
    got = philox4x32(_words(*counter), _words(*key))
    assert tuple(int(w) for w in got) == want


def test_values_are_standard_normal() -> None:
    """200,000 values: mean, variance, skewness and excess kurtosis near N(0, 1)'s (within ~5
    standard errors) and a Kolmogorov–Smirnov test against the normal CDF."""
    z = standard_normals([stream_key(0, 0, c) for c in range(4)], range(5), 10_000).double()
    x = z.flatten().numpy()
    n = len(x)
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(stats.skew(x)) < 5 * math.sqrt(6 / n)
    assert abs(stats.kurtosis(x)) < 5 * math.sqrt(24 / n)
    assert stats.kstest(x, "norm").pvalue > 1e-3


def test_clients_steps_and_parameters_are_independent() -> None:
    """No two streams share values, and the correlation between clients, between steps and
    between neighbouring parameter positions is within ~5 standard errors of 0."""
    z = standard_normals([stream_key(7, 3, c) for c in range(3)], range(3), 20_000).double()
    limit = 5 / math.sqrt(20_000)
    rows = z.reshape(9, -1)
    corr = torch.corrcoef(rows)
    off = corr[~torch.eye(9, dtype=torch.bool)]
    assert off.abs().max() < limit  # every (client, step) pair against every other
    lag = torch.corrcoef(torch.stack([rows[:, :-1].flatten(), rows[:, 1:].flatten()]))[0, 1]
    assert abs(lag) < limit / 3  # neighbouring positions (inside and across Philox blocks)
    # the four lanes of a Philox block: the same value distribution in each
    lanes = z.reshape(-1, 4)
    for lane in range(4):
        assert stats.kstest(lanes[:, lane].numpy(), "norm").pvalue > 1e-4


def test_the_key_is_seed_round_and_client() -> None:
    """Another seed (the secret one in secure mode), round or client gives other values; the
    same ones give the same values."""
    base = standard_normals([stream_key(1, 2, 3)], [0], 64)
    assert torch.equal(base, standard_normals([stream_key(1, 2, 3)], [0], 64))
    for other in ((9, 2, 3), (1, 9, 3), (1, 2, 9)):
        assert not torch.allclose(base, standard_normals([stream_key(*other)], [0], 64))


def test_a_bucket_draw_equals_each_clients_stream() -> None:
    """The stacked executor's one draw for a bucket (``BucketNoise``, philox) gives each client
    the values its sequential stream gives it step by step (``stream_noise``)."""
    shapes = [torch.Size([3, 5]), torch.Size([5]), torch.Size([2, 1, 3, 3])]
    clients = [4, 11, 2]
    bucket = BucketNoise("philox", seed=5, round_idx=1, clients=clients, shapes=shapes, std=0.7,
                         steps=3, device=torch.device("cpu"))  # fmt: skip
    for j, c in enumerate(clients):
        stream = CounterStream(5, 1, c)
        for t in range(3):
            own = stream_noise(stream, shapes, std=0.7, device=torch.device("cpu"),
                               dtype=torch.float32)  # fmt: skip
            want = torch.cat([o.reshape(-1) for o in own])
            torch.testing.assert_close(bucket.at(t, 0)[j], want, rtol=1e-6, atol=1e-7)
    # the active suffix of the bucket at a step
    assert torch.equal(bucket.at(2, 1), bucket.at(2, 0)[1:])


def test_a_window_smaller_than_the_steps_gives_the_same_values(monkeypatch) -> None:
    """Under a memory window of one step the bucket's noise is drawn step by step, with the
    same values."""
    import fl_lightning.privacy.mechanisms.dp_sgd_noise as module

    kw = {"seed": 0, "round_idx": 0, "clients": [0, 1], "shapes": [torch.Size([10])],
          "std": 1.0, "steps": 4, "device": torch.device("cpu")}  # fmt: skip
    whole = BucketNoise("philox", **kw)
    monkeypatch.setattr(module, "WINDOW_VALUES", 20)
    stepwise = BucketNoise("philox", **kw)
    for t in range(4):
        assert torch.equal(whole.at(t, 0), stepwise.at(t, 0))


def test_torch_noise_is_opacus_draws_bit_for_bit() -> None:
    """``noise_rng: torch`` keeps every stored result: each client's row is Opacus'
    ``_generate_noise`` of each shape from its own keyed generator, in order, exactly; σC = 0
    draws nothing."""
    from opacus.optimizers.optimizer import _generate_noise

    shapes = [torch.Size([3, 5]), torch.Size([5]), torch.Size([40])]
    gens = [generator_for(0, 1, c, "dp_sgd") for c in range(3)]
    got = generator_noise(gens, shapes, std=0.9, device=torch.device("cpu"), dtype=torch.float32)
    for j in range(3):
        g = generator_for(0, 1, j, "dp_sgd")
        want = torch.cat([_generate_noise(0.9, torch.zeros(s), g).reshape(-1) for s in shapes])
        assert torch.equal(got[j], want)
    zero = generator_noise(gens, shapes, std=0.0, device=torch.device("cpu"), dtype=torch.float32)
    assert not zero.any()


def test_an_unknown_generator_is_refused_naming_the_field() -> None:
    from fl_lightning.client.config import DPSGDConfig

    with pytest.raises(ValueError, match=r"client\.dp_sgd\.noise_rng"):
        DPSGDConfig(noise_rng="mt19937")


def test_the_sequential_release_under_philox() -> None:
    """``noisy_mean`` with a client's counter stream releases (Σ clip + σC·z_t) / (q·n) with z_t
    the stream's standard normals of local step t, step after step (Abadi et al. 2016, Alg. 1)."""
    from fl_lightning.client.dp_sgd import noisy_mean

    sums = [torch.ones(4, 3), torch.full((3,), 2.0)]
    stream = CounterStream(3, 0, 8)
    for t in range(2):
        got = noisy_mean(sums, std=0.5, expected_batch_size=4.0, generator=stream)
        z = standard_normals([stream_key(3, 0, 8)], [t], 15).view(15)
        want = (z * 0.5 + torch.cat([s.reshape(-1) for s in sums])) / 4.0
        assert torch.equal(torch.cat([g.reshape(-1) for g in got]), want)
    assert torch.equal(sums[0], torch.ones(4, 3))  # the sums are left as they were
