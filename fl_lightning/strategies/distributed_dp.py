"""Distributed DP behind secure aggregation: a component on a summing strategy's upload path.

Kairouz, Liu & Steinke (ICML 2021, Algorithms 1-2) and Agarwal, Kairouz & Liu (NeurIPS 2021):
no party adds all the noise and the server sees only a sum. In the round of a strategy holding
a :class:`SecAggDistributedDP` as its ``central_dp``:

* **on each client** (``on_client``, with the client's keyed ``(seed, round, client)``
  generator, whose first key is the run's secret in ``privacy.secure_mode``): clip the delta to
  C, encode it (``privacy/distributed/secagg/encoding.py``: rotate with the round's shared signs,
  scale by s, conditional randomized rounding with β), add its noise share
  (``privacy/distributed/ddg.py`` or ``privacy/distributed/skellam.py``, variance (σCs)²/m for m =
  the expected cohort size), and mask it (``privacy/distributed/secagg/protocol.py``: pairwise and
  self masks mod 2^b). What reaches the server (``deliver``) is the masked vector only: the client's
  loss, example count and metrics stay on the client (an exact sum of losses would be a release the
  ε does not price, so none is logged), and a client that dropped delivers nothing;
* **on the server** (``partial``): the masked uploads of the clients that did not drop are
  received by a :class:`~fl_lightning.privacy.distributed.secagg.protocol.SecAggServer`, which keeps
  only their modular sum (under DDP each process's partial sum is one all-reduce: integer-valued
  float64, exact);
* **once a round** (``release``): the survivors reveal what unmasking needs, the server
  removes the masks, reads the sum in [−2^(b−1), 2^(b−1)), divides by s, rotates back and
  divides by the expected cohort size (the fixed denominator of DP-FedAvg, McMahan et al.
  2018);
* **the price** (``round_privacy``): one :class:`~fl_lightning.privacy.accounting.events.
  DistributedNoiseEvent` with the survivors' noise (``privacy/distributed/accounting.py``).

Dropouts are simulated: each dispatched client drops after masking with probability
``dropout_rate``, drawn from a generator keyed ``(seed, round, "secagg_dropout")``, so the
price is known before anyone trains and is the same on every process. Fewer survivors than
``min_survivors`` abort the round (nothing released, nothing spent), and so does a survivors'
masking graph split into several connected components under SecAgg+ (``neighbours``): the
reveals would let the server unmask each component's sum on its own, an isolated survivor's
update with only its own noise share (``privacy/distributed/secagg/protocol.py``; Bell et al. 2020).
An aborted round logs ``strategy/secagg_aborted`` 1 (``strategy/secagg_split`` 1 when the graph
split it) and ``strategy/secagg_survivors`` 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import DistributedNoiseEvent, RoundPrivacy
from fl_lightning.privacy.distributed.accounting import (
    calibrate_distributed_sigma,
    distributed_epsilon,
    survivor_distribution,
)
from fl_lightning.privacy.distributed.noise import DistributedNoise
from fl_lightning.privacy.distributed.registry import distributed_noise
from fl_lightning.privacy.distributed.release_check import (
    MIN_AGGREGATE_PROBABILITY,
    bits_problem,
    survivors_problem,
)
from fl_lightning.privacy.distributed.secagg.connectivity import (
    fewest_neighbours,
    split_probability,
)
from fl_lightning.privacy.distributed.secagg.encoding import (
    center,
    conditional_round,
    heuristic_scale,
    padded_dimension,
    rotate,
    rotation_signs,
    rounded_l2_bound,
    unrotate,
)
from fl_lightning.privacy.distributed.secagg.protocol import (
    MaskedUpload,
    RoundKeys,
    SecAggClient,
    SecAggServer,
    masking_graph,
    survivor_components,
)
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.placement import CentralPrivacy, CohortSpec
from fl_lightning.utils.rng import generator_for

log = logging.getLogger(__name__)

SPLIT_WARNING = 0.01
"""A configuration whose rounds abort for a split survivors' graph more often says so."""

DEFAULT_BETA = math.exp(-0.5)
"""β of conditional rounding in the reference implementation (``compression_utils.py``)."""
K_STDDEVS = {"ddg": 4.0, "skellam": 3.0}
"""k of the scale heuristic, the reference's defaults (``accounting_utils.py``)."""


class SecAggDistributedDP(CentralPrivacy):
    """Clip, encode, add a discrete noise share and mask on each client; the server sees only
    the modular sum of the survivors' masked vectors.

    Args:
        mechanism: the distributed noise, ``ddg`` (discrete Gaussian) or ``skellam``, or any
            registered name (``privacy/distributed/noise.py``).
        bits: b, the modulus 2^b of the SecAgg field (per coordinate).
        clip_norm: C, the L2 bound on each client's delta.
        noise_multiplier: σ: the noise of the sum of m = the expected cohort size clients has
            standard deviation σC (each client adds 1/m of the variance). ``None``: calibrated
            so that ``trainer.max_steps`` planned rounds spend ``privacy.target_epsilon`` with
            the survivors' variation (the cohort's and the dropouts') covered with about 95 %
            probability (``distributed.accounting.planned_rdp``); a run whose rounds had fewer
            survivors than that is ended by the budget stop before its last rounds.
        beta: β ∈ [0, 1) of conditional randomized rounding.
        k_stddevs: k standard deviations of the encoded sum must fit in 2^b (sets the scale);
            None: 4 for ``ddg``, 3 for ``skellam``, as the reference.
        dropout_rate: the probability that a dispatched client drops after masking (simulated).
        neighbours: SecAgg+ (Bell et al. 2020): each client masks with k neighbours of a
            random Harary graph; None: with every other client (Bonawitz et al. 2017).
        min_survivors: fewer survivors abort the round (SecAgg's threshold t); so does a
            survivors' masking graph in several components (module docstring).
    """

    def __init__(
        self,
        *,
        mechanism: str = "ddg",
        bits: int = 16,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = 1.0,
        beta: float = DEFAULT_BETA,
        k_stddevs: float | None = None,
        dropout_rate: float = 0.0,
        neighbours: int | None = None,
        min_survivors: int = 2,
    ) -> None:
        self.noise: DistributedNoise = distributed_noise(mechanism)
        if not isinstance(bits, int) or not 2 <= bits <= 40:
            raise ValueError(f"strategy.bits: an integer in [2, 40], got {bits!r}")
        if not clip_norm > 0:
            raise ValueError(f"strategy.clip_norm: must be > 0, got {clip_norm}")
        if noise_multiplier is not None and not noise_multiplier > 0:
            raise ValueError(f"strategy.noise_multiplier: must be > 0, got {noise_multiplier}")
        rounded_l2_bound(1.0, beta, 1)  # validates β
        if k_stddevs is not None and not k_stddevs > 0:
            raise ValueError(f"strategy.k_stddevs: must be > 0, got {k_stddevs}")
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"strategy.dropout_rate: must be in [0, 1), got {dropout_rate}")
        if neighbours is not None and neighbours < 1:
            raise ValueError(f"strategy.neighbours: must be ≥ 1 or null, got {neighbours}")
        if min_survivors < 1:
            raise ValueError(f"strategy.min_survivors: must be ≥ 1, got {min_survivors}")
        self.mechanism = self.noise.name
        self.bits = bits
        self.clip_norm = float(clip_norm)
        self.noise_multiplier: float | None = (
            None if noise_multiplier is None else float(noise_multiplier)
        )
        self.beta = float(beta)
        self.k_stddevs = K_STDDEVS.get(self.mechanism, 4.0) if k_stddevs is None else k_stddevs
        self.dropout_rate = float(dropout_rate)
        self.neighbours = neighbours
        self.min_survivors = int(min_survivors)
        self.dim = 0
        self.padded = 0
        self.expected_clients = 0.0
        self.split_probability = 0.0
        """P(a round of the expected cohort aborts for a split survivors' graph)."""
        self.scale = 0.0
        self._round_cache: dict[str, Any] = {}

    # -- set-up ------------------------------------------------------------------------------
    def setup(self, spec: CohortSpec) -> None:
        """Fixes d, the expected cohort size m and the scale s (Eq. 61 heuristic)."""
        sampling = spec.sampling
        if sampling.mode == "cyclic":
            raise ValueError(
                "model.sampling: distributed DP is accounted for Poisson or fixed-size cohorts, "
                "not cyclic ones"
            )
        dim = int(getattr(spec, "num_parameters", 0))
        if dim <= 0:
            raise ValueError("strategy: distributed DP needs the model's parameter count")
        self.dim = dim
        self.padded = padded_dimension(dim)
        self.expected_clients = sampling.rate * sampling.population
        self.split_probability = self._warn_split()
        calibrated = self.noise_multiplier is None
        if calibrated:
            self.noise_multiplier = self._calibrate(spec)
        # a calibrated σ meets its target at these bits (or the calibration refused it)
        self._refuse_useless(spec, check_bits=not calibrated)
        assert self.noise_multiplier is not None
        self.scale = self._scale_for(self.noise_multiplier)

    def _warn_split(self) -> float:
        """The probability that a round of the expected cohort aborts for a split survivors'
        graph (``privacy/distributed/secagg/connectivity.py``), said before any work when it is
        not small."""
        m = max(round(self.expected_clients), 1)
        p = split_probability(m, self.neighbours, self.dropout_rate)
        if p >= SPLIT_WARNING:
            k = fewest_neighbours(m, self.dropout_rate, at_most=SPLIT_WARNING)
            if 1.0 - p < MIN_AGGREGATE_PROBABILITY:  # the run could release (almost) nothing
                raise ValueError(
                    f"strategy.neighbours: {self.neighbours} at strategy.dropout_rate "
                    f"{self.dropout_rate:g} splits the survivors' masking graph in {100 * p:.3g} % "
                    f"of rounds of {m} clients, and a split round releases nothing (Bell et al. "
                    f"2020); {k} neighbours keep it under {100 * SPLIT_WARNING:g} %"
                )
            log.warning(
                "strategy.neighbours: %s at strategy.dropout_rate %g splits the survivors' "
                "masking graph in %.3g %% of rounds of %d clients; those rounds abort (nothing "
                "released, nothing spent: each part could be unmasked on its own, Bell et al. "
                "2020); %d neighbours keep it under %g %%",
                self.neighbours, self.dropout_rate, 100 * p, m, k, 100 * SPLIT_WARNING,
            )  # fmt: skip
        return p

    def _scale_for(self, sigma: float, bits: int | None = None) -> float:
        """s of the Eq. 61 heuristic for σ on the expected cohort (a field of ``bits``, by
        default the configured one)."""
        return heuristic_scale(
            local_std=sigma * self.clip_norm / math.sqrt(self.expected_clients),
            clip_norm=self.clip_norm,
            bits=self.bits if bits is None else bits,
            clients=self.expected_clients,
            dim=self.padded,
            k=self.k_stddevs,
        )

    def _plan(
        self, spec: CohortSpec
    ) -> tuple[list[tuple[int, float]], Callable[[float, int], DistributedNoiseEvent]]:
        """A round's planned survivors (:func:`survivor_distribution`) and its event at σ in a
        field of b bits (the expected survivors; the plan replaces them)."""
        sampling = spec.sampling
        trials, survive, _ = self._survivor_binomial(spec)
        survivors = survivor_distribution(trials, survive, min_survivors=self.min_survivors)
        expected = max(1, round(self.expected_clients * (1.0 - self.dropout_rate)))

        def event_at(sigma: float, bits: int) -> DistributedNoiseEvent:
            scale = self._scale_for(sigma, bits)
            variance = (sigma * self.clip_norm * scale) ** 2 / self.expected_clients
            return DistributedNoiseEvent(
                self.mechanism, self.clip_norm, scale, variance, expected, self.padded,
                self.beta, bits, sampling.rate if sampling.mode == "poisson" else 1.0,
                sampling.without_replacement, round(self.expected_clients),
            )  # fmt: skip

        return survivors, event_at

    def _survivor_binomial(self, spec: CohortSpec) -> tuple[int, float, str]:
        """(trials, P(survive), the cohort in words) of a round's survivors."""
        sampling = spec.sampling
        stays = 1.0 - self.dropout_rate
        if sampling.mode == "poisson":  # cohort ~ Binomial(N, q), each survives w.p. 1 − r
            words = (
                f"Poisson cohorts of about {self.expected_clients:g} of "
                f"{sampling.population} clients"
            )
            return sampling.population, sampling.rate * stays, words
        m = round(self.expected_clients)  # a fixed cohort of m
        return m, stays, f"cohorts of {m} clients"

    def _calibrate(self, spec: CohortSpec) -> float:
        """σ for the run's target over its planned rounds (planned survivors a round)."""
        privacy = getattr(spec, "privacy", None)
        survivors, event_at = self._plan(spec)
        rounds = int(getattr(spec, "rounds", 1))
        target = None if privacy is None else privacy.epsilon
        sigma = calibrate_distributed_sigma(
            lambda sigma: event_at(sigma, self.bits),
            rounds=rounds,
            target_epsilon=target,
            delta=1e-5 if privacy is None else privacy.delta,
            survivors=survivors,
        )
        calibrated = getattr(spec, "calibrated", None)
        if (
            calibrated is not None
        ):  # the σ is bound to the planned horizon (privacy/accounting/horizon.py)
            calibrated.append(
                f"distributed σ calibrated so that {rounds} rounds spend ε = {target} with the "
                "planned survivors"
            )
        return sigma

    def _refuse_useless(self, spec: CohortSpec, *, check_bits: bool) -> None:
        """``ValueError`` naming the field when the run can release nothing useful
        (``privacy/distributed/release_check.py``): rounds that (almost) never reach
        ``min_survivors``, or a field too narrow for the planned noise."""
        trials, survive, words = self._survivor_binomial(spec)
        problem = survivors_problem(
            trials=trials, survive=survive, stays=1.0 - self.dropout_rate,
            min_survivors=self.min_survivors, dropout_rate=self.dropout_rate, cohort=words,
        )  # fmt: skip
        if problem:
            raise ValueError(problem)
        privacy = getattr(spec, "privacy", None)
        rounds = int(getattr(spec, "rounds", 1))
        if privacy is None or rounds < 1 or not check_bits:
            return
        _, event_at = self._plan(spec)
        sigma = self.noise_multiplier
        assert sigma is not None

        def epsilon_at(bits: int) -> float:  # rounds of the expected survivors: a comparison
            return distributed_epsilon([event_at(sigma, bits)] * rounds, privacy.delta)

        problem = bits_problem(epsilon_at, bits=self.bits, target=privacy.epsilon, rounds=rounds)
        if problem:
            raise ValueError(problem)

    @property
    def local_variance(self) -> float:
        """Each client's noise variance on the integer grid: (σCs)²/m."""
        assert self.noise_multiplier is not None
        return (self.noise_multiplier * self.clip_norm * self.scale) ** 2 / self.expected_clients

    # -- the round's public randomness ------------------------------------------------------
    def _round(self, ctx: RoundContext) -> dict[str, Any]:
        """The round's shared signs, keys, masking graph and survivors (cached per round)."""
        key = (ctx.seed, ctx.round_idx, tuple(ctx.cohort))
        if self._round_cache.get("key") != key:
            keys = RoundKeys(int(ctx.seed), int(ctx.round_idx))
            signs = rotation_signs(
                self.padded, generator=generator_for(ctx.seed, ctx.round_idx, "secagg_rotation")
            )
            roster = sorted(int(c) for c in ctx.cohort)
            self._round_cache = {
                "key": key,
                "keys": keys,
                "signs": signs,
                "graph": masking_graph(roster, self.neighbours, keys=keys),
                "survivors": self.survivors(ctx),
            }
        return self._round_cache

    def arrivals(self, ctx: RoundContext) -> tuple[list[int], int]:
        """The dispatched clients that do not drop (the simulated dropouts, module docstring)
        and the number of connected components of the masking graph among them."""
        roster = sorted(int(c) for c in ctx.cohort)
        arrived = roster
        if self.dropout_rate > 0 and roster:
            g = generator_for(ctx.seed, ctx.round_idx, "secagg_dropout")
            stays = (
                torch.rand(len(roster), generator=g, dtype=torch.float64, device=g.device)
                >= self.dropout_rate
            )
            arrived = [c for c, s in zip(roster, stays.tolist(), strict=True) if s]
        if self.neighbours is None:  # pairwise masks with everyone: one component
            return arrived, int(bool(arrived))
        keys = RoundKeys(int(ctx.seed), int(ctx.round_idx))
        parts = survivor_components(masking_graph(roster, self.neighbours, keys=keys), arrived)
        return arrived, len(parts)

    def survivors(self, ctx: RoundContext) -> list[int]:
        """The dispatched clients whose masked upload arrives and is unmasked: none (SecAgg
        aborts) when fewer than ``min_survivors`` arrive or when their masking graph is split
        into several components (each would be unmasked on its own)."""
        arrived, components = self.arrivals(ctx)
        if len(arrived) < self.min_survivors or components > 1:
            return []
        return arrived

    # -- on the client -----------------------------------------------------------------------
    def clip(self, update: ClientUpdate) -> ClientUpdate:
        """Δ ← Δ·min(1, C/‖Δ‖₂), in place (its norm is not reported: the server must not
        see per-client statistics)."""
        clip_by_l2_norm_(update.delta, self.clip_norm)
        return update

    def encode(
        self,
        delta: torch.Tensor,
        ctx: RoundContext,
        *,
        generator: torch.Generator,
        noise: bool = True,
    ) -> torch.Tensor:
        """The clipped delta on the integer grid with the client's noise share, not wrapped:
        rotate, scale, round (β), add noise (module docstring). ``noise=False``: without the
        share (a crafted client's upload, ``attacks/canaries.py``: the round is priced with
        the real survivors' noise only)."""
        r = self._round(ctx)
        scaled = rotate(delta.detach().cpu(), r["signs"]) * self.scale
        bound = rounded_l2_bound(self.clip_norm * self.scale, self.beta, self.padded)
        rounded = conditional_round(scaled, bound, generator=generator)
        if not noise:
            return rounded
        return rounded + self.noise.sample(self.padded, self.local_variance, generator=generator)

    def on_client(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """The client's whole upload path: clip, encode with noise, mask. ``update.delta``
        becomes the masked int64 vector; the clipped delta is not kept."""
        self.clip(update)
        cpu = torch.Generator().manual_seed(int(generator.initial_seed()))
        encoded = self.encode(update.delta, ctx, generator=cpu)
        r = self._round(ctx)
        client = SecAggClient(update.client_id, keys=r["keys"], graph=r["graph"], bits=self.bits)
        update.delta = client.mask(encoded).vector
        return update

    def deliver(self, update: ClientUpdate, ctx: RoundContext) -> ClientUpdate | None:
        """What reaches the server: the masked vector of a survivor, with no loss (NaN),
        example count (0), metric or extra of the client (its DP-SGD steps, if any, stay for
        the record-level accountant); nothing of a client that dropped or of an aborted round
        (None)."""
        if int(update.client_id) not in set(self._round(ctx)["survivors"]):
            return None
        return ClientUpdate(
            client_id=update.client_id,
            delta=update.delta,
            num_examples=0,
            loss=math.nan,
            dp_steps=list(update.dp_steps),
            base_round=update.base_round,
        )

    @property
    def server_view(self) -> ServerView:
        """Secure sums: masked uploads and reveals only (``privacy/guarantee/server_view.py``)."""
        return ServerView("secure sums", per_client_values=False, bits=self.bits)

    # -- on the server -----------------------------------------------------------------------
    def partial(self, updates: Any, ctx: RoundContext) -> torch.Tensor:
        """This process's modular sum of the surviving uploads (float64, integer-valued)."""
        survivors = set(self._round(ctx)["survivors"])
        server = SecAggServer(self.bits, self.padded)
        for update in updates:
            if update.client_id in survivors:  # a dropped client's upload never arrives
                server.receive(MaskedUpload(update.client_id, update.delta))
        return server.total.to(device=ctx.global_params.device, dtype=torch.float64)

    def release(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """Unmask the all-process sum with the survivors' reveals, decode, divide by m."""
        r = self._round(ctx)
        survivors = r["survivors"]
        arrived, components = self.arrivals(ctx)
        observed = {
            "secagg_survivors": float(len(survivors)),
            "secagg_dropped": float(len(ctx.cohort) - len(arrived)),
            "secagg_aborted": float(not survivors),
            "secagg_split": float(components > 1 and len(arrived) >= self.min_survivors),
        }
        device = ctx.global_params.device
        if not survivors:  # aborted: nothing released (the run counts it, server/module.py)
            return torch.zeros_like(ctx.global_params), {**observed, "round_aborted": 1.0}
        reveals = [
            SecAggClient(u, keys=r["keys"], graph=r["graph"], bits=self.bits).reveal(survivors)
            for u in survivors
        ]
        server = SecAggServer(self.bits, self.padded)
        total = server.unmask(reduced.to(torch.int64).cpu(), reveals)
        summed = center(total, self.bits).to(torch.float64) / self.scale
        delta = unrotate(summed, r["signs"], self.dim) / ctx.expected_cohort_size
        return delta.to(device=device, dtype=ctx.global_params.dtype), observed

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One distributed-DP round priced with the survivors' noise."""
        sampling = ctx.cohort_sampling()
        members = tuple(self.survivors(ctx))
        event = DistributedNoiseEvent(
            mechanism=self.mechanism,
            clip_norm=self.clip_norm,
            scale=self.scale,
            local_variance=self.local_variance,
            survivors=len(members),
            dim=self.padded,
            beta=self.beta,
            bits=self.bits,
            sample_rate=sampling.rate if sampling.mode == "poisson" else 1.0,
            replace_one=sampling.without_replacement,
            cohort=len(ctx.cohort),
            members=members,
        )
        return RoundPrivacy(distributed=[event])

    def state_dict(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier, "scale": self.scale}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]
        self.scale = float(state_dict.get("scale", self.scale))


__all__ = ["DEFAULT_BETA", "SecAggDistributedDP"]
