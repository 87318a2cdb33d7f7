"""The planned horizon a run's accounting is bound to, and the refusal of a resume past it.

Some mechanisms price the run for the number of rounds planned when it started
(``trainer.max_steps``): DP-FTRL charges the whole run's matrix mechanism once, at round 0, with
the sensitivity Δ of k = ⌈T/b⌉ participations over T rounds (Choquette-Choo et al. 2023,
Thm. 2.1); a budget split over E rounds (ADP-FL's Eq. 6, the even split ε/(q·E) of Eq. 10)
and a σ calibrated so that T rounds spend ``privacy.target_epsilon`` are fixed for T. Resuming
such a run with a larger ``max_steps`` would release rounds its ε never priced (a 10-round
DP-FTRL run resumed to 40 rounds printed ε 2.56 where a fresh 40-round run prints 5.68).

Re-pricing is not sound in general: the released noise of rounds already run was drawn for the
old factorisation (the banded or tree noise B·z of T rounds is not the first rows of that of
T' > T rounds when the bands or the sensitivity change with T), and a budget already spent on an
old schedule cannot be re-split. So a bound run refuses the resume, with one line naming
``trainer.max_steps`` and the planned horizon, before anything is written
(``runs/preflight.py``) and again when the state is loaded (``PrivacyAccountant``); a resume
to the planned horizon or fewer rounds is allowed (what was charged covers it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PlannedHorizon:
    """The rounds a run's accounting was priced for, and why it depends on them.

    Attributes:
        rounds: the planned rounds (``trainer.max_steps`` when the run started).
        reason: what is bound to ``rounds`` (None: the accounting is per round, so the run
            may be extended freely).
    """

    rounds: int
    reason: str | None = None

    def state(self) -> list[Any]:
        return [self.rounds, self.reason]

    @classmethod
    def from_state(cls, state: Any) -> PlannedHorizon | None:
        if not isinstance(state, (list, tuple)) or len(state) != 2:
            return None
        return cls(int(state[0]), None if state[1] is None else str(state[1]))


def horizon_problem(saved: PlannedHorizon | None, max_steps: int, *, path: str) -> str | None:
    """One line refusing to resume ``path`` to ``max_steps`` rounds when the saved run's
    accounting is bound to fewer planned rounds; None when the resume is sound."""
    if saved is None or saved.reason is None or max_steps <= saved.rounds:
        return None
    return (
        f"trainer.max_steps: {path} was planned and accounted for {saved.rounds} rounds "
        f"({saved.reason}), so resuming it to {max_steps} rounds would release rounds its ε "
        f"never priced; resume with trainer.max_steps <= {saved.rounds}, or start a fresh run "
        f"of {max_steps} rounds"
    )


def checkpoint_horizon(ckpt: dict[str, Any]) -> PlannedHorizon | None:
    """The planned horizon an accountant's state in a Lightning checkpoint holds (None: none
    saved, e.g. a non-private run or a checkpoint from before horizons were saved)."""
    callbacks = ckpt.get("callbacks")
    if not isinstance(callbacks, dict):
        return None
    for state in callbacks.values():
        if isinstance(state, dict) and "horizon" in state:
            return PlannedHorizon.from_state(state["horizon"])
    return None


__all__ = ["PlannedHorizon", "checkpoint_horizon", "horizon_problem"]
