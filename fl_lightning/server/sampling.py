"""Cohort sampling: the clients of a round, drawn from a generator keyed by (seed, round).

The sampler also tells the accountant how it sampled (:meth:`CohortSampler.sampling`), so a
client-level event always matches what was done: Poisson cohorts are accounted as Poisson
subsampling (add/remove one client), fixed-size cohorts as sampling without replacement
(replace-one client). ``auto`` (the default) picks Poisson for strategies whose client-level
noise is amplified by sampling (their accounting is tight under Poisson, as in Opacus and pfl)
and fixed-size cohorts for every other run, where the cohort's size is part of the paper's
setting and sampling does not enter the accounting. ``cyclic`` shuffles the clients once (keyed
by the seed) into ⌊N/m⌋ blocks of m and takes them in turn, so every client takes part every
b = ⌊N/m⌋ rounds: the min-separated participation DP-FTRL's accounting assumes (Kairouz et al.
2021; Choquette-Choo et al. 2023); the N mod m clients left over never take part.
``cyclic_poisson`` takes the same blocks in turn but keeps each client of the round's block
independently with probability q (``model.client_rate``): the cyclic Poisson sampling of
Choquette-Choo et al. 2023 (arXiv:2306.08153) under which banded DP-FTRL is amplified.
"""

from __future__ import annotations

from typing import Literal

import torch

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.utils.rng import generator_for


class CohortSampler:
    """Draws each round's cohort.

    Args:
        mode: ``fixed`` (m clients without replacement), ``poisson`` (each client with
            probability ``rate`` independently), ``cyclic`` (blocks of m in turn) or ``auto``
            (resolved by :meth:`resolve`).
        clients_per_round: m for ``fixed``; for ``poisson`` without a ``rate``, the expected
            cohort size (q = m/N).
        rate: q for ``poisson``.
    """

    def __init__(
        self,
        mode: Literal["auto", "fixed", "poisson", "cyclic", "cyclic_poisson"] = "auto",
        clients_per_round: int = 10,
        rate: float | None = None,
    ) -> None:
        if mode not in ("auto", "fixed", "poisson", "cyclic", "cyclic_poisson"):
            raise ValueError(
                "model.sampling: expected 'auto', 'fixed', 'poisson', 'cyclic' or "
                f"'cyclic_poisson', got {mode!r}"
            )
        if clients_per_round < 1:
            raise ValueError(f"model.clients_per_round: must be >= 1, got {clients_per_round}")
        if rate is not None and not 0.0 < rate <= 1.0:
            raise ValueError(f"model.client_rate: must be in (0, 1], got {rate}")
        self.mode = mode
        self.clients_per_round = clients_per_round
        self.rate = rate

    def resolve(self, *, amplified_by_sampling: bool) -> str:
        """Fixes ``auto``: Poisson when the strategy's client-level noise is amplified by
        sampling, else fixed-size cohorts. Returns the mode in use."""
        if self.mode == "auto":
            self.mode = "poisson" if amplified_by_sampling else "fixed"
        return self.mode

    def sampling(self, num_clients: int) -> CohortSampling:
        """How this sampler draws cohorts from ``num_clients``, for the accountant."""
        if self.mode == "cyclic_poisson":
            return CohortSampling(
                "cyclic_poisson", self.sample_rate(num_clients), num_clients,
                block=min(self.clients_per_round, num_clients),
            )  # fmt: skip
        mode: Literal["poisson", "fixed", "cyclic"] = (
            self.mode if self.mode in ("fixed", "cyclic") else "poisson"  # type: ignore[assignment]
        )
        return CohortSampling(mode, self.sample_rate(num_clients), num_clients)

    def check_population(self, num_clients: int) -> None:
        # m is the cohort size (fixed, cyclic) or the expected one (Poisson without a rate)
        uses_m = self.mode in ("fixed", "cyclic", "cyclic_poisson") or self.rate is None
        if uses_m and self.clients_per_round > num_clients:
            raise ValueError(
                f"model.clients_per_round: {self.clients_per_round} exceeds the number of "
                f"clients ({num_clients})"
            )

    def sample_rate(self, num_clients: int) -> float:
        """q: Poisson's rate; ``cyclic_poisson``'s rate within the round's block (1 without
        ``model.client_rate``); m/N for fixed and cyclic cohorts."""
        if self.mode == "cyclic_poisson":
            return 1.0 if self.rate is None else float(self.rate)
        if self.mode not in ("fixed", "cyclic") and self.rate is not None:
            return float(self.rate)
        return min(1.0, self.clients_per_round / num_clients)

    def expected_size(self, num_clients: int) -> float:
        if self.mode == "cyclic_poisson":
            return self.sample_rate(num_clients) * min(self.clients_per_round, num_clients)
        return self.sample_rate(num_clients) * num_clients

    def sample(self, seed: int, round_idx: int, num_clients: int) -> list[int]:
        if self.mode in ("cyclic", "cyclic_poisson"):
            m = self.clients_per_round
            blocks = max(1, num_clients // m)
            g = generator_for(seed, "cyclic_cohorts")
            order = torch.randperm(num_clients, generator=g, device=g.device)
            start = (round_idx % blocks) * m
            block = order[start : start + m]
            if self.mode == "cyclic_poisson":  # each client of the block with probability q
                coins = generator_for(seed, round_idx, "cohort")
                rate = self.sample_rate(num_clients)
                keep = torch.rand(len(block), generator=coins, device=coins.device) < rate
                block = block[keep.to(block.device)]
            return sorted(int(c) for c in block)
        g = generator_for(seed, round_idx, "cohort")
        if self.mode != "poisson":
            chosen = torch.randperm(num_clients, generator=g, device=g.device)[
                : self.clients_per_round
            ]
        else:
            rate = self.sample_rate(num_clients)
            chosen = (
                (torch.rand(num_clients, generator=g, device=g.device) < rate).nonzero().squeeze(1)
            )
        return sorted(int(c) for c in chosen)
