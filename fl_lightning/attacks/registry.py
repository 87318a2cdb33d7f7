"""Membership-inference attacks by name: ``register_attack`` / ``get_attack`` (one registry
pattern, as Opacus registers its accountants and grad samplers).

Every attack has one signature, :class:`MembershipAttack`: the trained target network, the
audit split, the bank of shadow runs, the accountant's δ, a seed and the audit's
:class:`AttackSettings` (the knobs only some attacks read). An attack module registers an
adapter from that signature to its own function at import; ``AuditCallback`` asks the registry
by name instead of an if-chain. A new attack is one module with one ``@register_attack``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from fl_lightning.attacks.metrics import MIAResult
    from fl_lightning.attacks.pipeline import AuditSplit
    from fl_lightning.attacks.shadows import ShadowBank


@dataclass(frozen=True)
class AttackSettings:
    """The audit's settings that some attacks read.

    Args:
        threshold_score: ``loss`` (Yeom et al.) or ``confidence``, for ``threshold``.
        shadow_models: k shadow runs, for ``lira``.
        series: the target's per-round true-class confidences (members, then non-members),
            recorded during ``fit``, for ``cs_mia``; None when there was no recording.
    """

    threshold_score: Literal["loss", "confidence"] = "loss"
    shadow_models: int = 4
    series: np.ndarray | None = None


class MembershipAttack(Protocol):
    def __call__(
        self,
        target: torch.nn.Module,
        split: AuditSplit,
        bank: ShadowBank,
        *,
        delta: float,
        seed: int,
        settings: AttackSettings,
    ) -> MIAResult: ...


_ATTACKS: dict[str, MembershipAttack] = {}


def register_attack(
    name: str, *, force: bool = False
) -> Callable[[MembershipAttack], MembershipAttack]:
    """Decorator: registers ``attack`` under ``name``. A second registration of a name raises
    ``ValueError`` unless ``force=True`` (which replaces it)."""

    def register(attack: MembershipAttack) -> MembershipAttack:
        if name in _ATTACKS and not force:
            raise ValueError(
                f"audit.attacks: an attack named {name!r} is already registered "
                "(register_attack(..., force=True) replaces it)"
            )
        _ATTACKS[name] = attack
        return attack

    return register


def get_attack(name: str) -> MembershipAttack:
    """The attack registered under ``name``; ``ValueError`` naming the known ones otherwise."""
    if name not in _ATTACKS:
        raise ValueError(f"audit.attacks: unknown attack {name!r}; choose from {sorted(_ATTACKS)}")
    return _ATTACKS[name]


def registered_attacks() -> list[str]:
    return sorted(_ATTACKS)
