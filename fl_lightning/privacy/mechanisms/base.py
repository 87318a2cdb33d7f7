"""The mechanism contract: constrain the input, add noise from the generator handed in, and
give the event of exactly that noise, in one call.

:meth:`Mechanism.release` is the one call a strategy (or a placement) makes on a tensor it
privatises. It

1. **constrains** the input in place to the sensitivity the event assumes
   (:meth:`Mechanism.constrain`: an L2 or L1 clip by ``privacy/mechanisms/clipping.py``; a no-op for
   a mechanism whose input range is fixed by its caller, such as the [−1, 1] local mechanisms),
2. **adds the noise** (:meth:`Mechanism.privatize`), every draw from the ``generator`` it is
   handed, and
3. **returns the event** of that noise beside the noisy tensor (:class:`Release`), built by the
   mechanism from its own parameters (:meth:`Mechanism.event`).

So a release cannot be written without its event: the noise is drawn only inside
``privacy/`` (``tests/test_privacy_contract.py`` fails on ``torch.randn``, ``LocalRelease(`` or
a ``dp_accounting`` event built in ``strategies/``, ``server/`` or ``client/``). This is the
shape of pfl's ``PrivacyMechanism`` (``constrain_sensitivity`` then ``add_noise``) with the
event handed back at the moment the noise is added, as Opacus's optimizer reports its step;
dp-accounting's ``DpEvent`` is the currency underneath (``privacy/accounting/events.py``).

A round's events are also needed *before* the round trains (the budget stop prices it): a
placement asks :meth:`Mechanism.event` for them, the same function ``release`` reports, so the
priced event and the released one cannot differ. Where the server calls a mechanism is the
placement's business (``strategies/placement.py``).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field

import torch

from fl_lightning.privacy.accounting.events import LocalRelease, SampledGaussian

PrivacyEvent = LocalRelease | SampledGaussian
"""What one release spends: a local (upload) release, or one unamplified Gaussian whose
sampling the placement adds (``GaussianMechanism.cohort_event``)."""


@dataclass(frozen=True)
class Release:
    """What one call of :meth:`Mechanism.release` produced.

    Attributes:
        value: the privatised tensor (for an in-place mechanism, the input tensor itself).
        event: the DP event of exactly this noise; ``None`` when the mechanism gives no formal
            guarantee (its ``no_guarantee`` says why).
        norm: the input's norm before :meth:`Mechanism.constrain` (NaN when it does not clip).
        observed: what the release observed (e.g. the share of coordinates it selected), for
            the caller's metrics.
    """

    value: torch.Tensor
    event: PrivacyEvent | None
    norm: float = math.nan
    observed: dict[str, float] = field(default_factory=dict)


class Mechanism(abc.ABC):
    """A randomised map on a flat float32 tensor, with its constraint and its event.

    Subclasses implement :meth:`privatize` (vectorised, all randomness from ``generator``) and,
    when they clip, :meth:`constrain`; :meth:`event` is the event of one release (a mechanism
    whose event depends on where it is placed, such as the Gaussian on a cohort's sum, gives the
    unamplified one and lets the placement add the sampling).
    """

    no_guarantee: str | None = None
    """Why a release of this mechanism has no formal guarantee (``event`` is then None)."""

    def constrain(self, x: torch.Tensor) -> float:
        """Bounds ``x`` in place to the sensitivity :meth:`event` assumes; returns its norm
        before (NaN: nothing to bound, the caller fixed the input's range)."""
        return math.nan

    @abc.abstractmethod
    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """The noise alone: a privatised copy of ``x`` (in-place mechanisms say so)."""

    def event(self, dimension: int) -> PrivacyEvent | None:
        """The event of one release of a ``dimension``-coordinate input (None: no guarantee,
        see :attr:`no_guarantee`)."""
        raise NotImplementedError(f"{type(self).__name__} does not report an event")

    def release(self, x: torch.Tensor, *, generator: torch.Generator) -> Release:
        """Constrain, add the noise, and give its event: the one call that privatises."""
        norm = self.constrain(x)
        value = self.privatize(x, generator=generator)
        return Release(value, self.event(x.numel()), norm)


__all__ = ["Mechanism", "PrivacyEvent", "Release"]
