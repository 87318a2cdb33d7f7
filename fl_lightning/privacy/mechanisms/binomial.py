"""cpSGD's pieces: randomised Hadamard rotation, stochastic k-level quantisation, the Binomial
mechanism and its (ε, δ) (Agarwal, Suresh, Yu, Kumar, McMahan, "cpSGD: Communication-efficient
and differentially-private distributed SGD", NeurIPS 2018, arXiv:1805.10559).

* Rotation (Sec. 5): y = H D x / sqrt(d'), H the d'×d' Walsh–Hadamard matrix (d' the next power
  of two, zero padding), D a diagonal of shared random signs. Orthonormal, so ‖y‖2 = ‖x‖2.
* Quantisation (Sec. 4): clamp to [−X, X], k levels b_r = −X + r·s with s = 2X/(k−1); each value
  rounds up to the next level with probability (y − b_r)/s (unbiased inside [−X, X]).
* Binomial mechanism (Sec. 3): add Z ~ Bin(m, p) to each integer level; the server subtracts
  m·p per contribution.
* Privacy: Theorem 1 (Eq. 7 of the arXiv version) bounds ε for sensitivities Δ1, Δ2, Δ∞ of the
  integer-valued function when N p (1 − p) >= max(23 log(10 d / δ), 2Δ∞), with the constants
  c_p (Eq. 12), d_p (Eq. 16) and b_p (Eq. 17). No maintained Python library exposes this bound
  (dp-accounting and Opacus do not), so :func:`binomial_mechanism_epsilon` implements Eq. 7
  directly and returns ∞ when the theorem's condition fails.
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.accounting.events import LocalRelease
from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.params import check_clip_norm


def next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Orthonormal fast Walsh–Hadamard transform of a 1-D tensor of power-of-two length."""
    n = x.numel()
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    y = x.reshape(-1)
    h = 1
    while h < n:
        y = y.view(-1, 2, h)
        y = torch.stack((y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]), dim=1)
        h *= 2
    return y.reshape(n) / math.sqrt(n)


def random_signs(
    n: int, *, generator: torch.Generator, device: torch.device | str | None = None
) -> torch.Tensor:
    """n independent uniform signs ±1 on ``device`` (by default the generator's)."""
    device = generator.device if device is None else device
    return torch.randint(0, 2, (n,), generator=generator, device=device).float().mul_(2).sub_(1)


def rotate(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """y = H D x / sqrt(d') with zero padding to len(signs)."""
    padded = torch.zeros(signs.numel(), dtype=x.dtype, device=x.device)
    padded[: x.numel()] = x
    return fwht(padded * signs)


def unrotate(y: torch.Tensor, signs: torch.Tensor, d: int) -> torch.Tensor:
    """Inverse of :func:`rotate` (H is symmetric and orthonormal): x = D H y, first d entries."""
    return (fwht(y) * signs)[:d]


def stochastic_quantize(
    y: torch.Tensor, *, levels: int, bound: float, generator: torch.Generator
) -> torch.Tensor:
    """Integer levels in {0, …, k−1} (as float32) with E[−X + s·U] = clamp(y, −X, X)."""
    if levels < 2:
        raise ValueError(f"levels must be >= 2, got {levels}")
    step = 2.0 * bound / (levels - 1)
    pos = (y.clamp(-bound, bound) + bound) / step
    low = pos.floor().clamp_(0, levels - 1)
    up = torch.rand(y.shape, generator=generator, device=y.device) < (pos - low)
    return (low + up.float()).clamp_(0, levels - 1)


def dequantize_sum(
    level_sum: torch.Tensor, *, count: int, levels: int, bound: float, trials: int, p: float
) -> torch.Tensor:
    """Σ_i (−X + s·(Y_i − m p)) from Σ_i Y_i over ``count`` contributions."""
    step = 2.0 * bound / (levels - 1)
    return (level_sum - count * trials * p) * step - count * bound


def sample_binomial(
    shape: torch.Size | tuple[int, ...],
    *,
    trials: int,
    p: float,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    if trials == 0:
        return torch.zeros(shape, device=device)
    count = torch.full(shape, float(trials), device=device)
    return torch.binomial(count, torch.full(shape, float(p), device=device), generator=generator)


# -- Theorem 1 of Agarwal et al. 2018 ---------------------------------------------------------
def _b_p(p: float) -> float:  # Eq. (17)
    return (2.0 / 3.0) * (p**2 + (1 - p) ** 2) + 1 - 2 * p


def _c_p(p: float) -> float:  # Eq. (12)
    return math.sqrt(2.0) * (3 * p**3 + 3 * (1 - p) ** 3 + 2 * p**2 + 2 * (1 - p) ** 2)


def _d_p(p: float) -> float:  # Eq. (16)
    return (4.0 / 3.0) * (p**2 + (1 - p) ** 2)


def binomial_mechanism_epsilon(
    *,
    trials: int,
    p: float,
    delta: float,
    dimension: int,
    l1_sensitivity: float,
    l2_sensitivity: float,
    linf_sensitivity: float,
) -> float:
    """ε of the Binomial mechanism with N = ``trials`` (Agarwal et al. 2018, Thm. 1 / Eq. 7).

    Sensitivities are in units of quantisation levels (scale s = 1). Returns ∞ when the
    theorem's condition N p (1−p) >= max(23 log(10 d/δ), 2Δ∞) does not hold.
    """
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    var = trials * p * (1 - p)
    if trials <= 0 or var < max(23 * math.log(10 * dimension / delta), 2 * linf_sensitivity):
        return math.inf
    first = l2_sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / math.sqrt(var)
    second = (
        l2_sensitivity * _c_p(p) * math.sqrt(math.log(10 / delta)) + l1_sensitivity * _b_p(p)
    ) / (var * (1 - delta / 10))
    third = (
        (2.0 / 3.0) * linf_sensitivity * math.log(1.25 / delta)
        + linf_sensitivity * _d_p(p) * math.log(20 * dimension / delta) * math.log(10 / delta)
    ) / var
    return first + second + third


def quantized_sensitivities(
    *, clip_norm: float, bound: float, levels: int, dimension: int
) -> tuple[float, float, float]:
    """Worst-case (Δ1, Δ2, Δ∞) in levels between two clipped, rotated, quantised vectors.

    Rotation and clamping are 1-Lipschitz in L2, so the rotated vectors differ by at most 2C;
    stochastic rounding moves each level by at most 1 more: Δ2 <= 2C/s + √d,
    Δ1 <= √d·2C/s + d, Δ∞ <= min(k − 1, 2·min(X, C)/s + 1), each capped by the level range.
    """
    step = 2.0 * bound / (levels - 1)
    root = math.sqrt(dimension)
    l2 = min(2 * clip_norm / step + root, root * (levels - 1))
    l1 = min(root * 2 * clip_norm / step + dimension, dimension * (levels - 1))
    linf = min(levels - 1, 2 * min(bound, clip_norm) / step + 1)
    return l1, l2, linf


def calibrate_trials(
    *,
    target_epsilon: float,
    p: float,
    delta: float,
    dimension: int,
    sensitivities: tuple[float, float, float],
    max_trials: int = 1 << 40,
) -> int:
    """Smallest N (to 1%) whose Theorem-1 ε is at most ``target_epsilon``."""
    l1, l2, linf = sensitivities

    def eps(n: int) -> float:
        return binomial_mechanism_epsilon(
            trials=n,
            p=p,
            delta=delta,
            dimension=dimension,
            l1_sensitivity=l1,
            l2_sensitivity=l2,
            linf_sensitivity=linf,
        )

    high = 16
    while eps(high) > target_epsilon:
        high *= 2
        if high > max_trials:
            raise ValueError(
                f"strategy.epsilon: {target_epsilon} is unreachable with N <= {max_trials}"
            )
    low = high // 2
    while high - low > max(1, low // 100):
        mid = (low + high) // 2
        if eps(mid) > target_epsilon:
            low = mid
        else:
            high = mid
    return high


NO_GUARANTEE = (
    "cpSGD Binomial noise too small for Agarwal et al. 2018 Theorem 1 "
    "(N p (1-p) below max(23 log(10d/δ), 2Δ∞)) or switched off"
)


class BinomialMechanism(Mechanism):
    """cpSGD's client side (Agarwal et al. 2018, Alg. 1): clip to L2 norm C, rotate by the
    randomised Walsh–Hadamard transform (``signs``, shared by the cohort), quantise
    stochastically to k levels of [−X, X] and add Bin(m, p) to every level; its event is
    Theorem 1's (ε, δ) for one upload with N = ``accounted_trials`` (m, or m·|cohort| when the
    server sees only the securely aggregated sum).

    Args:
        clip_norm: C.
        levels: k.
        bound: X, the clamp of a rotated coordinate.
        trials: m, this client's Bin(m, p) trials (0: no noise).
        p: the Binomial's success probability.
        delta: δ of the per-upload (ε, δ).
        dimension: d', the padded (power-of-two) dimension.
        signs: the rotation's ±1 signs (needed to release, not to price).
        accounted_trials: N of Theorem 1 (default m).
    """

    no_guarantee = NO_GUARANTEE

    def __init__(
        self,
        *,
        clip_norm: float,
        levels: int,
        bound: float,
        trials: int,
        p: float,
        delta: float,
        dimension: int,
        signs: torch.Tensor | None = None,
        accounted_trials: int | None = None,
    ) -> None:
        self.clip_norm = check_clip_norm(clip_norm)
        self.levels = int(levels)
        self.bound = float(bound)
        self.trials = int(trials)
        self.p = float(p)
        self.delta = float(delta)
        self.dimension = int(dimension)
        self.signs = signs
        self.accounted_trials = self.trials if accounted_trials is None else int(accounted_trials)

    def constrain(self, x: torch.Tensor) -> float:
        """x ← x·min(1, C/‖x‖₂) in place."""
        return clip_by_l2_norm_(x, self.clip_norm)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """The integer levels of the rotated, quantised x plus Bin(m, p) each (the quantiser's
        uniforms first, then the Binomial draws, both from ``generator``)."""
        assert self.signs is not None, "the rotation's signs are needed to release"
        y = rotate(x, self.signs)
        levels = stochastic_quantize(y, levels=self.levels, bound=self.bound, generator=generator)
        noise = sample_binomial(
            levels.shape, trials=self.trials, p=self.p, generator=generator, device=levels.device
        )
        return levels + noise

    def epsilon(self) -> float:
        """Theorem 1's ε at ``delta`` for N = ``accounted_trials`` (∞ when it does not apply)."""
        if not self.trials:
            return math.inf
        l1, l2, linf = quantized_sensitivities(
            clip_norm=self.clip_norm, bound=self.bound, levels=self.levels, dimension=self.dimension
        )
        return binomial_mechanism_epsilon(
            trials=self.accounted_trials,
            p=self.p,
            delta=self.delta,
            dimension=self.dimension,
            l1_sensitivity=l1,
            l2_sensitivity=l2,
            linf_sensitivity=linf,
        )

    def event(self, dimension: int) -> LocalRelease | None:
        """One upload at Theorem 1's (ε, δ); None when the theorem gives nothing."""
        eps = self.epsilon()
        if math.isinf(eps):
            return None
        return LocalRelease(eps, self.delta, "upload")

    def observed_event(self, dimension: int) -> LocalRelease:
        """One upload as an observer's ledger prices it: :meth:`event`, or ε = ∞ where the
        theorem gives nothing (an observer's row says ∞; the run's headline refuses instead)."""
        return self.event(dimension) or LocalRelease(math.inf, self.delta, "upload")
