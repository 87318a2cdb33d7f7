"""The membership-attack registry: every MIA name resolves, duplicates are refused."""

from __future__ import annotations

import pytest

from fl_lightning.attacks import MIA_ATTACKS
from fl_lightning.attacks import callback as _callback  # noqa: F401  (registers the attacks)
from fl_lightning.attacks.registry import (
    AttackSettings,
    get_attack,
    register_attack,
    registered_attacks,
)


def test_every_membership_attack_is_registered():
    assert registered_attacks() == sorted(MIA_ATTACKS)
    for name in MIA_ATTACKS:
        assert callable(get_attack(name))


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="unknown attack 'nope'"):
        get_attack("nope")
    original = get_attack("threshold")
    with pytest.raises(ValueError, match="already registered"):
        register_attack("threshold")(original)
    assert get_attack("threshold") is original


def test_force_replaces_and_the_replacement_is_called():
    original = get_attack("threshold")
    calls = []

    def fake(target, split, bank, *, delta, seed, settings):
        calls.append((delta, seed, settings.threshold_score))
        return "result"

    try:
        register_attack("threshold", force=True)(fake)
        out = get_attack("threshold")(
            None, None, None, delta=1e-5, seed=3, settings=AttackSettings("confidence")
        )
        assert out == "result"
        assert calls == [(1e-5, 3, "confidence")]
    finally:
        register_attack("threshold", force=True)(original)


def test_cs_mia_refuses_a_missing_series():
    with pytest.raises(ValueError, match="cs_mia needs the per-round confidence series"):
        get_attack("cs_mia")(None, None, None, delta=1e-5, seed=0, settings=AttackSettings())
