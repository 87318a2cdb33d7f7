"""DPFL-AGN (Jiao et al. 2023): accounting with a σ schedule, ANR trigger, Adam on the noisy
gradient, per-client Adam state, configuration errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as opacus_rdp
from scipy.special import logsumexp

from fl_lightning.records import LocalOverrides, RoundContext
from fl_lightning.strategies.dpfl_agn import DPFLAGN
from fl_lightning.testing import round_context
from tests.strategies.dpfl_agn_helpers import tiny_run

DELTA = 1e-5


def _ctx(round_idx: int, losses: list[float]) -> RoundContext:
    return round_context(3, [0, 1], round_idx=round_idx, total_rounds=10,
                         evaluate=lambda split: {"loss": losses.pop(0)})  # fmt: skip


# -- ANR (Eqs. 11-12) -----------------------------------------------------------------------
def test_anr_fires_exactly_when_the_decrease_is_below_mu():
    s = DPFLAGN(mu=0.25, rho=0.5, anr_loss="test")
    s.sigma = 4.0
    # v(ω_0) = 2; then decreases of 0.5 (no), 0.25 (= μ: no, strict), 0.125 (yes), −0.5 (loss
    # went up: yes), 1.0 (no). All exactly representable in binary.
    losses = [2.0, 1.5, 1.25, 1.125, 1.625, 0.625]
    fired, sigmas = [], []
    for t in range(5):
        ctx = _ctx(t, losses)
        assert s.configure_round(ctx).local == LocalOverrides(noise_multiplier=s.sigma)
        sigmas.append(s.sigma)
        fired.append(bool(s.after_round(ctx, torch.zeros(3))["anr_fired"]))
    assert fired == [False, False, True, True, False]
    assert sigmas == [4.0, 4.0, 4.0, 2.0, 1.0]
    assert s.sigma == 1.0 and s.decay_rounds == [2, 3] and s.sigma_history == sigmas
    assert losses == []  # v(ω_0) once, then one evaluation per round


def test_anr_patience_measures_the_decrease_over_a_window_of_rounds():
    # Per-round decreases of 0.125 < μ = 0.25: the published rule (k = 1) fires every round,
    # a window of k = 3 sees 0.375 >= μ and never fires; after a plateau it fires once, then
    # waits k rounds before it can fire again.
    steady = [2.0 - 0.125 * i for i in range(7)]
    published = DPFLAGN(mu=0.25, rho=0.5, anr_loss="test")
    windowed = DPFLAGN(mu=0.25, rho=0.5, anr_loss="test", anr_patience=3)
    for s in (published, windowed):
        s.sigma, losses, fired = 4.0, list(steady), []
        for t in range(6):
            ctx = _ctx(t, losses)
            s.configure_round(ctx)
            fired.append(bool(s.after_round(ctx, torch.zeros(3))["anr_fired"]))
        s.fired = fired
    assert published.fired == [True] * 6 and published.sigma == 4.0 * 0.5**6
    assert windowed.fired == [False] * 6 and windowed.sigma == 4.0
    plateau = DPFLAGN(mu=0.25, rho=0.5, anr_loss="test", anr_patience=2)
    plateau.sigma, plateau.prev_loss = 4.0, 1.0
    fired = [plateau.anr_step(loss) for loss in [1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]]
    # window [1,1,1]: fires at the 2nd; restarts at [1]; fires 2 rounds later; then 1 -> 0.5 -> 0
    # decreases by 1 over 2 rounds (no), 0.5 -> 0 -> 0 by 0.5 (no), 0 -> 0 -> 0 (yes).
    assert fired == [False, True, False, True, False, False, False, True]
    assert plateau.sigma == 0.5
    restored = DPFLAGN(anr_patience=2)
    restored.load_state_dict(plateau.state_dict())
    assert restored.anr_window == plateau.anr_window == [0.0]


def test_anr_respects_the_noise_floor_and_off_switch():
    s = DPFLAGN(mu=1.0, rho=0.5, noise_floor=1.5)
    s.sigma, s.prev_loss = 4.0, 1.0
    for _ in range(4):
        s.anr_step(1.0)
    assert s.sigma == 1.5
    off = DPFLAGN(anr=False)
    off.sigma = 4.0
    ctx = _ctx(0, [])  # evaluate would raise IndexError if called
    off.configure_round(ctx)
    metrics = off.after_round(ctx, torch.zeros(3))
    assert off.sigma == 4.0 and metrics == {"noise_multiplier": 4.0}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rho": 1.0}, "strategy.rho"),
        ({"rho": 0.0}, "strategy.rho"),
        ({"mu": -1}, "strategy.mu"),
        ({"anr_loss": "train"}, "strategy.anr_loss"),
        ({"adam_state": "x"}, "strategy.adam_state"),
        ({"noise_floor": -1.0}, "strategy.noise_floor"),
        ({"anr_patience": 0}, "strategy.anr_patience"),
    ],
)
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DPFLAGN(**kwargs)


# -- accounting -----------------------------------------------------------------------------
def _log_a_integer(q: float, sigma: float, alpha: int) -> float:
    """log A_α for integer α (Mironov, Talwar, Zhang 2019): the paper's Eq. 17 with the + sign."""
    j = np.arange(alpha + 1)
    log_binom = np.array(
        [math.lgamma(alpha + 1) - math.lgamma(k + 1) - math.lgamma(alpha - k + 1) for k in j]
    )
    with np.errstate(divide="ignore"):
        terms = (
            log_binom
            + j * math.log(q)
            + (alpha - j) * math.log1p(-q)
            + (j * j - j) / (2 * sigma**2)
        )
    return float(logsumexp(terms))


def test_integer_order_rdp_matches_the_corrected_formula():
    orders = list(range(2, 65))
    for q, sigma in [(0.01, 1.0), (0.05, 4.0), (0.2, 0.8)]:
        ours = [_log_a_integer(q, sigma, a) / (a - 1) for a in orders]
        np.testing.assert_allclose(
            opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=orders),
            ours,
            rtol=1e-9,
        )


def test_constant_sigma_run_equals_opacus_rdp_accountant():
    module, _ = tiny_run(
        DPFLAGN(adaptive_lr=False, anr=False, adam_state="reset"),
        rounds=3,
        optimizer="sgd",
        sigma=1.2,
        local_steps=2,
    )
    acc = module.accountant
    sizes = module.data.client_sizes()
    assert set(acc.record_level) == set(range(len(sizes)))
    for cid, n in enumerate(sizes):
        ref = RDPAccountant()
        for _ in range(3 * 2):
            ref.step(noise_multiplier=1.2, sample_rate=8 / int(n))
        mine = acc._record_level_epsilon({cid: acc.record_level[cid]})
        assert mine == pytest.approx(ref.get_epsilon(DELTA), rel=1e-9)
    worst = max(8 / int(n) for n in sizes)
    ref = RDPAccountant()
    for _ in range(6):
        ref.step(noise_multiplier=1.2, sample_rate=worst)
    assert acc.report()["privacy/epsilon"] == pytest.approx(ref.get_epsilon(DELTA), rel=1e-9)


def test_sigma_schedule_is_recorded_and_composed_as_the_sum_of_per_step_rdp():
    # mu huge: ANR fires every round, σ_t = 2, 1, 0.5, 0.25 (floor 0.3 clips the last).
    strategy = DPFLAGN(mu=100.0, rho=0.5, noise_floor=0.3)
    module, _ = tiny_run(strategy, rounds=4, sigma=2.0, local_steps=3)
    assert strategy.sigma_history == [2.0, 1.0, 0.5, 0.3]
    acc = module.accountant
    orders = np.array(RDPAccountant.DEFAULT_ALPHAS, dtype=float)
    for cid, n in enumerate(module.data.client_sizes()):
        q = 8 / int(n)
        assert [(e.noise_multiplier, e.sample_rate, e.steps) for e in acc.record_level[cid]] == [
            (s, q, 3) for s in strategy.sigma_history
        ]
        # Independent sum: Σ_t s_t·RDP(q, σ_t) at every order, then RDP → (ε, δ).
        total = sum(
            3 * opacus_rdp.compute_rdp(q=q, noise_multiplier=s, steps=1, orders=orders)
            for s in strategy.sigma_history
        )
        eps, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=total, delta=DELTA)
        assert acc._record_level_epsilon({cid: acc.record_level[cid]}) == pytest.approx(eps)
        # Integer orders 2..64 with the paper's (corrected) formula and conversion bound it.
        ints = range(2, 65)
        paper = min(
            (sum(3 * _log_a_integer(q, s, a) for s in strategy.sigma_history) + math.log(1 / DELTA))
            / (a - 1)
            for a in ints
        )
        assert eps <= paper + 1e-9


def test_run_stops_before_exceeding_target_epsilon():
    strategy = DPFLAGN(mu=100.0, rho=0.5)
    module, _ = tiny_run(strategy, rounds=50, sigma=1.0, target_epsilon=4.0, local_steps=2)
    eps = module.accountant.report()["privacy/epsilon"]
    assert module.stopped_by_budget and eps <= 4.0
    assert 0 < module.rounds_completed < 50
    # One more round at the σ it would have used would have exceeded the target.
    steps = module.federated_round
    ctx, _ = steps.plan(module.rounds_completed, 50, module.evaluate_global)
    assert module.accountant.would_exceed(steps.planned_privacy(ctx))


# -- AGN: Adam on the noisy gradient (Eqs. 6-10) --------------------------------------------
def agn_adam_step(w, g, state, *, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """Eqs. 6-10 written out (with β2 and β^t, not Algorithm 1's typos)."""
    state["t"] += 1
    state["m"] = beta1 * state["m"] + (1 - beta1) * g
    state["v"] = beta2 * state["v"] + (1 - beta2) * g * g
    m_hat = state["m"] / (1 - beta1 ** state["t"])
    v_hat = state["v"] / (1 - beta2 ** state["t"])
    return w - lr * m_hat / (v_hat.sqrt() + eps)


def test_adam_on_fixed_noisy_gradients_matches_torch_adam():
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(50, generator=g, dtype=torch.float64)
    grads = [torch.randn(50, generator=g, dtype=torch.float64) * 3 for _ in range(6)]
    p = torch.nn.Parameter(w0.clone())
    opt = torch.optim.Adam([p], lr=1e-3)  # β1 0.9, β2 0.999, ε 1e-8 by default
    w, state = (
        w0.clone(),
        {
            "t": 0,
            "m": torch.zeros(50, dtype=torch.float64),
            "v": torch.zeros(50, dtype=torch.float64),
        },
    )
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
        w = agn_adam_step(w, grad, state, lr=1e-3)
        torch.testing.assert_close(p.detach(), w, rtol=1e-12, atol=1e-12)


class _Capture(DPFLAGN):
    """Records every noisy gradient the local loop hands to the optimizer."""

    def __init__(self, **kw) -> None:
        super().__init__(anr=False, **kw)
        self.grads: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []

    def configure_client(self, client_id, ctx):
        def capture(params) -> None:
            flat_w = torch.cat([p.detach().reshape(-1) for p in params]).double()
            flat_g = torch.cat([p.grad.reshape(-1) for p in params]).double()
            self.grads.append((ctx.round_idx, client_id, flat_w, flat_g))

        return dataclasses.replace(super().configure_client(client_id, ctx), grad_hook=capture)


@pytest.mark.parametrize("adam_state", ["persist", "reset"])
def test_local_adam_state_persists_per_client_across_rounds(adam_state):
    strategy = _Capture(adam_state=adam_state)
    tiny_run(strategy, rounds=3, sigma=1.0, local_steps=2, num_clients=2, lr=0.01)
    # Replay each client's captured noisy gradients through Eqs. 6-10 with one state per client
    # (persist) or a fresh state every round (reset): every step starts where Adam left off.
    states: dict[int, dict] = {}
    last_round: dict[int, int] = {}
    compared = 0
    for i, (rnd, cid, w, grad) in enumerate(strategy.grads):
        if cid not in states or (adam_state == "reset" and last_round[cid] != rnd):
            states[cid] = {"t": 0, "m": torch.zeros_like(w), "v": torch.zeros_like(w)}
        last_round[cid] = rnd
        expected = agn_adam_step(w, grad, states[cid], lr=0.01)
        nxt = strategy.grads[i + 1] if i + 1 < len(strategy.grads) else None
        if nxt is not None and nxt[0] == rnd and nxt[1] == cid:
            torch.testing.assert_close(nxt[2], expected, rtol=1e-5, atol=1e-6)
            compared += 1
    assert compared == 2 * 3  # one within-round comparison per client and round
    steps = {cid: int(st["t"]) for cid, st in states.items()}
    assert steps == ({0: 6, 1: 6} if adam_state == "persist" else {0: 2, 1: 2})
    if adam_state == "persist":
        assert all(int(s["state"][0]["step"]) == 6 for s in strategy.optimizer_states.values())
    else:
        assert strategy.optimizer_states == {}


def test_adaptive_lr_follows_the_client_optimizer_by_default():
    agn, _ = tiny_run(DPFLAGN(anr=False), optimizer="adam", rounds=1)
    anr, _ = tiny_run(DPFLAGN(), optimizer="sgd", rounds=1)
    assert agn.strategy.adaptive_lr is True and anr.strategy.adaptive_lr is False


def test_state_dict_round_trip():
    strategy = DPFLAGN(mu=100.0, rho=0.5)
    tiny_run(strategy, rounds=2, sigma=1.0)
    restored = DPFLAGN()
    restored.load_state_dict(strategy.state_dict())
    assert restored.sigma == strategy.sigma == 0.25
    assert restored.prev_loss == strategy.prev_loss
    assert set(restored.optimizer_states) == {0, 1, 2, 3}


# -- configuration errors -------------------------------------------------------------------
def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="client.optimizer"):
        tiny_run(DPFLAGN(adaptive_lr=True), optimizer="sgd", rounds=1)
    with pytest.raises(ValueError, match="data.val_fraction"):
        tiny_run(DPFLAGN(), val_fraction=0.0, rounds=1)
    with pytest.raises(ValueError, match="client.dp_sgd"):
        tiny_run(DPFLAGN(), dp=False, rounds=1)


def test_model_averaging_check_rejects_server_momentum():
    from fl_lightning.strategies.spec import ServerOptimizerSpec

    ServerOptimizerSpec("sgd", 1.0, 0.0).require_model_averaging("x")
    for bad in (ServerOptimizerSpec("sgd", 1.0, 0.9), ServerOptimizerSpec("adam", 1.0, 0.0)):
        with pytest.raises(ValueError, match="model.server_optimizer: x averages"):
            bad.require_model_averaging("x")


def test_dpsgd_baseline_is_a_config_of_dpfl_agn_with_both_parts_off():
    import importlib
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "configs/strategy/dpfl_agn/dpsgd.yaml"
    raw = yaml.safe_load(path.read_text())
    module, _, name = raw["class_path"].rpartition(".")
    strategy = getattr(importlib.import_module(module), name)(**raw["init_args"])
    assert type(strategy) is DPFLAGN
    assert (strategy.adaptive_lr, strategy.anr, strategy.adam_state) == (False, False, "reset")
