"""The local-DP mechanisms by name (Opacus-style registry: ``register_local_mechanism`` /
``make_local_mechanism``), so that ``ldp.py``, which holds their base class, never imports the
subclasses (that import made a seven-module circle; review P8).

The built-in names are registered at import time of this module. A user's mechanism is one call
away: ``register_local_mechanism("mine", lambda *, epsilon, variant, delta: Mine(epsilon))``,
after which ``strategy.mechanism: mine`` works in any local-DP strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from fl_lightning.privacy.mechanisms import duchi, hm, ldp_fl, pm, pnpm, spm
from fl_lightning.privacy.mechanisms.ldp import LocalGaussian, LocalLaplace, LocalMechanism


class MechanismBuilder(Protocol):
    def __call__(self, *, epsilon: float, variant: str, delta: float) -> LocalMechanism: ...


_BUILDERS: dict[str, MechanismBuilder] = {}


def register_local_mechanism(name: str, builder: MechanismBuilder, *, force: bool = False) -> None:
    """Makes ``name`` buildable by :func:`make_local_mechanism`; a taken name needs ``force``."""
    if name in _BUILDERS and not force:
        raise ValueError(f"local mechanism {name!r} is already registered (pass force=True)")
    if name == "none":
        raise ValueError("local mechanism name 'none' is reserved (no mechanism)")
    _BUILDERS[name] = builder


def local_mechanism_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(_BUILDERS)


def make_local_mechanism(
    name: str, *, epsilon: float, variant: str = "published", delta: float = 1e-5
) -> LocalMechanism:
    """Builds a registered mechanism (``variant`` is read by SPM only, ``delta`` by Gaussian)."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"strategy.mechanism: unknown {name!r}; choose from {list(local_mechanism_names())}"
        )
    return builder(epsilon=epsilon, variant=variant, delta=delta)


def _ignoring_variant(cls: Callable[..., LocalMechanism]) -> MechanismBuilder:
    def build(*, epsilon: float, variant: str, delta: float) -> LocalMechanism:
        return cls(epsilon=epsilon)

    return build


def _spm(*, epsilon: float, variant: str, delta: float) -> LocalMechanism:
    return spm.SymmetricPiecewiseMechanism(epsilon=epsilon, variant=variant)


def _gaussian(*, epsilon: float, variant: str, delta: float) -> LocalMechanism:
    return LocalGaussian(epsilon=epsilon, delta=delta)


register_local_mechanism("spm", _spm)
register_local_mechanism("pnpm", _ignoring_variant(pnpm.PNPMReconstructed))
register_local_mechanism("pm", _ignoring_variant(pm.PiecewiseMechanism))
register_local_mechanism("duchi", _ignoring_variant(duchi.DuchiMechanism))
register_local_mechanism("hm", _ignoring_variant(hm.HybridMechanism))
register_local_mechanism("ldp_fl", _ignoring_variant(ldp_fl.LDPFLMechanism))
register_local_mechanism("laplace", _ignoring_variant(LocalLaplace))
register_local_mechanism("gaussian", _gaussian)
