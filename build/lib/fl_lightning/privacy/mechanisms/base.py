"""The mechanism interface and the null mechanism."""

from __future__ import annotations

import abc
from dataclasses import dataclass

import dp_accounting
import torch


@dataclass(frozen=True)
class PrivacyGuarantee:
    """What one application of a mechanism guarantees, in words and numbers.

    Attributes:
        epsilon: pure or approximate ε of one application; ``None`` when there is no guarantee.
        delta: δ of one application (0 for pure ε-DP).
        unit: what neighbouring inputs differ in: ``"coordinate"``, ``"update"``, ``"record"``.
        note: a plain-language statement, logged as ``privacy/guarantee``.
    """

    epsilon: float | None
    delta: float = 0.0
    unit: str = "update"
    note: str = ""


class Mechanism(abc.ABC):
    """A randomised map on a flat float32 tensor.

    Subclasses implement :meth:`privatize` (vectorised, all randomness from ``generator``) and
    describe themselves to the accountant through :meth:`dp_event` (a ``dp_accounting`` DpEvent
    for one application) and :meth:`guarantee`.
    """

    @abc.abstractmethod
    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """Returns a privatised copy of ``x`` (never modifies ``x``)."""

    def dp_event(self) -> dp_accounting.DpEvent:
        """The DpEvent of one application, for composition by an accountant."""
        return dp_accounting.NonPrivateDpEvent()

    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(epsilon=None, note="no privacy")

    @property
    def is_private(self) -> bool:
        return not isinstance(self.dp_event(), dp_accounting.NonPrivateDpEvent)


class NoPrivacy(Mechanism):
    """The null mechanism: returns its input. Lets private and non-private runs share code."""

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return x

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.NonPrivateDpEvent()
