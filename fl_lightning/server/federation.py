"""A run's set-up before any data moves (``FederatedModule.setup("fit")``, docs/architecture.md
step 1): the cohort sampling resolved for the strategy, every σ fixed from the privacy target,
and the strategy handed its one :class:`~fl_lightning.strategies.spec.FederationSpec`.

The order is the point: the clients' DP-SGD σ is calibrated first, so that
``FederationSpec.local`` states what the clients will run (the calibrated config is returned, a
value the module hands to the local loop and the round; the ``ClientModule``'s own
``training_config`` stays as configured); the strategy calibrates its own σ in
``Strategy.setup_federation``, to the target the spec carries (``FederationSpec.privacy``,
``privacy_plan.py: privacy_target``). Nothing here reads the Lightning module, so when σ is
fixed does not depend on Lightning's hook order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.module import ClientModule
from fl_lightning.privacy.accounting.horizon import PlannedHorizon
from fl_lightning.privacy.accounting.population import (
    large_delta,
    large_delta_note,
    large_delta_problem,
)
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server.privacy_plan import (
    calibrate_client_noise,
    check_strategy_target,
    privacy_target,
)
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.spec import (
    ClientData,
    FederationSpec,
    PrivacyTarget,
    ServerOptimizerSpec,
)
from fl_lightning.utils.flat import layer_slices, trainable_parameters


class SetUpOnce:
    """The federation's set-up for one fit, done once. The CLI does it before the Trainer
    starts (:meth:`before_fit`: before any logger, W&B run or directory exists, so that a
    refusal, a strategy's or a mechanism's, leaves nothing behind); ``setup("fit")``
    (:meth:`for_fit`) then uses that set-up for the same rounds instead of repeating it
    (calibration can take seconds); later fits set up afresh."""

    def __init__(self, set_up: Callable[[Any, int], LocalTrainingConfig]) -> None:
        self._set_up = set_up  # (data, rounds) -> the clients' config, its σ fixed
        self.local: LocalTrainingConfig | None = None  # None before the first set-up
        self._prepared_for: int | None = None

    def before_fit(self, data: Any, rounds: int) -> None:
        self.local = self._set_up(data, rounds)
        self._prepared_for = rounds

    def for_fit(self, data: Any, rounds: int) -> None:
        prepared, self._prepared_for = self._prepared_for, None
        if prepared != rounds:
            self.local = self._set_up(data, rounds)


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
) -> LocalTrainingConfig:
    """Resolves and checks the sampler, fixes the clients' DP-SGD σ and sets the strategy up,
    its σ fixed to the target; returns the clients' local-training config with that σ."""
    sampler.resolve(amplified_by_sampling=strategy.traits.amplified_by_sampling)
    from fl_lightning.strategies.dp_ftrl import DPFTRL  # noqa: PLC0415 (strategies import server)

    if sampler.mode == "cyclic_poisson" and not isinstance(strategy, DPFTRL):
        raise ValueError(
            "model.sampling: cyclic_poisson is the cyclic Poisson sampling of amplified banded "
            f"DP-FTRL (DPFTRL); {type(strategy).__name__} does not account for it; use 'fixed', "
            "'poisson' or 'cyclic'"
        )
    sampler.check_population(data.num_clients)
    sampling = sampler.sampling(data.num_clients)
    sizes = tuple(int(n) for n in data.client_sizes().tolist())
    check_delta_population(
        accountant, strategy, uses_dp_sgd=client.training_config.dp_sgd is not None, sizes=sizes
    )
    local = calibrate_client_noise(
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
        local,
        server,
        sizes=sizes,
        rounds=rounds,
        seed=seed,
        privacy=target,
    )
    strategy.setup_federation(spec)
    if accountant is not None:
        accountant.horizon = planned_horizon(
            strategy, spec, client_calibrated=local != client.training_config
        )
    return local


def planned_horizon(
    strategy: Strategy, spec: FederationSpec, *, client_calibrated: bool
) -> PlannedHorizon:
    """The run's planned rounds and what of its accounting is bound to them: the strategy's
    own (``StrategyTraits.horizon_bound``), a strategy σ calibrated over them
    (``FederationSpec.calibrated``) or the clients' DP-SGD σ calibrated over them."""
    reasons = [r for r in (strategy.traits.horizon_bound, *spec.calibrated) if r]
    if client_calibrated:
        reasons.append(
            f"client.dp_sgd.noise_multiplier calibrated so that {spec.rounds} rounds spend "
            f"ε = {spec.privacy.epsilon}"
        )
    return PlannedHorizon(spec.rounds, "; ".join(dict.fromkeys(reasons)) or None)


def client_unit_level(strategy: Strategy) -> str | None:
    """The level of the strategy's guarantee whose unit is a client (client-level noise on the
    aggregate, or local DP on every upload), or None when it privatises nothing."""
    if not strategy.traits.private:
        return None
    if strategy.central_dp is not None or strategy.traits.amplified_by_sampling:
        return "client-level"
    local = strategy.local_dp
    return "local" if local is not None and local.private else "per-client"


def check_delta_population(
    accountant: PrivacyAccountant | None,
    strategy: Strategy,
    *,
    uses_dp_sgd: bool,
    sizes: tuple[int, ...],
) -> None:
    """Refuses a ``privacy.delta`` of at least 1/N (a client-level or local guarantee, N
    clients) or 1/n (record-level DP-SGD, n the smallest client's examples):
    ``privacy/accounting/population.py``. With ``privacy.allow_large_delta`` the run goes on and the
    accountant's guarantee sentence states it. Raises ``ValueError`` naming the field."""
    if accountant is None:
        return
    nonempty = [(cid, n) for cid, n in enumerate(sizes) if n > 0]
    found = large_delta(
        accountant.delta,
        client_unit=client_unit_level(strategy),
        num_clients=len(sizes),
        record_unit=uses_dp_sgd,
        smallest_client=min(nonempty, key=lambda c: c[1]) if nonempty else None,
    )
    accountant.large_delta_note = None
    if found is None:
        return
    if not accountant.allow_large_delta:
        raise ValueError(large_delta_problem(accountant.delta, found))
    accountant.large_delta_note = large_delta_note(accountant.delta, found)


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
        client_data=named_client_data(data.client_data),
        privacy=privacy,
    )


def named_client_data(read: ClientData) -> ClientData:
    """``read`` (the data's ``client_data``) as the strategy gets it in
    ``FederationSpec.client_data``: a read that raises carries a note naming the client (a
    strategy that reads a client's data while planning the round, e.g. ADP-FL's accuracy
    check, then reports whose data failed; the round adds its own note)."""

    def client_data(client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return read(client_id)
        except Exception as err:
            err.add_note(f"client {client_id} failed: its data could not be read")
            raise

    return client_data


__all__ = [
    "check_delta_population",
    "client_unit_level",
    "federation_spec",
    "named_client_data",
    "set_up_federation",
]
