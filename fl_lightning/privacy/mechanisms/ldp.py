"""Local-DP mechanisms on model weights (paper 003, SPM-FL; Chen & Zheng, Electronics 2024).

A :class:`LocalMechanism` perturbs every coordinate of a flat tensor independently with the same
ε; it knows its closed-form per-coordinate ``mean(w)`` and ``variance(w)`` (used by the tests and
by Figure 2), its ``support(w)``, and whether its input must lie in [−1, 1] (``unit_input``; the
strategy maps each layer into that range first, see ``ranges.py``).

Privacy statement (all mechanisms here): the ε is **per coordinate and per report**. A report of
d coordinates is d·ε-LDP by basic composition, and T reports of a client are T·d·ε. The sign
mechanisms (SPM, the PNPM reconstruction) randomise only the sign: ``randomises_magnitude`` is
False and the guarantee says so.

This module also adapts the engine's Laplace and Gaussian mechanisms to [−1, 1] inputs
(L1 / L2 sensitivity 2 per coordinate) and builds any mechanism by name.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

import torch

from fl_lightning.privacy.accounting.events import LocalRelease
from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism, analytic_gaussian_sigma
from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism


def check_epsilon(epsilon: float) -> float:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"strategy.epsilon: must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


class LocalMechanism(Mechanism, abc.ABC):
    """A per-coordinate ε-LDP mechanism with closed-form moments.

    Attributes:
        name: registry name (``spm``, ``pm``, ...).
        unit_input: True when inputs must lie in [−1, 1].
        randomises_magnitude: False when only the sign is random (SPM, PNPM).
    """

    name: ClassVar[str] = ""
    unit_input: ClassVar[bool] = True
    randomises_magnitude: ClassVar[bool] = True

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = check_epsilon(epsilon)

    @abc.abstractmethod
    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        """E[M(w)], closed form."""

    @abc.abstractmethod
    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        """Var[M(w)], closed form."""

    @abc.abstractmethod
    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        """Elementwise (low, high) bounds of M(w)."""

    @property
    def delta(self) -> float:
        return 0.0

    def local_release(self, coordinates: int) -> LocalRelease:
        """The accounting record of one upload of ``coordinates`` coordinates, each privatised
        independently at this ε: ε-LDP per coordinate, composed per client by the accountant."""
        return LocalRelease(self.epsilon, self.delta, "coordinate", int(coordinates))

    def event(self, dimension: int) -> LocalRelease:
        """The event of one release (:meth:`local_release` of its ``dimension`` coordinates)."""
        return self.local_release(dimension)


def as_tensor(w: torch.Tensor | float) -> torch.Tensor:
    return w if isinstance(w, torch.Tensor) else torch.tensor(float(w), dtype=torch.float64)


class LocalLaplace(LaplaceMechanism, LocalMechanism):
    """Laplace on [−1, 1] inputs: w + Lap(2/ε) (sensitivity 2), ε-LDP; Var = 8/ε²."""

    name = "laplace"

    def __init__(self, *, epsilon: float) -> None:
        LaplaceMechanism.__init__(self, epsilon=check_epsilon(epsilon), sensitivity=2.0)

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        return torch.full_like(as_tensor(w), 2.0 * self.scale**2)

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        return torch.full_like(w, -math.inf), torch.full_like(w, math.inf)


class LocalGaussian(GaussianMechanism, LocalMechanism):
    """Gaussian on [−1, 1] inputs, (ε, δ)-LDP per coordinate with σ from the analytic Gaussian
    mechanism (Balle & Wang 2018), valid for every ε (the classic σ = 2·√(2 ln(1.25/δ))/ε of
    Dwork & Roth Thm. A.1 holds only for ε < 1 and misses δ above). Var = σ²."""

    name = "gaussian"

    def __init__(self, *, epsilon: float, delta: float = 1e-5) -> None:
        sigma = analytic_gaussian_sigma(
            epsilon=check_epsilon(epsilon), delta=delta, sensitivity=2.0
        )
        GaussianMechanism.__init__(self, noise_multiplier=sigma / 2.0, sensitivity=2.0)
        self.epsilon = float(epsilon)
        self._delta = float(delta)

    @property
    def delta(self) -> float:
        return self._delta

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        return torch.full_like(as_tensor(w), self.std**2)

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        return torch.full_like(w, -math.inf), torch.full_like(w, math.inf)

    def local_release(self, coordinates: int) -> LocalRelease:
        """As :meth:`LocalMechanism.local_release`, with the noise multiplier σ/Δ, so that the
        accountant composes the coordinates and uploads as Gaussian events at the run's δ."""
        return LocalRelease(
            self.epsilon, self.delta, "coordinate", int(coordinates), self.noise_multiplier
        )

    def event(self, dimension: int) -> LocalRelease:
        """Per coordinate, as every local mechanism (not the Gaussian's unamplified event)."""
        return self.local_release(dimension)


SPM_VARIANTS = ("published", "debiased", "unbiased_c")
