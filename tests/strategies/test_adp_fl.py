"""ADP-FL (fl_lightning/strategies/adp_fl.py): schedule, callback, Eq. 8, staleness, budget."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.records import ClientUpdate
from fl_lightning.server.round import plan_round
from fl_lightning.strategies.adp_fl import ADPFL, schedule_factor
from fl_lightning.strategies.asynchronous.buffer import Arrival
from fl_lightning.strategies.even_budget import EvenBudget
from fl_lightning.strategies.spec import FederationSpec, PrivacyTarget
from fl_lightning.testing import round_context
from fl_lightning.utils.rng import generator_for

D = 6


def ctx_for(round_idx, cohort, n=10, rounds=20, rate=0.2, params=None):
    params = torch.zeros(D) if params is None else params
    return round_context(params, cohort, num_clients=n, round_idx=round_idx, total_rounds=rounds,
                         sample_rate=rate)  # fmt: skip


def play_round(s, round_idx, cohort, n=10, rounds=20, rate=0.2):
    """One round as FederatedModule runs it, with fixed deltas instead of local training:
    (ctx, aggregate, the strategy's metrics of the round)."""
    ctx, _ = plan_round(s, ctx_for(round_idx, cohort, n, rounds, rate))
    ups = [
        s.process_update(
            ClientUpdate(c, torch.ones(D) * 0.1, 50 + c, 0.0, base_round=round_idx),
            ctx,
            generator=generator_for(0, round_idx, c),
        )
        for c in ctx.cohort
    ]
    agg, metrics = s.aggregate(ups, ctx, generator=generator_for(0, round_idx))
    return ctx, agg, metrics | s.after_round(ctx, agg)


def calibrate(s, *, rounds: int, rate: float, population: int, num_clients: int = 0) -> None:
    """The server's set-up with no privacy target: E = ``rounds``, fixed cohorts of ``rate``
    of ``population`` (N = ``num_clients``, default ``population``); client c holds 50 + c
    examples, as ``play_round``'s updates say."""
    sampling = CohortSampling("fixed", rate, population)
    n = num_clients or population
    spec = FederationSpec(
        num_clients=n,
        num_parameters=D,
        rounds=rounds,
        privacy=PrivacyTarget(sampling=sampling),
        client_sizes=tuple(50 + c for c in range(n)),
    )
    s.setup_federation(spec)


def test_published_schedule_rises_and_cooling_falls():
    E, a = 20, 0.1
    pub = [schedule_factor("published", t, E, a) for t in range(1, E + 1)]
    cool = [schedule_factor("cooling", t, E, a) for t in range(1, E + 1)]
    assert all(x < y for x, y in zip(pub, pub[1:])) and pub[-1] == pytest.approx(2.0)
    assert pub[0] == pytest.approx(1 + math.exp(-1.9))
    assert all(x > y for x, y in zip(cool, cool[1:])) and cool[0] == pytest.approx(2.0)


@pytest.mark.parametrize("schedule", ["published", "cooling", "even"])
def test_rescaled_schedule_spends_the_total_budget_in_expectation(schedule):
    s = ADPFL(epsilon=5.0, schedule=schedule, rescale=True, accuracy_drop=None)
    calibrate(s, rounds=30, rate=0.2, population=100)
    assert 0.2 * sum(s.budget.round_epsilon(r) for r in range(30)) == pytest.approx(5.0)


def test_unscaled_base_is_the_even_budget_of_eq_10():
    s = EvenBudget(epsilon=10.0, mechanism="gaussian")
    calibrate(s, rounds=20, rate=10 / 50, population=100)
    assert s.uploads.schedule.even_epsilon() == pytest.approx(50 * 10.0 / (10 * 20))


def test_accuracy_drop_keeps_the_previous_epsilon():
    s = ADPFL(epsilon=100.0, schedule="published", accuracy_drop=0.05)
    calibrate(s, rounds=20, rate=0.2, population=100)
    accs = iter([0.50, 0.60, 0.40, 0.41])
    s.budget.accuracy_fn = lambda cid: next(accs)
    eps = [s.uploads.upload_budget(0, ctx_for(r, [0])) for r in range(4)]
    sched = [s.budget.round_epsilon(r) for r in range(4)]
    assert eps[0] == sched[0] and eps[1] == sched[1]  # accuracy rose: follow the schedule
    assert eps[2] == eps[1]  # fell by 0.2 > λ: keep the previous ε
    assert eps[3] == sched[3]  # rose again
    assert s.budget.frozen_total == 1


def test_weights_follow_eq_8():
    s = ADPFL(epsilon=10.0, staleness_alpha=0.5, accuracy_drop=None)
    calibrate(s, rounds=20, rate=0.2, population=4)
    s.staleness = {0: 1.0, 1: 0.5, 2: 0.25, 3: 1.0}
    eps, sizes = [0.5, 1.0, 2.0], [100, 300, 50]
    deltas = [torch.randn(D, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    arrivals = [
        Arrival(
            ClientUpdate(i, deltas[i].clone(), sizes[i], 0.0, extras={"epsilon": eps[i]}), 0, 0.1, 0
        )
        for i in range(3)
    ]
    ctx = ctx_for(3, [0, 1, 2], n=4)
    out, metrics = s.aggregate_arrivals(arrivals, ctx, generator=generator_for(0))
    raw = [eps[i] * [1.0, 0.5, 0.25][i] * sizes[i] for i in range(3)]
    assert metrics["weight_max"] == pytest.approx(max(raw) / sum(raw))
    expected = sum(w / sum(raw) * d for w, d in zip(raw, deltas))
    assert torch.allclose(out, expected, atol=1e-6)
    # λ: participants reset to 1, client 3 (absent) decays by α_s.
    assert [s.lam(c) for c in range(4)] == [1.0, 1.0, 1.0, 0.5]


def test_staleness_resets_on_participation_and_decays_otherwise():
    s = ADPFL(epsilon=10.0, staleness_alpha=0.3, accuracy_drop=None)
    pattern = [{0, 1}, {1}, set(), {0}, {2}]
    expected = {0: 1.0, 1: 1.0, 2: 1.0}
    for part in pattern:
        s.update_staleness(part, 3)
        for c in expected:
            expected[c] = 1.0 if c in part else expected[c] * 0.3
            assert s.lam(c) == pytest.approx(expected[c])
    assert s.lam(1) == pytest.approx(0.3**3)  # rounds since its last participation


def test_budget_exhausted_clients_leave_and_are_logged():
    s = ADPFL(
        epsilon=3.0,
        base_epsilon=1.0,
        schedule="even",
        accuracy_drop=None,
        mechanism="laplace",
        refill=False,
    )
    calibrate(s, rounds=20, rate=0.2, population=10)
    for r in range(5):
        ctx, _, metrics = play_round(s, r, [0, 1])
        assert ctx.cohort == ([0, 1] if r < 3 else [])
    assert s.uploads.exited == {0, 1}
    assert metrics["clients_exited"] == 2.0
    assert s.uploads.ledger.paper_spent(0) == pytest.approx(3.0)


def test_a_straggler_arrives_with_decayed_lambda():
    s = ADPFL(
        epsilon=100.0,
        schedule="even",
        accuracy_drop=None,
        staleness_alpha=0.5,
        delay_kind="constant",
        delay_mean=0.5,
        straggler_fraction=0.5,
        straggler_slowdown=5.0,
        receive_window=1.0,
        refill=False,
    )
    calibrate(s, rounds=20, rate=0.2, population=10)
    slow = next(c for c in range(10) if s.delay.is_straggler(0, c))
    play_round(s, 0, [slow])
    play_round(s, 1, [])
    assert s.lam(slow) == pytest.approx(0.25)  # not aggregated in rounds 0 and 1
    _, _, metrics = play_round(s, 2, [])
    assert metrics["async/staleness_max"] == 2.0 and s.lam(slow) == 1.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=st.sampled_from(["published", "cooling", "even"]),
    rescale=st.booleans(),
    total=st.floats(0.5, 20.0),
    base=st.one_of(st.none(), st.floats(0.05, 8.0)),
    threshold=st.one_of(st.none(), st.floats(0.0, 0.3)),
    mechanism=st.sampled_from(["gaussian", "laplace"]),
    rounds=st.integers(2, 8),
    data=st.data(),
)
def test_no_client_ever_exceeds_its_total_budget(
    schedule, rescale, total, base, threshold, mechanism, rounds, data
):
    n = 6
    s = ADPFL(
        epsilon=total,
        schedule=schedule,
        rescale=rescale,
        base_epsilon=base,
        accuracy_drop=threshold,
        mechanism=mechanism,
        delay_kind="exponential",
        delay_mean=0.7,
        receive_window=1.0,
        aggregation_window=0.3,
    )
    s.uploads.rounds, s.uploads.rate = rounds, 0.5
    if (
        min(s.uploads.upload.charged_epsilon(epsilon=e) for e in s.uploads.planned_budgets())
        > total
    ):
        # refused (before training) exactly when no round's upload is affordable
        with pytest.raises(ValueError, match="model.clients_per_round"):
            calibrate(s, rounds=rounds, rate=0.5, population=100, num_clients=n)
        return
    calibrate(s, rounds=rounds, rate=0.5, population=100, num_clients=n)
    accs = data.draw(st.lists(st.floats(0, 1), min_size=rounds * n, max_size=rounds * n))
    it = iter(accs)
    s.budget.accuracy_fn = lambda cid: next(it)
    for r in range(rounds):
        cohort = data.draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True))
        play_round(s, r, sorted(cohort), n=n, rounds=rounds, rate=0.5)
        for c in range(n):
            assert s.uploads.ledger.basic(c)[0] <= total * (1 + 1e-9)
            assert s.uploads.ledger.paper_spent(c) <= total * (1 + 1e-9)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"schedule": "warm"}, "schedule"),
        ({"staleness_alpha": 0.0}, "staleness_alpha"),
        ({"accuracy_drop": -1.0}, "accuracy_drop"),
        ({"mechanism": "gaussian", "epsilon": None}, "epsilon"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"aggregation": "mean"}, "aggregation"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    base = {"epsilon": 1.0}
    base.update(kwargs)
    with pytest.raises(ValueError, match=field):
        ADPFL(**base)


def test_baseline_switch_is_the_even_budget_strategy():
    s = ADPFL(epsilon=5.0, baseline=True, schedule="published", rescale=True)
    assert (s.budget.schedule, s.aggregation, s.budget.accuracy_drop, s.budget.rescale) == (
        "even",
        "num_examples",
        None,
        "expected",
    )
    calibrate(s, rounds=30, rate=0.2, population=100)
    # the even schedule normalised to the expected spend is Eq. 10 exactly
    assert (
        s.budget.round_epsilon(7)
        == pytest.approx(s.budget.even_epsilon())
        == pytest.approx(5.0 / 6)
    )


@pytest.mark.parametrize("schedule", ["published", "cooling", "even"])
def test_rounds_normalisation_spends_eps_over_the_rounds_and_no_client_exits(schedule):
    """rescale: rounds (Alg. 1 lines 2 and 8: eps_acc adds eps_t in every round t <= E): the
    schedule sums to eps over the E rounds, so a client drawn in every round spends exactly eps
    and trains to the end."""
    E, n = 12, 4
    s = ADPFL(
        epsilon=3.0, schedule=schedule, rescale="rounds", accuracy_drop=None, mechanism="laplace"
    )
    calibrate(s, rounds=E, rate=0.25, population=n)
    assert sum(s.uploads.planned_budgets()) == pytest.approx(3.0)
    for r in range(E):
        ctx, _, metrics = play_round(s, r, list(range(n)), n=n, rounds=E, rate=1.0)
        assert ctx.cohort == list(range(n))  # every client still eligible, also in round E
    assert not s.uploads.exited and metrics["clients_exited"] == 0.0
    for c in range(n):
        assert s.uploads.ledger.paper_spent(c) == pytest.approx(3.0)


def test_unnormalised_published_schedule_exits_clients_before_the_end():
    """The reviewer's finding: Eq. 6 on Eq. 10's base spends up to twice a client's share."""
    E, n = 20, 10
    s = ADPFL(epsilon=5.0, schedule="published", rescale=False, accuracy_drop=None)
    calibrate(s, rounds=E, rate=0.5, population=n)
    sizes = [
        len(play_round(s, r, list(range(n)), n=n, rounds=E, rate=0.5)[0].cohort) for r in range(E)
    ]
    assert sizes[0] == n and sizes[-1] == 0 and s.uploads.exited == set(range(n))


@pytest.mark.parametrize("cls", [ADPFL, EvenBudget])
def test_cohort_too_small_for_the_even_budget_is_refused_before_training(cls):
    """n·E < N: each client expects fewer than one upload, so N·eps/(n·E) > eps: no client could
    ever upload (Alg. 1 line 2); refused with the field to change, not run to 'no release'."""
    kwargs = {"accuracy_drop": None} if cls is ADPFL else {}
    s = cls(epsilon=1.0, mechanism="gaussian", **kwargs)
    with pytest.raises(
        ValueError,
        match=r"^model\.clients_per_round: .*n·E/N = 0\.8 expected.*exceeds the total ε = 1,",
    ):
        calibrate(s, rounds=20, rate=2 / 50, population=50)
    ok = cls(epsilon=1.0, mechanism="laplace", **kwargs)
    # n·E = 2N: uploads at eps/2 (up to eps with Eq. 6's factor), allowed
    calibrate(ok, rounds=50, rate=2 / 50, population=50)
    too_big = EvenBudget(epsilon=1.0, upload_epsilon=2.0, mechanism="laplace")
    with pytest.raises(ValueError, match="^strategy.upload_epsilon: "):
        calibrate(too_big, rounds=25, rate=0.5, population=50)


def test_record_sensitivity_scales_the_noise_and_claims_no_guarantee(monkeypatch):
    """sensitivity: record adds noise at Δ = 2C/|D_i| and reports the sound client-level ε of
    that noise instead of a guarantee."""
    import fl_lightning.privacy.mechanisms.upload as upload  # the ledger's uploads draw there

    scales: list[float] = []
    real = upload.add_laplace

    def spy(x, *, scale, generator):
        scales.append(scale)
        return real(x, scale=scale, generator=generator)

    monkeypatch.setattr(upload, "add_laplace", spy)
    kw = dict(epsilon=4.0, mechanism="laplace", clip_norm=1.0, accuracy_drop=None, rescale="rounds")
    rec, cli = ADPFL(sensitivity="record", **kw), ADPFL(**kw)
    for s in (rec, cli):
        calibrate(s, rounds=4, rate=0.5, population=4)
    _, agg_r, metrics_r = play_round(rec, 0, [0], n=4, rounds=4, rate=0.5)
    _, agg_c, metrics_c = play_round(cli, 0, [0], n=4, rounds=4, rate=0.5)
    # Laplace scale 50 = |D_0| times smaller (the grid-snapped sampler draws on a grid of its
    # scale, so the noise is no longer the same draws scaled: the scale itself is checked)
    assert len(scales) == 2 and scales[1] == pytest.approx(50 * scales[0])
    assert (agg_r - 0.1).abs().max() < (agg_c - 0.1).abs().max()
    ctx = ctx_for(0, [0], n=4, rounds=4, rate=0.5)
    assert rec.round_privacy(ctx).no_guarantee and not cli.round_privacy(ctx).no_guarantee
    eps_t = rec.budget.round_epsilon(0)
    assert metrics_r["epsilon_sound"] == pytest.approx(50 * eps_t)  # Laplace: 2C/b
    assert "epsilon_sound" not in metrics_c


def test_checkpoint_round_trip_and_the_layout_before_local_dp_was_a_component():
    """A checkpoint resumes the budget, the exits, the accuracy callback's memory and λ; one
    written before the uploads became a component (their keys flat beside the strategy's)
    loads to the same state."""

    def played():
        s = ADPFL(epsilon=3.0, base_epsilon=1.0, mechanism="laplace", refill=False)
        calibrate(s, rounds=20, rate=0.2, population=10)
        accs = iter([0.9, 0.5, 0.9, 0.9] * 5)
        s.budget.accuracy_fn = lambda cid: next(accs)
        for r in range(4):
            play_round(s, r, [0, 1])
        return s

    s = played()
    state = s.state_dict()
    assert s.uploads.exited and s.budget.frozen_total and s.budget.prev_epsilon
    uploads = dict(state["local_dp"])
    flat = {k: v for k, v in state.items() if k != "local_dp"} | uploads | uploads["schedule"]
    del flat["schedule"]
    for layout in (state, flat):
        fresh = ADPFL(epsilon=3.0, base_epsilon=1.0, mechanism="laplace", refill=False)
        fresh.load_state_dict(layout)
        assert fresh.state_dict() == state
