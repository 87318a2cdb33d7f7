"""The ``Strategy`` interface stays narrow (issue 18, review P4: 29 members before).

The base class's own members are pinned here: a new hook or declaration is a decision to write
into docs/architecture.md ("The layers now"), not an accident. ``traits`` is the one
declaration the server reads before round 0, and each strategy that changes it says so.
"""

from __future__ import annotations

import inspect

import pytest

from fl_lightning.privacy.guarantee.observers import ServerSees
from fl_lightning.strategies.base import Strategy, StrategyTraits
from fl_lightning.strategies.cpsgd import CPSGD
from fl_lightning.strategies.ddp_fedavg import DDPFedAvg
from fl_lightning.strategies.dp_fedasgp import DPFedASGP
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.dpfl_agn import DPFLAGN
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.fedsmp import FedSMP
from fl_lightning.strategies.nbafl import NbAFL
from tests.server.test_ddp_client_state import UnsyncedAdam

HOOKS = {
    "setup_federation",
    "select_clients",
    "configure_round",
    "configure_client",
    "process_update",
    "deliver",
    "aggregate",
    "partial_aggregate",
    "finalize",
    "round_privacy",
    "after_round",
    "evaluation_models",
}
DECLARATIONS = {"reduction", "traits", "server_view"}
# Python's and Lightning's: the constructor, the reduction check at class definition, and the
# Callback's checkpoint pair.
PLUMBING = {"__init__", "__init_subclass__", "state_dict", "load_state_dict"}


def test_the_base_class_has_only_the_documented_members():
    own = {name for name in vars(Strategy) if not (name.startswith("__") and name.endswith("__"))}
    own |= {"__init__", "__init_subclass__"} & set(vars(Strategy))
    assert own == HOOKS | DECLARATIONS | PLUMBING


def test_every_hook_is_documented():
    missing = [h for h in HOOKS if not inspect.getdoc(getattr(Strategy, h))]
    assert missing == []


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (FedAvg(), StrategyTraits()),
        (DPFedAvg(noise_multiplier=1.0), StrategyTraits(True, True)),
        (FedSMP(noise_multiplier=1.0), StrategyTraits(True, True)),
        (DDPFedAvg(), StrategyTraits(True, True)),
        (DPFedASGP(), StrategyTraits(private=True)),
        (NbAFL(clip_norm=1.0), StrategyTraits(private=True)),
        (CPSGD(), StrategyTraits(private=True)),
        (
            DPFLAGN(adam_state="persist"),
            StrategyTraits(adaptive_noise="DPFL-AGN's ANR chooses σ_t from the released models"),
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Strategy) else "",
)
def test_traits_say_what_the_server_reads(strategy, expected):
    assert strategy.traits == expected


def test_unsynced_client_state_is_a_distributed_problem():
    problem = UnsyncedAdam().traits.distributed_problem
    assert problem is not None and "UnsyncedAdam keeps per-client optimizer state" in problem


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (FedAvg(), ServerSees.CLEAR),
        (DPFedAvg(noise_multiplier=1.0), ServerSees.CLEAR),
        (FedSMP(noise_multiplier=1.0), ServerSees.NOISED_UPLOADS),
        (NbAFL(clip_norm=1.0), ServerSees.NOISED_UPLOADS),
        (DDPFedAvg(), ServerSees.SECURE_SUM),
    ],
)
def test_the_server_is_priced_from_the_declared_view(
    strategy: Strategy, expected: ServerSees
) -> None:
    """The guarantee's pricing of the server (``ServerSees``) is read from the view the
    contract test checks (``Strategy.server_view``), not declared a second time."""
    assert ServerSees.of(strategy.server_view) == expected
