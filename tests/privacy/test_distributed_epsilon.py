"""The ε of a 3-round distributed-DP run recomputed from the papers' formulas, written here
from scratch (nothing of fl_lightning's accounting is imported): the rounding bound (Kairouz,
Liu & Steinke 2021, Prop. 22), τ (Thm. 1) and the DDG RDP (Prop. 14); Skellam's RDP (Agarwal,
Kairouz & Liu 2021); Zhu & Wang 2019's Poisson-subsampling bound; RDP → (ε, δ) (Balle et al.
2020). And dropouts: the round is priced with the survivors' noise, so ε rises with them."""

from __future__ import annotations

import math

import pytest

from fl_lightning.client.module import ClientModule
from fl_lightning.data import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.strategies.ddp_fedavg import DDPFedAvg
from fl_lightning.testing import simulate

DELTA = 1e-5


def lgamma_binom(a: int, k: int) -> float:
    return math.lgamma(a + 1) - math.lgamma(k + 1) - math.lgamma(a - k + 1)


def expected_epsilon(mechanism, *, clip, scale, var, dim, beta, q, survivors):
    """ε after rounds with ``survivors`` clients each, by the formulas (module docstring)."""
    x = clip * scale
    l2 = min(
        x + math.sqrt(dim),
        math.sqrt(x**2 + dim / 4 + math.sqrt(2 * math.log(1 / beta)) * (x + math.sqrt(dim) / 2)),
    )
    l1 = l2 * min(math.sqrt(dim), l2)

    def rdp(a: int, n: int) -> float:
        mu = n * var
        if mechanism == "skellam":
            extra = min(((2 * a - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu))
            return a * l2**2 / (2 * mu) + extra
        tau = 10 * sum(math.exp(-2 * math.pi**2 * var * k / (k + 1)) for k in range(1, n))
        s2, s1 = l2 / math.sqrt(mu), l1 / math.sqrt(mu)
        return min(
            a / 2 * s2**2 + tau * dim,
            a / 2 * (s2**2 + 2 * s1 * tau + tau**2 * dim),
            a / 2 * (s2 + math.sqrt(dim) * tau) ** 2,
        )

    def sampled(a: int, n: int) -> float:
        if n == 0:
            return 0.0
        if a > 128 or q >= 1.0:
            return rdp(a, n)
        parts = [(1 - q) ** (a - 1) * (a * q - q + 1)]
        logs = [0.0]
        for k in range(2, a + 1):
            logs.append(
                (k - 1) * rdp(k, n)
                + lgamma_binom(a, k)
                + (a - k) * math.log(1 - q)
                + k * math.log(q)
            )
            parts.append(1.0 if k == 2 else 3.0)
        top = max(logs)
        total = sum(w * math.exp(v - top) for w, v in zip(parts, logs, strict=True))
        return min(rdp(a, n), (top + math.log(total)) / (a - 1))

    best = math.inf
    for a in [*range(2, 129), 256]:
        r = sum(sampled(a, n) for n in survivors)
        best = min(best, r + math.log((a - 1) / a) - (math.log(DELTA) + math.log(a)) / (a - 1))
    return max(0.0, best)


def federation(num_clients: int, num_examples: int, **client: int):
    """A synthetic 3-class federation of ``num_clients`` and a one-step MLP client."""
    data = FederatedDataModule(
        "synthetic",
        num_clients=num_clients,
        dataset_options={"num_examples": num_examples, "num_features": 8, "num_classes": 3},
    )
    data.setup("fit")
    net = MLP(input_dim=8, hidden=(8,), num_classes=3)
    return data, ClientModule(net, num_classes=3, lr=0.1, local_steps=1, **client)


def run(mechanism: str, dropout: float, rounds: int = 3):
    data, client = federation(20, 400, batch_size=8)
    strategy = DDPFedAvg(
        mechanism=mechanism, bits=14, clip_norm=0.5, noise_multiplier=1.0, dropout_rate=dropout
    )
    results = simulate(
        strategy,
        data,
        rounds,
        client=client,
        clients_per_round=10,
        privacy=PrivacyAccountant("pld", DELTA),
        seed=4,
    )
    return strategy, results


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_three_round_epsilon_equals_the_formulas(mechanism):
    strategy, results = run(mechanism, 0.2)
    dp = strategy.dp
    survivors = [int(r.strategy_metrics["secagg_survivors"]) for r in results]
    assert len(results) == 3 and any(s < len(r.cohort) for s, r in zip(survivors, results))
    want = expected_epsilon(
        mechanism,
        clip=0.5,
        scale=dp.scale,
        var=dp.local_variance,
        dim=dp.padded,
        beta=math.exp(-0.5),
        q=0.5,
        survivors=survivors,
    )
    assert results[-1].epsilon == pytest.approx(want, rel=1e-9)
    assert 0 < want < math.inf


def test_epsilon_rises_with_dropouts_as_the_survivors_noise_says():
    eps = {}
    for rate in (0.0, 0.1, 0.3):
        strategy, results = run("ddg", rate)
        eps[rate] = results[-1].epsilon
        survivors = [int(r.strategy_metrics["secagg_survivors"]) for r in results]
        if rate == 0.0:
            assert survivors == [len(r.cohort) for r in results]
    assert eps[0.0] < eps[0.1] < eps[0.3]


def test_an_unset_sigma_is_calibrated_to_the_target_over_the_planned_rounds():
    """σ = None: the smallest σ (to 0.01) whose planned rounds (every client every round here,
    so planned = spent) spend the target; a σ 0.01 smaller would exceed it."""
    data, client = federation(8, 160)
    strategy = DDPFedAvg(mechanism="skellam", bits=16, noise_multiplier=None)
    results = simulate(
        strategy, data, 3, client=client, clients_per_round=8,
        privacy=PrivacyAccountant("rdp", DELTA, target_epsilon=4.0), seed=1,
    )  # fmt: skip
    dp = strategy.dp
    assert len(results) == 3 and results[-1].epsilon <= 4.0
    assert results[-1].epsilon > 3.5
    smaller = dp.noise_multiplier - 0.01
    scale = dp._scale_for(smaller)
    want = expected_epsilon(
        "skellam", clip=1.0, scale=scale, var=(smaller * scale) ** 2 / 8, dim=dp.padded,
        beta=math.exp(-0.5), q=1.0, survivors=[8, 8, 8],
    )  # fmt: skip
    assert want > 4.0
