"""A run's set-up before any data moves (``FederatedModule.setup("fit")``, docs/architecture.md
step 1): the cohort sampling resolved for the strategy, every σ fixed from the privacy target,
and the strategy handed its one :class:`~fl_lightning.strategies.spec.FederationSpec`.

The order is the point: the clients' DP-SGD σ is calibrated first, so that
``FederationSpec.local`` states what the clients will run; the strategy calibrates its own σ in
``Strategy.setup_federation``, to the target the spec carries (``FederationSpec.privacy``,
``privacy_plan.py: privacy_target``). Nothing here reads the Lightning module, so when σ is
fixed does not depend on Lightning's hook order.
"""

from __future__ import annotations

from typing import Any

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.module import ClientModule
from fl_lightning.privacy.accountant import PrivacyAccountant
from fl_lightning.server.privacy_plan import (
    calibrate_client_noise,
    check_strategy_target,
    privacy_target,
)
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.spec import FederationSpec, PrivacyTarget, ServerOptimizerSpec
from fl_lightning.utils.flat import layer_slices, trainable_parameters


def set_up_federation(
    *,
    strategy: Strategy,
    client: ClientModule,
    accountant: PrivacyAccountant | None,
    sampler: CohortSampler,
    data: Any,
    global_net: torch.nn.Module,
    server: ServerOptimizerSpec,
    rounds: int,
    seed: int,
) -> None:
    """Resolves and checks the sampler, fixes the clients' DP-SGD σ (in
    ``client.training_config``) and sets the strategy up, its σ fixed to the target."""
    sampler.resolve(amplified_by_sampling=strategy.traits.amplified_by_sampling)
    sampler.check_population(data.num_clients)
    sampling = sampler.sampling(data.num_clients)
    sizes = tuple(int(n) for n in data.client_sizes().tolist())
    client.training_config = calibrate_client_noise(
        client.training_config,
        client_sizes=sizes,
        sampling=sampling,
        rounds=rounds,
        accountant=accountant,
    )
    target = privacy_target(accountant, sampling)
    check_strategy_target(strategy, target)
    spec = federation_spec(
        data,
        global_net,
        client.training_config,
        server,
        sizes=sizes,
        rounds=rounds,
        seed=seed,
        privacy=target,
    )
    strategy.setup_federation(spec)


def federation_spec(
    data: Any,
    global_net: torch.nn.Module,
    local: LocalTrainingConfig,
    server: ServerOptimizerSpec,
    *,
    sizes: tuple[int, ...],
    rounds: int,
    seed: int,
    privacy: PrivacyTarget,
) -> FederationSpec:
    """The federation as the strategy sees it (``strategies/spec.py``), before data moves."""
    return FederationSpec(
        num_clients=data.num_clients,
        num_parameters=sum(p.numel() for p in trainable_parameters(global_net)),
        local=local,
        client_sizes=sizes,
        layer_slices=layer_slices(global_net),
        server=server,
        rounds=rounds,
        seed=seed,
        has_validation_split=data.val is not None,
        global_model=global_net,
        client_data=data.client_data,
        privacy=privacy,
    )


__all__ = ["federation_spec", "set_up_federation"]
