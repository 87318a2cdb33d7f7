"""The mechanism interface: a randomised map on a flat tensor."""

from __future__ import annotations

import abc

import torch


class Mechanism(abc.ABC):
    """A randomised map on a flat float32 tensor.

    Subclasses implement :meth:`privatize` (vectorised, all randomness from ``generator``); the
    event of a release comes from the mechanism's placement (``GaussianMechanism.cohort_event``,
    ``LocalMechanism.local_release``).
    """

    @abc.abstractmethod
    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """Returns a privatised copy of ``x`` (never modifies ``x``)."""
