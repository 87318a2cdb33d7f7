"""AsyncStrategy: dispatch, buffering, staleness, versions (strategies/asynchronous/base.py)."""

import torch

from fl_lightning.records import ClientUpdate
from fl_lightning.server.round import plan_round
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.testing import round_context
from fl_lightning.utils.rng import generator_for

N, D = 8, 4


class Recording(AsyncStrategy):
    """Records what arrives each round (the default aggregation is the weighted mean)."""

    keeps_versions = True

    def __init__(self, **kw):
        super().__init__(**kw)
        self.log = {}

    def aggregate_arrivals(self, arrivals, ctx, *, generator):
        self.log[ctx.round_idx] = [
            (a.update.client_id, a.dispatch_round, a.staleness, a.update.base_round)
            for a in arrivals
        ]
        for a in arrivals:  # the version each update started from is still there
            assert torch.equal(self.base_params(a, ctx), self.params_at[a.dispatch_round])
        return super().aggregate_arrivals(arrivals, ctx, generator=generator)


def run_round(strategy, round_idx, params, cohort):
    sampled = round_context(params, cohort, num_clients=N, round_idx=round_idx, total_rounds=10)
    ctx, _ = plan_round(strategy, sampled)
    updates = []
    for cid in ctx.cohort:
        u = ClientUpdate(cid, torch.full((D,), float(cid + 1)), 10, 0.0, base_round=round_idx)
        updates.append(strategy.process_update(u, ctx, generator=generator_for(0, cid)))
    agg, metrics = strategy.aggregate(updates, ctx, generator=generator_for(0, round_idx))
    strategy.metrics = metrics | strategy.after_round(ctx, agg)  # the round's, for the asserts
    return ctx.cohort, agg


def slow_clients(strategy):
    return {c for c in range(N) if strategy.delay.is_straggler(0, c)}


def make(**kw):
    s = Recording(
        delay_kind="constant",
        delay_mean=0.5,
        straggler_fraction=0.5,
        straggler_slowdown=5.0,
        receive_window=1.0,
        aggregation_window=0.0,
        **kw,
    )
    s.setup_federation(FederationSpec(num_clients=N, num_parameters=D, seed=0))
    s.params_at = {}
    return s


def test_a_client_slower_than_the_window_lands_later_with_its_staleness():
    s = make(refill=False)
    slow = slow_clients(s)
    assert slow and len(slow) < N
    params = torch.zeros(D)
    dispatched = {}
    for r in range(4):
        s.params_at[r] = params.clone()
        cohort, agg = run_round(s, r, params, range(N))
        dispatched[r] = cohort
        params = params + agg
    # Round 0: every client is dispatched; fast ones (0.5 s) arrive in round 0, slow ones
    # (2.5 s) arrive at 2.5 → aggregated in round 2 with staleness 2 and base round 0.
    assert dispatched[0] == list(range(N))
    assert {c for c, *_ in s.log[0]} == set(range(N)) - slow
    late = [(c, d, st, b) for c, d, st, b in s.log[2] if d == 0]
    assert {c for c, *_ in late} == slow
    assert all(st == 2 and b == 0 for _, _, st, b in late)
    # Slow clients are busy in rounds 1 and 2 (arrival 2.5 > dispatch times 1, 2): not redispatched.
    assert not set(dispatched[1]) & slow and not set(dispatched[2]) & slow
    assert set(dispatched[3]) >= slow
    assert s.versions == {} or set(s.versions) <= {3}


def test_refill_keeps_the_cohort_size_from_idle_clients():
    s = make(refill=True)
    params = torch.zeros(D)
    s.params_at[0] = params
    run_round(s, 0, params, range(4))
    s.params_at[1] = params
    busy = {c for c in range(N) if s.is_busy(c, 1)}
    assert busy & set(range(4))
    cohort, _ = run_round(s, 1, params, range(4))
    assert len(cohort) == 4
    assert not busy & set(cohort)


def test_drop_late_discards_updates_that_miss_their_round():
    s = make(refill=False, drop_late=True)
    params = torch.zeros(D)
    for r in range(4):
        s.params_at[r] = params
        run_round(s, r, params, range(N))
    assert all(st == 0 for arrivals in s.log.values() for _, _, st, _ in arrivals)
    assert s.dropped_total == len(slow_clients(s)) * 2  # dispatched in rounds 0 and 3
    assert s.metrics["async/dropped"] == len(slow_clients(s))  # those dispatched in round 3


def test_state_dict_round_trip_keeps_the_buffer():
    s = make(refill=False)
    params = torch.zeros(D)
    s.params_at[0] = params
    run_round(s, 0, params, range(N))
    assert s.pending
    t = make(refill=False)
    t.load_state_dict(s.state_dict())
    assert t.pending.keys() == s.pending.keys()
    assert t.busy_until == s.busy_until
    a, b = s.pending[2][0], t.pending[2][0]
    assert torch.equal(a.update.delta, b.update.delta) and a.dispatch_round == b.dispatch_round
