"""The distributed-noise mechanisms by name (as ``registry.py`` is for the local ones):
``register_distributed_noise`` / ``distributed_noise``. The built-in ``ddg`` and ``skellam``
are registered at import time of this module; a user's mechanism is one call away:
``register_distributed_noise(Mine())``, after which ``strategy.mechanism: mine`` works in
``DDPFedAvg`` and ``SecAggDistributedDP``.
"""

from __future__ import annotations

from fl_lightning.privacy.distributed.ddg import DistributedDiscreteGaussian
from fl_lightning.privacy.distributed.noise import DistributedNoise
from fl_lightning.privacy.distributed.skellam import DistributedSkellam

_REGISTRY: dict[str, DistributedNoise] = {}


def register_distributed_noise(noise: DistributedNoise, *, force: bool = False) -> None:
    """Makes ``noise`` usable as ``SecAggDistributedDP(mechanism=noise.name)``."""
    if not noise.name:
        raise ValueError("distributed noise: a registered mechanism needs a name")
    if noise.name in _REGISTRY and not force:
        raise ValueError(f"distributed noise {noise.name!r} is already registered (force=True)")
    _REGISTRY[noise.name] = noise


def distributed_noise(name: str) -> DistributedNoise:
    """The registered mechanism ``name`` (``ValueError`` naming the field when unknown)."""
    if name not in _REGISTRY:
        raise ValueError(f"strategy.mechanism: unknown {name!r}; choose from {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def distributed_noise_names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


register_distributed_noise(DistributedDiscreteGaussian())
register_distributed_noise(DistributedSkellam())


__all__ = ["distributed_noise", "distributed_noise_names", "register_distributed_noise"]
