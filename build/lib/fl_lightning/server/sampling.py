"""Cohort sampling: the clients of a round, drawn from a generator keyed by (seed, round)."""

from __future__ import annotations

from typing import Literal

import torch

from fl_lightning.utils.rng import generator_for


class CohortSampler:
    """Draws each round's cohort.

    Args:
        mode: ``fixed`` (m clients without replacement) or ``poisson`` (each client with
            probability ``rate`` independently).
        clients_per_round: m for ``fixed``.
        rate: q for ``poisson``.
    """

    def __init__(
        self,
        mode: Literal["fixed", "poisson"] = "fixed",
        clients_per_round: int = 10,
        rate: float | None = None,
    ) -> None:
        if mode not in ("fixed", "poisson"):
            raise ValueError(f"model.sampling: expected 'fixed' or 'poisson', got {mode!r}")
        if mode == "fixed" and clients_per_round < 1:
            raise ValueError(f"model.clients_per_round: must be >= 1, got {clients_per_round}")
        if mode == "poisson" and (rate is None or not 0.0 < rate <= 1.0):
            raise ValueError(f"model.client_rate: must be in (0, 1] for Poisson, got {rate}")
        self.mode = mode
        self.clients_per_round = clients_per_round
        self.rate = rate

    def check_population(self, num_clients: int) -> None:
        if self.mode == "fixed" and self.clients_per_round > num_clients:
            raise ValueError(
                f"model.clients_per_round: {self.clients_per_round} exceeds the number of "
                f"clients ({num_clients})"
            )

    def sample_rate(self, num_clients: int) -> float:
        return self.clients_per_round / num_clients if self.mode == "fixed" else float(self.rate)

    def expected_size(self, num_clients: int) -> float:
        return self.sample_rate(num_clients) * num_clients

    def sample(self, seed: int, round_idx: int, num_clients: int) -> list[int]:
        g = generator_for(seed, round_idx, "cohort")
        if self.mode == "fixed":
            chosen = torch.randperm(num_clients, generator=g)[: self.clients_per_round]
        else:
            chosen = (torch.rand(num_clients, generator=g) < self.rate).nonzero().squeeze(1)
        return sorted(int(c) for c in chosen)
