"""DP-SCAFFOLD control variates, option II (Karimireddy et al. 2020, Alg. 1), on a quadratic."""

from __future__ import annotations

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.dp_scaffold import DPScaffold
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.testing import round_context

# f_i(w) = ½ a_i ‖w − b_i‖²: different curvatures, so FedAvg with K > 1 local steps drifts to a
# biased fixed point, while SCAFFOLD reaches the global optimum Σ a_i b_i / Σ a_i.
A = [1.0, 10.0, 3.0]
B = [torch.tensor([0.0, 2.0]), torch.tensor([1.0, -1.0]), torch.tensor([-2.0, 0.5])]
LR, K = 0.05, 10


def _spec() -> FederationSpec:
    return FederationSpec(num_clients=3, num_parameters=2, local=LocalTrainingConfig(lr=LR))


def _ctx(x: torch.Tensor, round_idx: int, cohort: list[int]) -> RoundContext:
    return round_context(x.clone(), cohort, num_clients=len(A), round_idx=round_idx,
                         total_rounds=100, sample_rate=1.0,
                         expected_cohort_size=float(len(cohort)))  # fmt: skip


def _local(strategy, cid: int, ctx: RoundContext) -> ClientUpdate:
    """Mirrors LocalTrainer: gradient, strategy correction, SGD step."""
    plan = strategy.configure_client(cid, ctx)
    w = torch.nn.Parameter(plan.start_params.clone())
    for _ in range(K):
        w.grad = A[cid] * (w.detach() - B[cid])
        if plan.grad_hook is not None:
            plan.grad_hook([w])
        with torch.no_grad():
            w -= LR * w.grad
    delta = w.detach() - ctx.global_params
    return ClientUpdate(cid, delta, 100, 0.0, metrics={"local_steps": float(K)})


def _round(strategy, x: torch.Tensor, r: int, cohort: list[int]) -> torch.Tensor:
    ctx = _ctx(x, r, cohort)
    updates = [
        strategy.process_update(_local(strategy, c, ctx), ctx, generator=torch.Generator())
        for c in cohort
    ]
    agg, metrics = strategy.aggregate(updates, ctx, generator=torch.Generator())
    x = x + agg
    strategy.after_round(ctx, agg)
    return x


def test_control_variates_follow_option_ii() -> None:
    s = DPScaffold()
    s.setup_federation(_spec())
    x = torch.zeros(2)
    c = torch.zeros(2)
    c_i = {i: torch.zeros(2) for i in range(3)}
    for r, cohort in enumerate([[0, 1, 2], [0, 2], [1], [0, 1, 2]]):
        ctx = _ctx(x, r, cohort)
        ups = []
        for cid in cohort:
            u = _local(s, cid, ctx)
            # Independent option-II reference: y_i after K steps of y ← y − η(∇f_i(y) − c_i + c).
            y = x.clone()
            for _ in range(K):
                y = y - LR * (A[cid] * (y - B[cid]) - c_i[cid] + c)
            torch.testing.assert_close(u.delta, y - x)
            ups.append(s.process_update(u, ctx, generator=torch.Generator()))
            new = c_i[cid] - c + (x - y) / (K * LR)
            torch.testing.assert_close(ups[-1].extras["delta_control"], new - c_i[cid])
            torch.testing.assert_close(s.client_controls[cid], new)
        delta_c = [u.extras["delta_control"] for u in ups]
        agg, metrics = s.aggregate(ups, ctx, generator=torch.Generator())
        torch.testing.assert_close(agg, torch.stack([u.delta for u in ups]).mean(0))
        x = x + agg
        s.after_round(ctx, agg)
        for cid, u in zip(cohort, ups):
            c_i[cid] = c_i[cid] + u.extras["delta_control"]
        c = c + len(cohort) / len(A) * torch.stack(delta_c).mean(0)
        torch.testing.assert_close(s.control, c)
    # With c = 0 at the start, c stays the mean of the c_i over all N clients.
    torch.testing.assert_close(s.control, torch.stack(list(c_i.values())).mean(0))


def test_scaffold_removes_client_drift_fedavg_keeps_it() -> None:
    optimum = sum(a * b for a, b in zip(A, B)) / sum(A)
    s = DPScaffold()
    s.setup_federation(_spec())
    f = FedAvg(weighting="uniform")
    xs, xf = torch.zeros(2), torch.zeros(2)
    for r in range(300):
        xs = _round(s, xs, r, [0, 1, 2])
        xf = _round(f, xf, r, [0, 1, 2])
    assert torch.allclose(xs, optimum, atol=1e-4)
    assert (xf - optimum).norm() > 0.05


def test_control_variates_are_checkpointed() -> None:
    s = DPScaffold()
    s.setup_federation(_spec())
    x = _round(s, torch.zeros(2), 0, [0, 1])
    state = s.state_dict()
    t = DPScaffold()
    t.setup_federation(_spec())
    t.load_state_dict(state)
    torch.testing.assert_close(t.control, s.control)
    assert set(t.client_controls) == {0, 1}
    torch.testing.assert_close(_round(t, x, 1, [0, 1, 2]), _round(s, x, 1, [0, 1, 2]))
