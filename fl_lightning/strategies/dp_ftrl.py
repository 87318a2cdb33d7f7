"""DP-FTRL: client-level DP with correlated noise, no amplification (matrix mechanism).

Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021 ("Practical and private (deep) learning
without sampling or shuffling", Alg. 1) and its matrix-factorisation generalisation (Denisov et
al. 2022; Choquette-Choo et al. 2023): each client's delta is clipped to L2 norm C; the server
sums the clipped deltas x_t of round t and releases them with the noise w_t of a factorisation
A = B·C of the prefix-sum workload (``privacy/correlated/matrix_mechanism.py``: tree aggregation,
the banded square root of Kalinin & Lampert 2024, or independent noise), divided by the fixed cohort
size m. The server optimizer (SGD: θ_t = θ_0 + η Σ_{s≤t} (x_s + w_s)/m) then follows the noisy
prefix sums A·x + B·z, the FTRL form; momentum or Adam are post-processing of the same release.

Participation: cohorts must come from ``model.sampling: cyclic`` (every client every b = ⌊N/m⌋
rounds, so at most k = ⌈T/b⌉ times at least b apart); any sampling that cannot guarantee that
separation is refused. Privacy: the whole run is one Gaussian mechanism with multiplier
σ/Δ, where Δ is the largest ‖C·u‖ over those participation patterns
(:func:`~fl_lightning.privacy.correlated.matrix_mechanism.min_sep_sensitivity`), add/remove one
client (zero-out); no amplification is claimed, so the ε holds for any cohort the schedule draws.
The event is charged in full before round 0 (the ε reported mid-run is the whole run's), so a
resume to more rounds than planned is refused (``StrategyTraits.horizon_bound``,
``privacy/accounting/horizon.py``). The noise is keyed by the round's noise seed, the run's secret
in ``privacy.secure_mode``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from fl_lightning.privacy.accounting.analysis import (
    calibrate_noise_multiplier,
    calibrate_repeated_gaussian,
)
from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.correlated.banded_mf import optimise_banded
from fl_lightning.privacy.correlated.blt import blt_coefficients, optimise_blt
from fl_lightning.privacy.correlated.matrix_mechanism import (
    FACTORIZATIONS,
    StreamingNoise,
    amplified_run_event,
    check_tree_estimator,
    factorization,
    min_sep_sensitivity,
    whole_run_event,
)
from fl_lightning.privacy.correlated.toeplitz_mf import check_error, toeplitz_sensitivity
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.params import check_clip_norm, check_noise_multiplier
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.base import Strategy, StrategyTraits
from fl_lightning.strategies.spec import FederationSpec

NAMES = {
    "bsr": "BSR",
    "tree": "tree aggregation",
    "identity": "independent noise, C = I",
    "banded": "optimised banded Toeplitz",
    "blt": "BLT",
}
CHOICES: tuple[str, ...] = (*FACTORIZATIONS, "auto")


AUTO_MAX_BANDS = 32
"""``factorization: auto`` uses the banded square root up to this separation, the BLT beyond."""


def auto_factorization(rounds: int, participations: int, separation: int) -> str:
    """``factorization: auto`` on cyclic cohorts, from docs/privacy.md's two tables. Offline
    MNIST (``benchmarks/dp_ftrl_mnist_offline.py``, b = 5, k = 8, 5 seeds paired): the banded
    square root had the best accuracy of the unamplified factorisations, 0.7–0.9 pp above the
    optimised banded one and 1.0–1.4 pp above the BLT (paired sd ≤ 1.1), although its RMSE is
    1.6% higher; Honaker's tree was level with it on average with a paired sd of 4–8 pp. The
    loss table (n ∈ {64, 256, 1024}, k ∈ {1, 4, 16}): every p = b banded factorisation keeps
    b − 1 noise vectors, where the 4-buffer BLT keeps 4 and is 1.2–3.4× below a banded one of
    that memory. So ``bsr`` when b ≤ AUTO_MAX_BANDS (at most 31 vectors of state), ``blt``
    beyond. Under ``model.sampling: cyclic_poisson`` (amplified), ``banded``: see
    :meth:`DPFTRL.setup_federation`. ``participations`` does not enter."""
    del participations
    return "bsr" if min(separation, rounds) <= AUTO_MAX_BANDS else "blt"


class DPFTRL(Strategy):
    """Client-level DP-FTRL with a matrix-factorisation mechanism.

    Args:
        clip_norm: C, the L2 bound on each client's delta.
        noise_multiplier: σ, std of each entry of z in units of C (the noise is B·z). ``None``:
            calibrated so that the run's one Gaussian event spends ``privacy.target_epsilon``.
        factorization: ``bsr`` (banded square root), ``banded`` (banded Toeplitz optimised for
            the run), ``blt`` (buffered linear Toeplitz, optimised for the run), ``tree``
            (binary-tree aggregation), ``identity`` (independent noise each round) or ``auto``
            (:func:`auto_factorization`).
        bands: p of ``bsr`` and ``banded`` (None: the participation separation b, Kalinin &
            Lampert's choice, under which the columns a client touches never overlap).
        tree_estimator: ``honaker`` (Honaker 2015, variance-optimal) or ``plain`` (the dyadic
            decomposition's nodes only, Kairouz et al. 2021).
        error: what ``banded`` and ``blt`` minimise with Δ²: the ``mean`` or the ``max`` over
            rounds of the squared prefix-sum error.
        buffers: the number of buffers of ``blt`` (its streaming state: buffers·d floats).
    """

    def __init__(
        self,
        *,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = 1.0,
        factorization: str = "bsr",
        bands: int | None = None,
        tree_estimator: str = "honaker",
        error: str = "mean",
        buffers: int = 4,
    ) -> None:
        super().__init__(weighting="uniform")
        check_clip_norm(clip_norm)
        check_noise_multiplier(noise_multiplier)
        if factorization not in CHOICES:
            raise ValueError(
                f"strategy.factorization: unknown {factorization!r}; choose from {CHOICES}"
            )
        if bands is not None and bands < 1:
            raise ValueError(f"strategy.bands: must be >= 1, got {bands}")
        check_tree_estimator(tree_estimator)
        check_error(error)
        if isinstance(buffers, bool) or not isinstance(buffers, int) or buffers < 1:
            raise ValueError(f"strategy.buffers: must be an integer >= 1, got {buffers!r}")
        self.requested = factorization
        self.tree_estimator = tree_estimator
        self.error = error
        self.buffers = buffers
        self.coefficients: np.ndarray | None = None
        """banded/blt: the Toeplitz coefficients optimised for the run (checkpointed)."""
        self.blt_params: tuple[np.ndarray, np.ndarray] | None = None
        self.clip_norm = clip_norm
        self.noise_multiplier = noise_multiplier
        self.factorization = factorization
        self.bands = bands
        self.separation = 1
        self.participations = 1
        self.sensitivity = 1.0
        self.sensitivity_exact = True
        self.cohort_size = 1
        self.amplified = False
        self.sample_rate = 1.0
        self.expected_cohort = 1.0
        self.noise: StreamingNoise | None = None
        self._pending_noise: dict[str, Any] | None = None

    @property
    def server_view(self) -> ServerView:
        """What the server receives: each client's clipped delta (the server adds the noise)."""
        return ServerView("clipped updates", clip_norm=float(self.clip_norm))

    @property
    def traits(self) -> StrategyTraits:
        return replace(
            super().traits,
            private=True,
            amplified_by_sampling=False,
            horizon_bound=(  # the whole run is one Gaussian event of Δ over the planned rounds
                "DP-FTRL charges the whole planned run, its matrix factorisation and "
                "sensitivity over those rounds, once at round 0"
            ),
        )

    # -- setup -------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        """Refuses sampling without a guaranteed separation, computes Δ for k participations
        b apart over ``spec.rounds`` rounds and fixes σ (given, or from the target)."""
        super().setup_federation(spec)
        sampling = spec.sampling
        if spec.privacy.sampling is None:  # unit tests: every client every round
            sampling = replace(sampling, mode="cyclic")
        if sampling.mode not in ("cyclic", "cyclic_poisson"):
            raise ValueError(
                f"model.sampling: DPFTRL needs each client's rounds at least b apart, which "
                f"{sampling.mode!r} cohorts cannot guarantee (a client can be drawn in "
                "consecutive rounds); use model.sampling: cyclic or cyclic_poisson"
            )
        rounds = max(1, spec.rounds)
        self.amplified = sampling.mode == "cyclic_poisson"
        self.sample_rate = sampling.rate if self.amplified else 1.0
        self.cohort_size = max(1, sampling.size)
        self.separation = sampling.separation
        self.participations = math.ceil(rounds / self.separation)
        if self.requested == "auto":
            self.factorization = (
                "banded"
                if self.amplified
                else auto_factorization(rounds, self.participations, self.separation)
            )
        if self.bands is None:
            self.bands = min(self.separation, rounds)
        k, b = self.participations, self.separation
        if self.amplified:
            self._setup_amplified(spec, rounds)
            return
        if self.factorization == "banded" and self.coefficients is None:
            self.coefficients = optimise_banded(rounds, k, b, self.bands, error=self.error)
        if self.factorization == "blt" and self.blt_params is None:
            self.blt_params = optimise_blt(rounds, k, b, self.buffers, error=self.error)
        if self.factorization == "blt":
            assert self.blt_params is not None
            self.coefficients = blt_coefficients(*self.blt_params, rounds)
            # non-negative, non-increasing Toeplitz: the earliest pattern is worst (exact)
            delta_c, exact = toeplitz_sensitivity(self.coefficients, rounds, k, b), True
        else:
            _, c = factorization(
                self.factorization, rounds, bands=self.bands, coefficients=self.coefficients
            )
            delta_c, exact = min_sep_sensitivity(c, k, b)
        self.sensitivity, self.sensitivity_exact = delta_c, exact
        if self.noise_multiplier is None:
            mult = calibrate_repeated_gaussian(
                1,
                target_epsilon=spec.privacy.epsilon,
                delta=spec.privacy.delta,
                accountant=spec.privacy.accountant,
            )
            self.noise_multiplier = mult * delta_c
        state = self.noise.state_dict() if self.noise is not None else self._pending_noise
        self._pending_noise = None
        self.noise = self._stream()  # keyed in finalize
        if state is not None:
            self.noise.load_state_dict(state)

    def _setup_amplified(self, spec: FederationSpec, rounds: int) -> None:
        """Amplified banded DP-FTRL (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu,
        NeurIPS 2023, "(Amplified) Banded Matrix Factorization", amplification of b-banded C): with
        a banded C of p ≤ b bands and cyclic Poisson sampling (``model.sampling: cyclic_poisson``:
        the round's block of m clients, each kept with probability q), the release is as private as
        k = ⌈n/b⌉ compositions of a Poisson-subsampled Gaussian of rate q and multiplier σ/ζ, ζ the
        largest column norm of C (each participation touches its own rows of C·x, and the blocks are
        disjoint). C is optimised for ζ²·error, the loss at a fixed ε (σ = ζ·the multiplier of that
        composition): :func:`optimise_banded` with one participation."""
        k, b = self.participations, self.separation
        if self.factorization not in ("bsr", "banded"):
            raise ValueError(
                "strategy.factorization: amplification by cyclic Poisson sampling "
                "(model.sampling: cyclic_poisson) needs a banded factorisation with p <= b "
                f"(bsr or banded), got {self.factorization!r}"
            )
        assert self.bands is not None
        if self.bands > min(b, rounds):
            raise ValueError(
                f"strategy.bands: amplified banded DP-FTRL needs p <= b = {min(b, rounds)}, "
                f"got {self.bands}"
            )
        if self.factorization == "banded" and self.coefficients is None:
            self.coefficients = optimise_banded(rounds, 1, b, self.bands, error=self.error)
        _, c = factorization(
            self.factorization, rounds, bands=self.bands, coefficients=self.coefficients
        )
        self.sensitivity = float(np.sqrt(np.max(np.sum(c * c, axis=0))))  # ζ: the largest column
        self.sensitivity_exact = True
        self.cohort_size = max(1, sampling_block(spec))
        self.expected_cohort = self.sample_rate * self.cohort_size
        if self.noise_multiplier is None:
            mult = calibrate_noise_multiplier(
                [[amplified_run_event(1.0, self.sample_rate, k, "")]],
                target_epsilon=spec.privacy.epsilon,
                delta=spec.privacy.delta,
                accountant=spec.privacy.accountant,
            )
            self.noise_multiplier = mult * self.sensitivity
        state = self.noise.state_dict() if self.noise is not None else self._pending_noise
        self._pending_noise = None
        self.noise = self._stream()
        if state is not None:
            self.noise.load_state_dict(state)

    def _stream(self) -> StreamingNoise:
        theta, omega = self.blt_params if self.blt_params is not None else (None, None)
        return StreamingNoise(
            self.factorization,
            bands=self.bands if self.factorization == "bsr" and self.bands else 1,
            estimator=self.tree_estimator,
            coefficients=self.coefficients if self.factorization == "banded" else None,
            theta=theta,
            omega=omega,
        )

    # -- the mechanism -----------------------------------------------------------------------
    @property
    def multiplier(self) -> float:
        """σ/Δ, the noise multiplier of the run's one Gaussian event."""
        assert self.noise_multiplier is not None
        return self.noise_multiplier / self.sensitivity

    def scheme(self) -> str:
        """The participation and mechanism, in the guarantee sentence's words."""
        name = NAMES[self.factorization]
        if self.factorization == "bsr":
            name = f"{name}, p = {self.bands}"
        elif self.factorization == "banded":
            name = f"{name}, p = {self.bands}, optimised for {self.error} error"
        elif self.factorization == "blt":
            name = f"{name}, {self.buffers} buffers, optimised for {self.error} error"
        elif self.factorization == "tree":
            name = f"{name}, {'Honaker' if self.tree_estimator == 'honaker' else 'plain'} estimator"
        bound = "" if self.sensitivity_exact else ", sensitivity upper bound"
        times = "participations" if self.participations > 1 else "participation"
        if self.amplified:
            return (
                f"at most {self.participations} {times} ≥ {self.separation} rounds apart "
                f"(cyclic Poisson cohorts: blocks of {self.cohort_size}, each client with "
                f"q = {self.sample_rate:.3g}), amplified banded matrix mechanism ({name}; "
                f"column norm ζ = {self.sensitivity:.4g}), amplified by sampling as "
                f"{self.participations} Poisson-subsampled Gaussians"
            )
        return (
            f"{self.participations} {times} ≥ {self.separation} rounds apart (cyclic cohorts of "
            f"{self.cohort_size}), matrix mechanism ({name}; Δ = {self.sensitivity:.4g}{bound}), "
            "no amplification"
        )

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Δ ← Δ·min(1, C/‖Δ‖₂), in place."""
        norm = clip_by_l2_norm_(update.delta, self.clip_norm)
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.clip_norm)
        return update

    def partial_aggregate(self, updates: Iterable[ClientUpdate], ctx: RoundContext) -> torch.Tensor:
        """This process's plain sum of clipped deltas."""
        total = torch.zeros_like(ctx.global_params)
        for update in updates:
            total.add_(update.delta)
        return total

    def finalize(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """(x_t + σC·w_t)/m: w_t from generators keyed by the round's noise seed
        (``ctx.seed``: the run's secret in ``privacy.secure_mode``, never ``spec.seed``;
        identical on every rank), m the fixed cohort size."""
        assert self.noise is not None and self.noise_multiplier is not None
        self.noise.bind(ctx.seed)
        w = self.noise.next(ctx.round_idx, reduced.numel(), reduced.device)
        noisy = reduced + w.to(reduced.dtype) * (self.noise_multiplier * self.clip_norm)
        # m, the fixed cohort size; amplified: the expected cohort q·m (a Poisson cohort's size
        # is random and not private)
        return noisy.div_(self.expected_cohort if self.amplified else self.cohort_size), {}

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """The run's one Gaussian event (multiplier σ/Δ), charged before round 0."""
        if ctx.round_idx != 0:
            return RoundPrivacy()
        if self.amplified:  # k Poisson-subsampled Gaussians of multiplier σ/ζ at rate q
            event = amplified_run_event(
                self.multiplier, self.sample_rate, self.participations, self.scheme()
            )
            return RoundPrivacy(client_level=[event])
        return RoundPrivacy(client_level=[whole_run_event(self.multiplier, self.scheme())])

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"noise_multiplier": self.noise_multiplier, "bands": self.bands}
        if self.factorization == "banded" and self.coefficients is not None:
            state["coefficients"] = self.coefficients.tolist()
        if self.blt_params is not None:
            state["blt"] = [p.tolist() for p in self.blt_params]
        if self.noise is not None:
            state["noise"] = self.noise.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]
        self.bands = state_dict["bands"]
        if "coefficients" in state_dict:  # the run's optimised factorisation, not re-optimised
            self.coefficients = np.asarray(state_dict["coefficients"], dtype=float)
        if "blt" in state_dict:
            theta, omega = state_dict["blt"]
            self.blt_params = (np.asarray(theta, dtype=float), np.asarray(omega, dtype=float))
        if "noise" in state_dict:
            if self.noise is None and self.factorization not in ("banded", "blt", "auto"):
                self.noise = self._stream()
            if self.noise is None:  # built by setup_federation from the restored parameters
                self._pending_noise = state_dict["noise"]
            else:
                self.noise.load_state_dict(state_dict["noise"])


def sampling_block(spec: FederationSpec) -> int:
    """m, the block size of cyclic Poisson cohorts."""
    sampling = spec.sampling
    return sampling.block or sampling.size


__all__ = ["DPFTRL"]
