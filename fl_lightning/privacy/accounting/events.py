"""What a round spends, in a form every accountant backend understands.

A round can spend privacy at three levels, reported separately and never mixed:

* ``client_level``: mechanisms on the aggregate that protect a whole client's data
  (DP-FedAvg of McMahan et al. 2018): subsampled Gaussian events whose sampling is the cohort
  sampler's (:class:`CohortSampling`): Poisson cohorts give add/remove-one-client adjacency,
  fixed-size cohorts drawn without replacement give replace-one-client adjacency.
* ``record_level``: each client's DP-SGD steps (Abadi et al. 2016), keyed by client id
  (Poisson batches, add/remove one record).
* ``local``: releases a client privatises itself before upload (local DP), keyed by client id,
  each a :class:`LocalRelease` that names its unit (one coordinate or one whole upload).
* ``distributed``: client-level rounds whose noise the clients add in shares behind secure
  aggregation (:class:`DistributedNoiseEvent`; Kairouz et al. 2021, Agarwal et al. 2021).

Events are built by the mechanisms (``privacy/mechanisms``), never by hand in a strategy.
A strategy whose algorithm does not give the guarantee its paper claims sets ``no_guarantee``
to a sentence saying why; the accountant then logs that sentence instead of an ε.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import dp_accounting

SamplingMode = Literal["poisson", "fixed", "cyclic", "cyclic_poisson"]
LocalUnit = Literal["coordinate", "upload"]


@dataclass(frozen=True)
class CohortSampling:
    """How a round's participants were drawn, as the accountant must know it.

    Attributes:
        mode: ``poisson`` (each of N clients independently with probability ``rate``),
            ``fixed`` (exactly m = ``size`` of N without replacement) or ``cyclic`` (the N
            clients shuffled once into ⌊N/m⌋ blocks of m, taken in turn: every client every
            ``separation`` rounds; DP-FTRL's min-separated participation) or
            ``cyclic_poisson`` (the same blocks of m = ``block``, each client of the round's
            block independently with probability ``rate``: the cyclic Poisson sampling of
            Choquette-Choo et al. 2023 (arXiv:2306.08153), under which banded DP-FTRL is amplified).
        rate: q (Poisson, cyclic_poisson) or m/N (fixed, cyclic).
        population: N.
        block: m, the block size of ``cyclic_poisson`` (0 otherwise).
    """

    mode: SamplingMode
    rate: float
    population: int
    block: int = 0

    @property
    def size(self) -> int:
        """m, the cohort size of fixed-size sampling (the block of ``cyclic_poisson``)."""
        if self.mode == "cyclic_poisson":
            return self.block
        return round(self.rate * self.population)

    @property
    def without_replacement(self) -> bool:
        """True when the accounting must use the without-replacement (replace-one) analysis:
        fixed-size cohorts smaller than the population. A cohort of every client is no
        sampling at all and is accounted as rate 1 under add/remove adjacency."""
        return self.mode == "fixed" and self.size < self.population

    @property
    def separation(self) -> int:
        """b, the rounds between a client's participations under ``cyclic`` sampling."""
        return max(1, self.population // max(1, self.size))

    def describe(self) -> str:
        if self.mode == "cyclic_poisson":
            return (
                f"cyclic Poisson cohorts (blocks of {self.size} of {self.population}, each "
                f"block every {self.separation} rounds, each of its clients with q = "
                f"{self.rate:.3g})"
            )
        if self.mode == "cyclic":
            return (
                f"cyclic cohorts ({self.size} of {self.population}, each client every "
                f"{self.separation} rounds)"
            )
        if self.mode == "poisson":
            return f"Poisson cohorts (q = {self.rate:.3g})"
        if not self.without_replacement:
            return "every client in every round"
        return f"fixed-size cohorts ({self.size} of {self.population}, without replacement)"


@dataclass(frozen=True)
class SampledGaussian:
    """``steps`` compositions of a subsampled Gaussian mechanism.

    Attributes:
        noise_multiplier: σ/C, noise std in units of the add/remove L2 sensitivity C (one
            client's or one record's clipped contribution).
        sample_rate: the sampling rate (1.0 for no subsampling).
        steps: how many times it was applied.
        population: 0 for Poisson sampling (add/remove adjacency); N > 0 for a fixed-size
            sample of m = round(q·N) drawn without replacement from N (replace-one adjacency).
            Its dominating pair ((1−q)·N(0, σ²) + q·N(2, σ²), N(0, σ²)) (Zhu, Dong & Wang 2022)
            is, scaled by 1/2, that of a Poisson-subsampled Gaussian of multiplier σ/2 at rate
            q under add/remove, which is the event :meth:`dp_event` returns.
        scheme: see below.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int = 1
    population: int = 0
    scheme: str = field(default="", compare=False)
    """Words replacing the sampling in the guarantee sentence, for an event that is not a
    cohort's (a matrix mechanism's whole run: "k participations ≥ b apart, matrix mechanism
    (BSR, p = …)"); "" for a cohort's event."""

    @classmethod
    def for_cohort(
        cls, noise_multiplier: float, sampling: CohortSampling, steps: int = 1
    ) -> SampledGaussian:
        """The event of a Gaussian on the sum over a cohort drawn by ``sampling``."""
        if sampling.without_replacement:
            return cls(noise_multiplier, sampling.rate, steps, sampling.population)
        rate = sampling.rate if sampling.mode == "poisson" else 1.0
        return cls(noise_multiplier, rate, steps, 0)

    @property
    def adjacency(self) -> str:
        return "replace-one" if self.population else "add/remove-one"

    def to_state(self) -> tuple[float, float, int]:
        """(σ, q, steps): a DP-SGD client's step event in a checkpoint (record-level steps are
        Poisson, so population is 0 and no scheme is written)."""
        assert not self.population, "only Poisson (record-level) events are serialised"
        return (self.noise_multiplier, self.sample_rate, self.steps)

    @classmethod
    def from_state(cls, state: tuple[float, float, int] | list) -> SampledGaussian:
        """The event :meth:`to_state` wrote (a serialised upload's DP-SGD steps)."""
        sigma, rate, steps = state
        return cls(float(sigma), float(rate), int(steps))

    def dp_event(self) -> dp_accounting.DpEvent:
        """The dp_accounting event of one step (compose it ``steps`` times), for an accountant
        under add/remove adjacency: a fixed-size step is its dominating pair's Poisson event
        (σ/2, q) (class docstring). Not dp-accounting's ``REPLACE_ONE`` Poisson event, which is
        a different pair and not valid for sampling without replacement."""
        if self.noise_multiplier == 0:
            return dp_accounting.NonPrivateDpEvent()
        sigma = self.noise_multiplier / 2.0 if self.population else self.noise_multiplier
        base = dp_accounting.GaussianDpEvent(sigma)
        if self.sample_rate >= 1.0:
            return base
        return dp_accounting.PoissonSampledDpEvent(self.sample_rate, base)


@dataclass(frozen=True)
class LocalRelease:
    """One privatised upload of a client under local DP.

    Attributes:
        epsilon: ε of the mechanism per ``unit`` (one coordinate, or the whole upload).
        delta: δ per unit (0 for pure ε-DP).
        unit: ``coordinate`` when the mechanism is ε-LDP per coordinate and the upload holds
            ``coordinates`` independently privatised coordinates; ``upload`` when ``epsilon``
            already covers the whole upload (any two inputs the client could upload).
        coordinates: number of independently privatised units in the upload.
        noise_multiplier: for a Gaussian release, σ/Δ per unit (std over the unit's L2
            sensitivity): the accountant then composes it as a Gaussian event at the run's δ
            (``epsilon``/``delta`` stay the mechanism's own figures, for the log); 0 for any
            other mechanism, composed from (ε, δ).
    """

    epsilon: float
    delta: float = 0.0
    unit: LocalUnit = "upload"
    coordinates: int = 1
    noise_multiplier: float = 0.0

    @property
    def units(self) -> int:
        return self.coordinates if self.unit == "coordinate" else 1


@dataclass
class RoundPrivacy:
    """Everything one round spends; see the module docstring."""

    client_level: list[SampledGaussian] = field(default_factory=list)
    record_level: dict[int, list[SampledGaussian]] = field(default_factory=dict)
    local: dict[int, list[LocalRelease]] = field(default_factory=dict)
    local_seen_by_server: dict[int, list[LocalRelease]] = field(default_factory=dict)
    """Each of ``local``'s uploads priced as the server receives it, where that is more than
    the released model shows (cpSGD's ``trust: aggregate`` prices the released sum with every
    client's noise, but the server receives each upload with its own share); empty: the server
    is priced by ``local`` itself."""
    no_guarantee: str | None = None
    distributed: list[DistributedNoiseEvent] = field(default_factory=list)
    """Client-level rounds of distributed DP behind secure aggregation (RDP-accounted)."""


@dataclass(frozen=True)
class DistributedNoiseEvent:
    """One round of distributed DP behind secure aggregation: the server sees only the modular
    sum of the survivors' encoded updates, each carrying its own integer noise share
    (``strategies/distributed_dp.py``). Priced by RDP (``privacy/distributed/accounting.py``)
    with the survivors' noise, never the planned one.

    Attributes:
        mechanism: the registered distributed noise (``ddg``, ``skellam``).
        clip_norm: C, the L2 bound on one client's update before encoding.
        scale: s = 1/γ, the encoding's scale.
        local_variance: each client's noise variance on the integer grid.
        survivors: the clients whose upload (and noise) is in the decoded sum.
        dim: d, the padded dimension.
        beta: the conditional rounding's β.
        bits: b, the modulus 2^b (for the sentence; the accounting assumes no wrap-around).
        sample_rate: q of Poisson cohorts (1.0: no amplification claimed).
        replace_one: fixed-size cohorts: replace-one adjacency (sensitivity doubled), no
            amplification claimed.
        cohort: the clients dispatched this round (the survivors' share of it is reported).
        members: the survivors' client ids (the server learns them at unmasking): the sums a
            client was in, over which the server's view is priced without amplification
            (``privacy/guarantee/observers.py``). Not part of the round's price (excluded from
            equality and hashing, so rounds of equal parameters share one cached RDP); ``()`` in
            ledgers written before it was recorded.
    """

    mechanism: str
    clip_norm: float
    scale: float
    local_variance: float
    survivors: int
    dim: int
    beta: float
    bits: int
    sample_rate: float
    replace_one: bool = False
    cohort: int = 0
    members: tuple[int, ...] = field(default=(), compare=False)

    def to_state(self) -> list:
        return [
            self.mechanism, self.clip_norm, self.scale, self.local_variance, self.survivors,
            self.dim, self.beta, self.bits, self.sample_rate, self.replace_one, self.cohort,
            list(self.members),
        ]  # fmt: skip

    @classmethod
    def from_state(cls, row: list) -> DistributedNoiseEvent:
        m, c, s, v, n, d, b, bits, q, r, k, *members = row
        return cls(
            str(m), float(c), float(s), float(v), int(n), int(d), float(b), int(bits),
            float(q), bool(r), int(k), tuple(int(i) for i in (members[0] if members else ())),
        )  # fmt: skip
