"""ADP-FL (Wu, Xia, Huang, Yu, Zhang, Li 2025, "An Asynchronous Federated Learning Aggregation
Method Based on Adaptive Differential Privacy", preprints.org 202506.2188).

* Per-client per-upload budget ε_i^t from a schedule (Sec. 4.1, Eq. 6; decisions D1, D8):
  ``published`` ε_base·(1 + e^{−α(E−t)}) (rising, the literal Eq. 6), ``cooling``
  ε_base·(1 + e^{−α(t−1)}) (falling, what the prose describes) or ``even`` (ε_base), with
  t = 1..E the round, α = 0.1, ε_base = N·ε/(n·E) (the baseline's Eq. 10) unless given.
  The paper never fixes the base ε_i of Eq. 6 (D1) nor enforces its claim that "the overall
  privacy budget remains unchanged"; ``rescale`` picks the normalisation:

  - ``false`` (``none``): ε_base as above. The schedule's factor lies in [1, 2], so a client
    spends up to twice its share and leaves the federation early (Alg. 1 line 2): with the
    rising Eq. 6, E = 20 and n/N = 0.2 every client is gone by about round 15.
  - ``true`` / ``expected``: ε^t = ε·f(t) / ((n/N)·Σ_{s=1..E} f(s)), the expected spend over the
    client's n·E/N expected uploads equals ε (the even split of Eq. 10 when f ≡ 1). Clients
    that happen to be drawn more often than expected still exit near the end.
  - ``rounds``: ε^t = ε·f(t) / Σ_{s=1..E} f(s). This is Alg. 1 read literally: its loop runs
    over the rounds t ≤ E and adds ε_t to ε_acc in every round (line 8), so Σ_{t=1..E} ε_t = ε
    is the total; a client that uploads in a subset of the rounds spends at most ε and no
    client ever exits: every client trains to the end of the run. With ``schedule: even`` this
    is the even budget ε/E per upload.
* Accuracy-drop callback (Alg. 1 lines 3–6, D7): before training, the client evaluates the
  received global model on a fixed seeded subset of its own data; if the accuracy fell by more
  than λ (``accuracy_drop``) since its previous upload, it keeps its previous ε.
* Strict budget (Alg. 1 line 2, D9): a client uploads only while ε_acc + ε_t ≤ ε, else it
  leaves the federation (``strategy/clients_exited``).
* Mechanism on the clipped delta: Gaussian σ = √(2 ln(1.25/δ))·Δ/ε_t, δ = 1e-5 (Thm. 1), or
  Laplace Δ/ε_t (Def. 6); Δ = 2C (see ``fl_lightning.privacy.mechanisms.local_budget``).
* Aggregation (Eq. 8/9, D11, D12): weights p_i ∝ ε_i^t·λ_i·|D_i| over the updates arriving this
  round, server step W ← W − η·Σ p_i ĝ_i with ĝ_i = −(noised delta) (``model.server_lr`` = η).
* Staleness (Alg. 2 step 6, D13): λ_i = 1 initially, reset to 1 when i's update is aggregated,
  multiplied by α_s (``staleness_alpha``) after every round it is not; equivalently
  λ_i = α_s^(rounds since last participation) (Eq. 7 up to a factor that normalisation cancels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from fl_lightning.records import RoundContext
from fl_lightning.strategies.async_local_dp import AsyncLocalDP
from fl_lightning.strategies.asynchronous.buffer import Arrival
from fl_lightning.strategies.base import Metrics
from fl_lightning.strategies.budgeted_uploads import BudgetedUploads, BudgetSchedule
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.utils.rng import generator_for

Schedule = Literal["published", "cooling", "even"]
Rescale = Literal["none", "expected", "rounds"]


def schedule_factor(schedule: Schedule, t: int, total_rounds: int, alpha: float) -> float:
    """ε_i^t / ε_base at round t ∈ 1..E.

    ``published``: Eq. 6 as printed, ε_i^t = ε_i·e^{−α(E−t)} + ε_i, a factor rising from
    1 + e^{−α(E−1)} to 2 (the budget grows, the noise falls, as training goes on).
    ``cooling``: the decreasing reading that Sec. 4.1's prose ("our overall method gradually
    reduces the privacy budget ε_i^t as training progresses", Newton's cooling law) and Alg. 1's
    freeze-on-accuracy-drop assume, ε_i·e^{−α(t−1)} + ε_i, falling from 2 towards 1.
    ``even``: 1 (the baseline, Eq. 10)."""
    if schedule == "published":
        return 1.0 + math.exp(-alpha * (total_rounds - t))
    if schedule == "cooling":
        return 1.0 + math.exp(-alpha * (t - 1))
    return 1.0


class AdaptiveBudget(BudgetSchedule):
    """ADP-FL's per-upload budget: the Eq. 6 schedule with its normalisation and the
    accuracy-drop callback (Alg. 1 lines 3–6). Arguments as :class:`ADPFL`'s."""

    def __init__(
        self,
        *,
        schedule: Schedule = "published",
        rescale: Rescale = "none",
        base_epsilon: float | None = None,
        cooling_alpha: float = 0.1,
        accuracy_drop: float | None = 0.05,
        accuracy_examples: int = 256,
    ) -> None:
        if rescale not in ("none", "expected", "rounds"):
            raise ValueError(
                f"strategy.rescale: expected false, true, none, expected or rounds, got {rescale!r}"
            )
        if schedule not in ("published", "cooling", "even"):
            raise ValueError(
                f"strategy.schedule: expected published, cooling or even, got {schedule!r}"
            )
        if base_epsilon is not None and base_epsilon <= 0:
            raise ValueError(f"strategy.base_epsilon: must be > 0, got {base_epsilon}")
        if cooling_alpha < 0:
            raise ValueError(f"strategy.cooling_alpha: must be >= 0, got {cooling_alpha}")
        if accuracy_drop is not None and accuracy_drop < 0:
            raise ValueError(f"strategy.accuracy_drop: must be >= 0, got {accuracy_drop}")
        if accuracy_examples < 1:
            raise ValueError(f"strategy.accuracy_examples: must be >= 1, got {accuracy_examples}")
        self.schedule = schedule
        self.rescale: Rescale = rescale
        self.base_epsilon = base_epsilon
        self.cooling_alpha = cooling_alpha
        self.accuracy_drop = accuracy_drop
        self.accuracy_examples = accuracy_examples
        self.prev_accuracy: dict[int, float] = {}
        self.prev_epsilon: dict[int, float] = {}
        self.frozen_total = 0
        self.accuracy_fn: Callable[[int], float] | None = None
        self._acc_now: dict[int, float] = {}

    def attach(self, uploads: BudgetedUploads) -> None:
        super().attach(uploads)
        if self.rescale != "none" and uploads.epsilon is None:
            raise ValueError("strategy.rescale: needs the total budget strategy.epsilon")

    # -- set-up: the accuracy callback evaluates the global model on the client's data ---------
    def setup(self, spec: FederationSpec) -> None:
        if self.accuracy_drop is None:
            return
        net, client_data, seed = spec.global_model, spec.client_data, spec.seed
        if net is None or client_data is None:
            return  # callback off (a spec without a model: a unit test of the schedule)

        @torch.no_grad()
        def accuracy(client_id: int) -> float:
            x, y = client_data(client_id)
            g = generator_for(seed, client_id, "adp_fl_val")
            idx = torch.randperm(len(y), generator=g, device=g.device)[: self.accuracy_examples].to(
                y.device
            )
            was_training = net.training
            net.eval()
            pred = net(x[idx]).argmax(dim=1)
            net.train(was_training)
            return float((pred == y[idx]).float().mean())

        self.accuracy_fn = accuracy

    # -- the budget schedule -----------------------------------------------------------------
    def base(self) -> float:
        return self.base_epsilon if self.base_epsilon is not None else self.even_epsilon()

    def round_epsilon(self, round_idx: int) -> float:
        """ε^t of the schedule for 0-based ``round_idx`` (t = round_idx + 1)."""
        u = self._uploads
        E = u.rounds
        factor = schedule_factor(self.schedule, round_idx + 1, E, self.cooling_alpha)
        if self.rescale != "none":
            assert u.epsilon is not None
            total = sum(
                schedule_factor(self.schedule, t, E, self.cooling_alpha) for t in range(1, E + 1)
            )
            share = u.rate if self.rescale == "expected" else 1.0
            return u.epsilon * factor / (share * total)
        return self.base() * factor

    def client_epsilon(self, client_id: int, ctx: RoundContext) -> float:
        eps = self.round_epsilon(ctx.round_idx)
        if self.accuracy_drop is not None and self.accuracy_fn is not None:
            acc = self.accuracy_fn(client_id)
            self.observe_accuracy(client_id, acc)
        return self.apply_accuracy_callback(client_id, eps)

    def observe_accuracy(self, client_id: int, accuracy: float) -> None:
        """Records the client's current accuracy (Acc_t); the previous one becomes Acc_{t−1}."""
        self._acc_now[client_id] = accuracy

    def apply_accuracy_callback(self, client_id: int, eps: float) -> float:
        """Alg. 1 lines 3–6: keep the previous ε if the accuracy fell by more than λ."""
        now = self._acc_now.pop(client_id, None)
        prev = self.prev_accuracy.get(client_id)
        if (
            self.accuracy_drop is not None
            and now is not None
            and prev is not None
            and client_id in self.prev_epsilon
            and now - prev < -self.accuracy_drop
        ):
            eps = self.prev_epsilon[client_id]
            self.frozen_total += 1
        if now is not None:
            self.prev_accuracy[client_id] = now
        self.prev_epsilon[client_id] = eps
        return eps

    def state_dict(self) -> dict[str, Any]:
        return {
            "prev_accuracy": dict(self.prev_accuracy),
            "prev_epsilon": dict(self.prev_epsilon),
            "frozen_total": self.frozen_total,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.prev_accuracy = {int(c): float(v) for c, v in state_dict["prev_accuracy"].items()}
        self.prev_epsilon = {int(c): float(v) for c, v in state_dict["prev_epsilon"].items()}
        self.frozen_total = int(state_dict["frozen_total"])


class ADPFL(AsyncLocalDP):
    """ADP-FL: adaptive per-upload budget, ε·λ·|D|-weighted semi-asynchronous aggregation.

    The budget (schedule, normalisation, accuracy callback) is an :class:`AdaptiveBudget` on
    the uploads (``self.budget``); this class adds Eq. 8's weights and the staleness λ_i.

    Args:
        schedule: ``published`` (Eq. 6, rising), ``cooling`` (falling) or ``even``.
        rescale: the schedule's normalisation (module docstring): ``false``/``none`` (base
            N·ε/(n·E)), ``true``/``expected`` (expected spend = ε) or ``rounds`` (Σ over the E
            rounds = ε, Alg. 1; no client ever exits).
        base_epsilon: ε_base; ``None``: N·ε/(n·E).
        cooling_alpha: α of Eq. 6 (0.1 in the paper).
        accuracy_drop: λ threshold of the accuracy-drop callback; ``None`` disables it.
        accuracy_examples: how many of the client's examples the callback evaluates on.
        staleness_alpha: α_s ∈ (0, 1], the staleness decay base.
        aggregation: ``eq8`` (ε·λ·|D| weights) or ``num_examples`` (FedAvg weights).
        baseline: run the paper's even-budget baseline instead (schedule ``even``, FedAvg
            weights, no accuracy callback: the same as ``EvenBudget``), one switch for sweeps;
            ``rescale: rounds`` then gives the even budget ε/E of the same horizon.
        **kwargs: :class:`~fl_lightning.strategies.async_local_dp.AsyncLocalDP` arguments
            (``epsilon``, ``mechanism``, ``clip_norm``, ``delta``, the clock, the delays).
    """

    def __init__(
        self,
        *,
        schedule: Schedule = "published",
        rescale: bool | Rescale = False,
        base_epsilon: float | None = None,
        cooling_alpha: float = 0.1,
        accuracy_drop: float | None = 0.05,
        accuracy_examples: int = 256,
        staleness_alpha: float = 0.5,
        aggregation: Literal["eq8", "num_examples"] = "eq8",
        baseline: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("mechanism", "gaussian")
        if baseline:
            schedule, aggregation, accuracy_drop = "even", "num_examples", None
        if rescale is True:
            rescale = "expected"
        elif rescale is False:
            rescale = "none"
        if not 0.0 < staleness_alpha <= 1.0:
            raise ValueError(f"strategy.staleness_alpha: must be in (0, 1], got {staleness_alpha}")
        if aggregation not in ("eq8", "num_examples"):
            raise ValueError(
                f"strategy.aggregation: expected eq8 or num_examples, got {aggregation!r}"
            )
        budget = AdaptiveBudget(
            schedule=schedule,
            rescale=rescale,
            base_epsilon=base_epsilon,
            cooling_alpha=cooling_alpha,
            accuracy_drop=accuracy_drop,
            accuracy_examples=accuracy_examples,
        )
        super().__init__(budget=budget, **kwargs)
        self.staleness_alpha = staleness_alpha
        self.aggregation = aggregation
        self.staleness: dict[int, float] = {}

    @property
    def budget(self) -> AdaptiveBudget:
        """The uploads' schedule: ADP-FL's Eq. 6 budget and accuracy callback."""
        schedule = self.uploads.schedule
        assert isinstance(schedule, AdaptiveBudget)
        return schedule

    # -- Eq. 8 aggregation and the staleness coefficient ------------------------------------
    def lam(self, client_id: int) -> float:
        return self.staleness.get(client_id, 1.0)

    def arrival_weight(self, arrival: Arrival) -> float:
        u = arrival.update
        if self.aggregation == "num_examples":
            return float(u.num_examples)
        return float(u.extras.get("epsilon", 1.0)) * self.lam(u.client_id) * u.num_examples

    def aggregate_arrivals(
        self, arrivals: Sequence[Arrival], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        weights = [self.arrival_weight(a) for a in arrivals]
        total = sum(weights)
        out = torch.zeros_like(ctx.global_params)
        if arrivals and total > 0:
            for a, w in zip(arrivals, weights):
                out.add_(a.update.delta, alpha=w / total)
            self.model_version += 1
        self.update_staleness({a.update.client_id for a in arrivals}, ctx.num_clients)
        metrics = {"frozen_total": float(self.budget.frozen_total)}
        if weights and total > 0:
            metrics["weight_max"] = max(weights) / total
        return out, metrics

    def update_staleness(self, participants: set[int], num_clients: int) -> None:
        """Alg. 2 step 6: λ ← 1 for participants, λ ← α_s·λ for every other client."""
        for c in range(num_clients):
            self.staleness[c] = 1.0 if c in participants else self.lam(c) * self.staleness_alpha

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"staleness": dict(self.staleness)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.staleness = {int(c): float(v) for c, v in state_dict["staleness"].items()}


__all__ = ["ADPFL", "AdaptiveBudget", "Rescale", "schedule_factor"]
