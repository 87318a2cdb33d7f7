"""The secrecy contract of ``privacy.secure_mode``: every generator that draws privacy noise or
a cohort is keyed by the run's secret, and by nothing in ``config.yaml``.

Every generator of a round comes from :func:`fl_lightning.utils.rng.derive_seed` (directly or
through ``generator_for``), its first key the run's noise seed: the configured seed in a
simulation, the secret drawn from the OS's entropy in secure mode (``server/module.py:
noise_seed``; :class:`~fl_lightning.testing.Simulation` draws it the same way). Whoever holds
``config.yaml`` of a run whose noise is keyed by the configured seed regenerates every draw, so
against them ε = ∞ (issue 46: DP-FTRL's matrix-mechanism noise was keyed by ``spec.seed``).

:func:`secrecy_problems` runs two secure-mode simulations of one configuration, recording the
keys of every generator derived on the way, and returns what breaks the contract:

* a generator whose first key is not the run's secret (unless its purpose is in
  :data:`PUBLIC_PURPOSES`: a draw that is neither noise nor a cohort);
* a secret equal to the configured seed, or two runs with one secret;
* two runs that release the same aggregate in every round (the same noise and cohorts; one round
  may agree by chance where no noise is added and the cohorts coincide).

It fails when the secret is replaced by the configured seed
(``tests/testing/test_secrecy_contract.py`` shows it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from fl_lightning.utils import rng

if TYPE_CHECKING:
    from fl_lightning.testing.simulation import Simulation

Keys = tuple[int | str, ...]

PUBLIC_PURPOSES = {
    # ADP-FL's accuracy check evaluates the global model on a fixed subset of the client's own
    # data, never released: which examples it reads is neither noise nor a cohort.
    "adp_fl_val",
}


@contextmanager
def recorded_generator_keys() -> Iterator[list[Keys]]:
    """Records the keys of every seed :func:`~fl_lightning.utils.rng.derive_seed` derives
    while the block runs (every ``fl_lightning`` module that imported it is patched)."""
    original = rng.derive_seed
    seen: list[Keys] = []

    def recording(*keys: int | str) -> int:
        seen.append(keys)
        return original(*keys)

    patched = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("fl_lightning") and getattr(m, "derive_seed", None) is original
    ]
    for m in patched:
        m.derive_seed = recording  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        for m in patched:
            m.derive_seed = original  # type: ignore[attr-defined]


def keyed_by_other(keys: list[Keys], secret: int) -> list[Keys]:
    """The recorded keys whose first key is not ``secret`` (public purposes left out)."""
    return [k for k in keys if k and k[0] != secret and str(k[-1]) not in PUBLIC_PURPOSES]


def secrecy_problems(
    make: Callable[[], Simulation], *, configured_seed: int, rounds: int = 2
) -> list[str]:
    """What two secure-mode runs of ``make()`` (built with ``seed=configured_seed`` and an
    accountant in ``secure_mode``) break of the contract (module docstring); empty when
    nothing."""
    problems: list[str] = []
    runs = []
    for _ in range(2):
        with recorded_generator_keys() as keys:
            sim = make()
            if not sim.secure_mode:
                return ["the simulation is not in privacy.secure_mode"]
            results = sim.run(rounds)
        secret = sim.noise_seed
        if secret == configured_seed:
            problems.append("the run's secret is the configured seed")
        other = keyed_by_other(keys, secret)
        if other:
            problems.append(
                f"{len(other)} generators keyed by something other than the secret, first "
                f"{other[0][1:]!r} keyed by {other[0][0]!r}"
            )
        runs.append((secret, results))
    (s1, r1), (s2, r2) = runs
    if s1 == s2:
        problems.append("two runs drew the same secret")
    # Two runs keyed by different secrets release different aggregates. One round may agree
    # by chance where a strategy adds no noise and both runs drew the same cohort (3 of a few
    # clients), or where a buffered strategy released nothing yet (a zero update), so the
    # contract is broken when every round agrees (as when both runs are keyed alike).
    same = [
        a.round_idx
        for a, b in zip(r1, r2, strict=False)
        if a.cohort == b.cohort and torch.equal(a.delta, b.delta)
    ]
    if same and len(same) == min(len(r1), len(r2)):
        problems.append(f"round {same[0]}: two runs released the same aggregate")
    return problems


__all__ = ["PUBLIC_PURPOSES", "keyed_by_other", "recorded_generator_keys", "secrecy_problems"]
