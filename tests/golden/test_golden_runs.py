"""Golden runs: a handful of experiment configs, at a fixed seed and tiny size, give the same
metrics, final weights and ε as the stored ``tests/golden/<name>.json``.

They pin behaviour across refactors (issue 18: "every experiment config gives the same metrics
and ε before and after"). Each run uses the config-test shrink rule (tests/configs/conftest.py)
so it takes seconds. Weights-derived numbers (test loss and accuracy, the final global model's
sum, L2 norm and a few coordinates) must match to 1e-6; ε and the guarantee text must match too.

When a change is *meant* to alter a result (e.g. a privacy-accounting fix changes ε), regenerate
every file with one command and commit the diff with the change that explains it::

    pytest tests/golden --update-golden -n 0
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import REPO

GOLDEN = Path(__file__).resolve().parent
TOLERANCE = 1e-6
EXPERIMENTS = REPO / "configs" / "experiment"

# name -> (config, extra overrides). One per family of code paths: client-level DP-FedAvg,
# DP-SGD with persisted Adam (DPFL-AGN), record-level GCFL with a budget stop, LDP with
# Poisson sampling (SPM-FL), asynchronous local DP (ADP-FL), top-k sparsified DP (DP-FedASGP).
# ADP-FL gets a cohort of three and the budgets of a 50-round run, so that uploads arrive
# within two rounds.
CASES: dict[str, tuple[Path, tuple[str, ...]]] = {
    "quickstart": (EXPERIMENTS / "quickstart.yaml", ()),
    "dpfl_agn_s51_mnist_agn": (EXPERIMENTS / "dpfl_agn" / "s51_mnist_agn.yaml", ()),
    "gcfl_table2_mnist": (EXPERIMENTS / "gcfl" / "table2_mnist.yaml", ()),
    "spm_fl_table02_mnist": (EXPERIMENTS / "spm_fl" / "table02_mnist_few_clients.yaml", ()),
    "adp_fl_table2_mnist": (
        EXPERIMENTS / "adp_fl" / "table2_mnist_adp_fl.yaml",
        ("--model.clients_per_round", "3", "--strategy.init_args.rounds", "50"),
    ),
    "dp_fedasgp_mnist_cnn": (EXPERIMENTS / "dp_fedasgp" / "mnist_cnn.yaml", ()),
}


def observe(run: Any) -> dict[str, Any]:
    """What a golden file holds: the run's summary and numbers derived from its final model."""
    net = run.model.global_net
    flat = torch.cat([p.detach().double().flatten().cpu() for p in net.parameters()])
    picks = torch.linspace(0, len(flat) - 1, 8).round().long()
    return {
        "summary": run.summary,
        "weights": {
            "num_parameters": len(flat),
            "sum": float(flat.sum()),
            "l2": float(flat.norm()),
            "coordinates": [float(v) for v in flat[picks]],
        },
    }


def _compare(expected: Any, actual: Any, where: str, problems: list[str]) -> None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in expected or key not in actual:
                problems.append(f"{where}.{key}: only in {'run' if key in actual else 'golden'}")
            else:
                _compare(expected[key], actual[key], f"{where}.{key}", problems)
    elif isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (e, a) in enumerate(zip(expected, actual)):
            _compare(e, a, f"{where}[{i}]", problems)
    elif isinstance(expected, float) or isinstance(actual, float):
        e, a = float(expected), float(actual)
        same = (math.isinf(e) and e == a) or (math.isnan(e) and math.isnan(a))
        if not same and not math.isclose(e, a, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
            problems.append(f"{where}: golden {e!r}, run {a!r}")
    elif expected != actual:
        problems.append(f"{where}: golden {expected!r}, run {actual!r}")


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    _compare(expected, actual, "", problems)
    return problems


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_run(name, run_experiment, request):
    config, extra = CASES[name]
    actual = observe(run_experiment(config, *extra))
    actual = json.loads(json.dumps(actual))  # the same float/int/inf round trip as the file
    path = GOLDEN / f"{name}.json"
    if request.config.getoption("--update-golden"):
        record = {"config": str(config.relative_to(REPO)), "overrides": list(extra), **actual}
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return
    assert path.exists(), f"{path.name} is missing: pytest tests/golden --update-golden -n 0"
    expected = json.loads(path.read_text())
    assert expected["config"] == str(config.relative_to(REPO))
    problems = differences({k: expected[k] for k in actual}, actual)
    assert not problems, (
        f"{name} differs from {path.name} (if meant, regenerate: pytest tests/golden "
        "--update-golden -n 0):\n  " + "\n  ".join(problems)
    )


def test_comparison_catches_a_change_beyond_the_tolerance():
    golden = {"summary": {"test/loss": 0.5, "privacy/epsilon": 2.0, "rounds": 2}}
    assert differences(golden, json.loads(json.dumps(golden))) == []
    nudged = {"summary": {"test/loss": 0.5 + 1e-9, "privacy/epsilon": 2.0, "rounds": 2}}
    assert differences(golden, nudged) == []
    moved = {"summary": {"test/loss": 0.5 + 1e-4, "privacy/epsilon": 2.1, "rounds": 3}}
    assert len(differences(golden, moved)) == 3
    assert differences({"a": float("inf")}, {"a": float("inf")}) == []
