"""What a strategy is told about the federation, once, before any data moves.

The server builds one :class:`FederationSpec` in ``FederatedModule.setup("fit")`` and hands it to
:meth:`Strategy.setup_federation <fl_lightning.strategies.base.Strategy.setup_federation>`: the
population, the model's layout in the flat update vector, the clients' local-training settings,
the server optimizer and the privacy target (:class:`PrivacyTarget`). A strategy validates its
settings against it (raising ``ValueError`` that names the field) and derives what it needs
(its σ calibrated to the target, layer slices, the local learning rate that turns deltas into
pseudo-gradients). It never reads the Lightning module, so the moment a strategy is set up, and
so when its σ is fixed, does not depend on Lightning's hook order, and a unit test sets a
strategy up with a spec of a few fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.privacy.accounting.analysis import DEFAULT_ACCOUNTANT, calibrate_noise_multiplier
from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian

ClientData = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class ServerOptimizerSpec:
    """How the server applies the aggregate Δ as the pseudo-gradient −Δ (Reddi et al. 2021).

    SGD with lr 1 and no momentum adds Δ as it is (FedAvg); anything else is an adaptive or
    momentum server optimizer (FedAvgM, FedAdam).
    """

    name: Literal["sgd", "adam"] = "sgd"
    lr: float = 1.0
    momentum: float = 0.0

    @property
    def averages_models(self) -> bool:
        """True when the new global model is exactly the aggregate of the uploads."""
        return self.name == "sgd" and self.lr == 1.0 and self.momentum == 0.0

    def require_model_averaging(self, algorithm: str) -> None:
        """Raises ``ValueError`` naming ``model.server_optimizer`` unless the server averages
        models (ω = Σ p_j ω_j), which algorithms that aggregate *models* need."""
        if not self.averages_models:
            raise ValueError(
                f"model.server_optimizer: {algorithm} averages the uploaded models; use "
                "server_optimizer sgd, server_lr 1.0, server_momentum 0.0 (got "
                f"{self.name}, {self.lr}, {self.momentum})"
            )


@dataclass(frozen=True)
class PrivacyTarget:
    """What a strategy calibrates an unset noise multiplier to, in ``setup_federation``.

    Attributes:
        epsilon: ``privacy.target_epsilon`` (None: no target, so a σ must be given).
        delta: δ of the target.
        accountant: the accountant backend that reports (``rdp``, ``prv``, ``pld``), so that
            σ is calibrated on the accountant that will spend it.
        sampling: how cohorts are drawn (None: every client every round, e.g. in unit tests).
    """

    epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = DEFAULT_ACCOUNTANT
    sampling: CohortSampling | None = None

    def cohort_sampling(self, num_clients: int) -> CohortSampling:
        """The cohort sampling, full participation of ``num_clients`` when none was given."""
        return self.sampling or CohortSampling("fixed", 1.0, num_clients)


@dataclass(frozen=True)
class FederationSpec:
    """The federation a strategy runs in, fixed before the first round.

    Attributes:
        num_clients: N, the registered clients.
        num_parameters: d, the length of the flat update vector.
        local: the clients' local-training settings as configured (a DP-SGD noise multiplier
            left unset is calibrated afterwards from the privacy target).
        client_sizes: n_i of every client (empty when unknown, e.g. in unit tests).
        layer_slices: each trainable parameter's slice of the flat vector, in order.
        server: the server optimizer.
        rounds: the planned number of rounds (the Trainer's ``max_steps``).
        seed: the configured seed (``seed_everything``, public: it is in ``config.yaml``), for
            public choices only (ADP-FL's validation subset). Never key privacy noise or a
            cohort by it: those take ``RoundContext.seed``, the run's secret in
            ``privacy.secure_mode`` (``fl_lightning/testing/secrecy.py`` checks every strategy).
        has_validation_split: whether the server holds a validation split.
        global_model: the global model, updated in place by the server after every round
            (read it, never write it), for strategies that evaluate it (ADP-FL's λ).
        client_data: client i's training examples ``(x, y)``, on the run's device once
            training starts.
        privacy: the privacy target and cohort sampling every unset σ is calibrated to.
    """

    num_clients: int
    num_parameters: int
    local: LocalTrainingConfig = field(default_factory=LocalTrainingConfig)
    client_sizes: tuple[int, ...] = ()
    layer_slices: Mapping[str, slice] = field(default_factory=dict)
    server: ServerOptimizerSpec = field(default_factory=ServerOptimizerSpec)
    rounds: int = 1
    seed: int = 0
    has_validation_split: bool = False
    global_model: torch.nn.Module | None = field(default=None, compare=False, repr=False)
    client_data: ClientData | None = field(default=None, compare=False, repr=False)
    privacy: PrivacyTarget = field(default_factory=PrivacyTarget)
    calibrated: list[str] = field(default_factory=list, compare=False, repr=False)
    """What :meth:`cohort_noise_multiplier` calibrated over ``rounds`` (appended as it does):
    the run's accounting is then bound to its planned horizon
    (``privacy/accounting/horizon.py``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_slices", MappingProxyType(dict(self.layer_slices)))
        object.__setattr__(self, "client_sizes", tuple(int(n) for n in self.client_sizes))

    @property
    def min_client_size(self) -> int:
        """The smallest n_i (0 when the sizes are unknown)."""
        return min(self.client_sizes, default=0)

    @property
    def sampling(self) -> CohortSampling:
        """How cohorts are drawn (full participation when the spec does not say)."""
        return self.privacy.cohort_sampling(self.num_clients)

    def cohort_noise_multiplier(
        self, sigma: float | None, *, target_epsilon: float | None = None
    ) -> float:
        """σ of one client-level Gaussian a round on this federation's cohorts: ``sigma`` when
        given, else calibrated so that ``rounds`` rounds spend ``target_epsilon`` (default: the
        run's target) on the accountant that reports (``privacy/accounting/analysis.py``)."""
        if sigma is not None:
            return sigma
        target = self.privacy.epsilon if target_epsilon is None else target_epsilon
        self.calibrated.append(f"σ calibrated so that {self.rounds} rounds spend ε = {target}")
        rounds = [SampledGaussian.for_cohort(1.0, self.sampling, self.rounds)]
        return calibrate_noise_multiplier(
            [rounds],
            target_epsilon=target,
            delta=self.privacy.delta,
            accountant=self.privacy.accountant,
        )

    @property
    def uses_dp_sgd(self) -> bool:
        """Whether clients run sample-level DP-SGD."""
        return self.local.dp_sgd is not None

    def refuse_dp_sgd(self, why: str) -> None:
        """Raises ``ValueError`` naming ``client.dp_sgd`` when clients run DP-SGD, for an
        algorithm that privatises something else (``why``: what it privatises instead)."""
        if self.uses_dp_sgd:
            raise ValueError(f"client.dp_sgd: {why}; leave dp_sgd unset")


def local_lr_in_force(
    client_config: Mapping[str, Any], configured: float | None, *, field: str = "client.lr"
) -> float:
    """η_l in force this round: a per-round override (``Strategy.configure_round``) wins over
    the configured one; strategies that read deltas as pseudo-gradients −Δ/(η_l K) need it."""
    lr = client_config.get("lr", configured)
    if lr is None or lr <= 0:
        raise ValueError(f"{field}: a positive local learning rate is needed by this strategy")
    return float(lr)


__all__ = [
    "ClientData",
    "FederationSpec",
    "PrivacyTarget",
    "ServerOptimizerSpec",
    "local_lr_in_force",
]
