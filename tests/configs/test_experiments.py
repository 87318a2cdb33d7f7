"""Every experiment config in configs/experiment/** runs two rounds (DESIGN.md, tests).

One shrink rule for all of them, ``offline_overrides`` in conftest.py: a dataset swap for
datasets that need the internet, a model shrink keyed by the model class, two rounds of one
local step and a cohort of about two clients. The ``slow`` variant (``[paper_size]``) keeps the
paper's model for the configs whose model the shrink changes; ``pytest -m slow`` runs them.
Every run's finished line is checked against its guarantee sentence and its ledger: one (ε, δ),
at the run's δ, recomputed within 1 % from the ledger by ``privacy/accounting/recompute.py``.
Paper-specific assertions (ε bounds, guarantees) live in ``test_<paper>_configs.py``.
"""

from __future__ import annotations

import math
import re

import pytest

from fl_lightning.privacy.accounting.recompute import headline_epsilon
from tests.configs.conftest import (
    EXPERIMENTS,
    ROUNDS,
    calibrates_noise,
    experiment_id,
    shrinks_model,
)

CASES = [pytest.param(p, True, id=experiment_id(p)) for p in EXPERIMENTS] + [
    pytest.param(p, False, id=f"{experiment_id(p)}[paper_size]", marks=pytest.mark.slow)
    for p in EXPERIMENTS
    if shrinks_model(p)
]


def test_there_are_experiment_configs():
    names = {experiment_id(p) for p in EXPERIMENTS}
    assert "quickstart" in names
    assert {p.split("/")[0] for p in names if "/" in p} >= {
        "adp_fl", "dp_fedasgp", "dpfl_agn", "gcfl", "spm_fl",
    }  # fmt: skip


FINISHED = re.compile(
    r"^Finished .*, ε = (\S+) \(δ = (\S+)\)(?: against [^;]+)?; guarantee: (.*)$", re.M
)
PAIR = re.compile(r"\(([^,()]+), ([^()]+)\)-DP")


def check_finished_line(out: str, summary: dict, ledger: dict) -> None:
    """The printed line's (ε, δ) is the sentence's pair and the ledger's δ: one δ, the run's
    (issue 33 §2). A sentence without a pair states no guarantee (ε = ∞) or no release (0)."""
    lines = FINISHED.findall(out)
    assert len(lines) == 1, f"expected one finished line, got {lines}"
    eps, delta, sentence = lines[0]
    assert float(delta) == ledger["delta"] == summary["privacy/delta"]
    assert float(eps) == pytest.approx(summary["privacy/epsilon"], rel=1e-3, abs=1e-3)
    pairs = PAIR.findall(sentence)
    if sentence.startswith("none"):
        assert math.isinf(float(eps)) and not pairs
        return
    if not pairs:
        assert float(eps) == 0.0, sentence
        return
    assert len(pairs) == 1, sentence
    stated_eps, stated_delta = pairs[0]
    assert float(stated_delta) == ledger["delta"], sentence
    assert float(stated_eps) == pytest.approx(float(eps), rel=6e-3), sentence  # 3 digits


@pytest.mark.parametrize(("config", "shrink"), CASES)
def test_experiment_runs(config, shrink, run_experiment, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FL_LIGHTNING_PLOTS", "1")  # every config's plots (the suite's default: 0)
    run = run_experiment(config, shrink=shrink)
    assert len(list(tmp_path.rglob("accuracy_vs_round.png"))) == 1
    check_finished_line(capsys.readouterr().out, run.summary, run.ledger)
    summary = run.summary
    if calibrates_noise(config):
        # σ is calibrated so every client stays within the target over its likely number of
        # participations (privacy/accounting/budget.py); the exact budget stop guards the tail.
        assert 1 <= summary["rounds"] <= ROUNDS
        assert summary["privacy/epsilon"] <= run.model.accountant.target_epsilon * (1 + 1e-9)
    else:
        assert not summary["stopped_by_budget"]  # the shrink rule lifts the budget stop
        assert summary["rounds"] == ROUNDS
    assert run.model.rounds_completed == summary["rounds"]
    assert 0.0 <= summary["test/accuracy"] <= 1.0
    eps = summary["privacy/epsilon"]
    assert eps >= 0.0 and not math.isnan(eps)
    assert summary["privacy/guarantee"]
    # The printed ε is what dp-accounting alone computes from the events the run recorded.
    ledger = run.ledger
    independent = headline_epsilon(ledger, delta=ledger["delta"], accountant=ledger["accountant"])
    if math.isinf(independent):
        assert math.isinf(eps)
    else:
        assert eps == pytest.approx(independent, rel=0.01)
