"""How each registered strategy is run by the contract tests (``test_contracts.py``).

A strategy that runs with its defaults on the tiny federation below needs no entry: the
contracts pick up every class ``registered_strategies()`` lists, so a new strategy file is
tested the day it lands. An entry says what a strategy needs beyond its defaults (a budget, a
clip norm, DP-SGD clients, cyclic cohorts) and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.strategies.adp_fl import ADPFL
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.dp_ftrl import DPFTRL
from fl_lightning.strategies.dpfl_agn import DPFLAGN
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.fedsmp import FedSMP
from fl_lightning.strategies.nbafl import NbAFL
from fl_lightning.testing import Simulation, registered_strategies

NUM_CLIENTS = 6
FEATURES = 8
CLASSES = 3


@dataclass(frozen=True)
class Case:
    """One strategy as the contracts run it.

    Args:
        build: a fresh strategy.
        dp_sgd: the clients train with DP-SGD (σ = 1, C = 1): record-level events join the
            round's price.
        options: further ``Simulation`` options (``sampling``, ...).
    """

    build: Callable[[], Strategy]
    dp_sgd: bool = False
    options: dict[str, Any] = field(default_factory=dict)


# Beyond the defaults: what each strategy needs to run (and be private) on the federation.
NEEDS: dict[str, Case] = {
    # the total budget ε of every client's uploads is required (no default); the schedule's
    # own first budget (N·ε/(n·E) times its factor) exceeds any ε over 2-3 rounds of 3 of 6
    # clients, so each upload's ε is given
    "ADPFL": Case(lambda: ADPFL(epsilon=4.0, upload_epsilon=1.0)),
    # DPFL-AGN's noise is DP-SGD's: it refuses clients without it
    "DPFLAGN": Case(DPFLAGN, dp_sgd=True),
    # DP-FTRL's tree/matrix noise needs min-separated participation
    "DPFTRL": Case(DPFTRL, options={"sampling": "cyclic"}),
    # no target ε to calibrate σ to: σ given
    "FedSMP": Case(lambda: FedSMP(noise_multiplier=1.0)),
    # the clip norm has no default (the paper's C is per task)
    "NbAFL": Case(lambda: NbAFL(clip_norm=1.0, epsilon=1.0)),
}

# Extra cases beside the registry's: record-level DP-SGD priced before the round.
EXTRA: dict[str, Case] = {"FedAvg+DP-SGD": Case(FedAvg, dp_sgd=True)}


def case_names() -> list[str]:
    return [cls.__name__ for cls in registered_strategies()] + sorted(EXTRA)


def case(name: str) -> Case:
    if name in EXTRA:
        return EXTRA[name]
    if name in NEEDS:
        return NEEDS[name]
    (cls,) = [c for c in registered_strategies() if c.__name__ == name]
    return Case(cls)


def federation() -> FederatedDataModule:
    """Six clients of a 3-class Gaussian-cluster problem, with a server validation split
    (DPFL-AGN's noise decay and ADP-FL's accuracy check read it)."""
    data = FederatedDataModule(
        "synthetic",
        num_clients=NUM_CLIENTS,
        val_fraction=0.2,
        dataset_options={"num_examples": 150, "num_features": FEATURES, "num_classes": CLASSES},
    )
    data.setup("fit")
    return data


def client(dp_sgd: bool) -> ClientModule:
    torch.manual_seed(0)
    return ClientModule(
        MLP(input_dim=FEATURES, hidden=(8,), num_classes=CLASSES),
        num_classes=CLASSES,
        lr=0.1,
        local_steps=2,
        batch_size=8,
        dp_sgd=DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0) if dp_sgd else None,
    )


def simulation(name: str, data: Any, *, rounds: int = 2, **options: Any) -> Simulation:
    """A fresh simulation of case ``name``: a new strategy, client and RDP accountant, three
    clients a round."""
    c = case(name)
    logging.disable(logging.WARNING)  # σ-versus-target notes and the like: not under test
    try:
        return Simulation(
            c.build(),
            data,
            client=client(c.dp_sgd),
            rounds=rounds,
            privacy=PrivacyAccountant("rdp", 1e-5),
            clients_per_round=3,
            **(c.options | options),
        )
    finally:
        logging.disable(logging.NOTSET)
