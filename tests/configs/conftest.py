"""One shrink rule for every config-running test: ``offline_overrides(config, tmp_path)``.

A config runs here as written (composition, strategy, mechanism, accountant, sampling) except
for what this file changes, and only that:

* **Dataset swap** (``DATASET_SWAPS``): datasets that need the internet become seeded
  ``synthetic`` images of the same shape and class count (20 per client, at least 600; 20 % of
  them the test split, at most 200 where the model keeps its paper size: evaluating 1,200 of
  them took most of a 300-client run); Shakespeare reads the tiny LEAF fixture; COVID-19
  Radiography a generated PNG fixture in the real ImageFolder layout; the federated sources
  (``FEDERATED_FILES``: TFF HDF5, LEAF JSON, FLAIR, Hugging Face) small files in their real
  format; ``mnist_offline`` reads
  the real MNIST test set beside the checkout (the test is skipped, saying why, where it is
  absent).
* **Model shrink** (``MODEL_SHRINK``, keyed by the ``client.net`` class): narrower layers of the
  same architecture, so ResNet-50 takes a second instead of minutes. ``shrink=False`` keeps the
  paper's model (the ``slow`` tests).
* **Run shrink** (``RUN_OVERRIDES``): two rounds of one local step, a cohort of about two
  clients, no budget stop where σ is fixed (``privacy.target_epsilon: null``: stand-in
  clients of a few dozen examples sample at rates near 1, which no paper budget affords, so
  the run would stop before training; ε is still accounted and reported; where σ is
  calibrated from the target, the target stays), no checkpoints, no progress bar, only the
  final evaluation. The budget stop itself is tested on real data (test_gcfl_configs.py) and
  in tests/privacy and tests/server.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, offline_mnist_args

EXPERIMENTS = sorted((REPO / "configs" / "experiment").rglob("*.yaml"))
LEAF_FIXTURE = REPO / "tests" / "fixtures" / "leaf_shakespeare"
ROUNDS = 2

# dataset -> (image shape, classes) of its synthetic stand-in.
DATASET_SWAPS: dict[str, tuple[list[int], int]] = {
    "mnist": ([1, 28, 28], 10),
    "fashion_mnist": ([1, 28, 28], 10),
    "emnist": ([1, 28, 28], 47),
    "cifar10": ([3, 32, 32], 10),
    "cifar100": ([3, 32, 32], 100),
}
# Federated sources read from their own files (data/federated/): the config runs on small files
# in the real format (fl_lightning/testing/federated_files.py), its model and options as written.
FEDERATED_FILES = {
    "tff_emnist": "tff_emnist",
    "tff_shakespeare": "tff_shakespeare",
    "tff_stackoverflow": "tff_stackoverflow",
    "leaf_femnist": "leaf_femnist",
    "leaf_sent140": "leaf_sent140",
    "hf_clients": "hf_femnist",
    "flair": "flair",
}
EMNIST_SPLIT_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10}

# client.net class name -> init_args that make the same architecture small.
MODEL_SHRINK: dict[str, dict[str, Any]] = {
    "ResNet50GN": {"width": 4, "groups": 2, "blocks": [1, 1, 1, 1]},
    "ResNet18GN": {"width": 4, "groups": 2},
    "MnistCNN": {"channels": [4, 8], "hidden": 16},
    "AbadiCNN": {"channels": [8, 8], "hidden": [16, 16]},
    "MnistLSTM": {"hidden_size": 16},
    "CharLSTM": {"hidden_size": 16},
    "MLP": {"hidden": [16]},
    "VGG9": {"width": 4, "hidden": 16},
}

RUN_OVERRIDES = [
    "--trainer.max_steps", str(ROUNDS),
    "--trainer.logger", "false",
    "--trainer.enable_checkpointing", "false",
    "--trainer.enable_progress_bar", "false",
    "--model.eval_every", "0",  # the final evaluation at the end of fit still runs
    "--client.local_steps", "1",
]  # fmt: skip


def _load(path: Path) -> dict[str, Any]:
    return copy.deepcopy(_parsed(path))


@functools.cache
def _parsed(path: Path) -> dict[str, Any]:
    """A config file as parsed once per test process (the shrink rules read each group of each
    config several times, and collection reads every config)."""
    return yaml.safe_load(path.read_text()) or {}


def group(config: Path, name: str) -> dict[str, Any]:
    """One top-level group of an experiment, following a relative group-file include."""
    value = _load(config).get(name) or {}
    if isinstance(value, str):
        target = config.parent / value
        return _load(target) if target.is_file() else {"class_path": value}
    return value


def net_class(config: Path) -> str | None:
    net = group(config, "client").get("net")
    path = net.get("class_path") if isinstance(net, dict) else net
    return str(path).rsplit(".", 1)[-1] if path else None


def shrinks_model(config: Path) -> bool:
    return net_class(config) in MODEL_SHRINK


def _dataset_overrides(config: Path, tmp_path: Path, *, shrink: bool = True) -> list[str]:
    data = group(config, "data")
    name = data.get("dataset", "digits")
    if name == "mnist_offline":
        return offline_mnist_args()
    if name == "shakespeare":
        return ["--data.root", str(LEAF_FIXTURE)]
    if name in FEDERATED_FILES:  # the real on-disk format, written small (issue 61)
        from fl_lightning.testing.federated_files import WRITERS

        return ["--data.root", str(WRITERS[FEDERATED_FILES[name]](tmp_path / name))]
    if name == "covid_radiography":
        from tests.data.sources.covid_fixture import make_covid_fixture

        root = make_covid_fixture(tmp_path / "covid", per_class=8)
        return ["--data.root", str(root)]
    if name not in DATASET_SWAPS:
        return []  # offline already (digits, synthetic)
    shape, classes = DATASET_SWAPS[name]
    if name == "emnist":
        classes = EMNIST_SPLIT_CLASSES.get(str(data.get("split") or "balanced"), classes)
    clients = int(data.get("num_clients", 10))
    examples = max(600, 20 * clients)
    options = {"shape": shape, "num_classes": classes, "num_examples": examples}
    # 100-300 clients and a model the shrink keeps at paper size: a test split of 200, as at
    # 50 clients (20 % up to there; shrunk models keep 20 %, and so the golden runs)
    paper_size = not (shrink and shrinks_model(config))
    test = ["--data.test_fraction", str(200 / examples)] if examples > 1000 and paper_size else []
    return [
        "--data.dataset", "synthetic",
        "--data.download", "false",
        "--data.dataset_options", json.dumps(options),
        *test,
    ]  # fmt: skip


def _cohort_overrides(config: Path) -> list[str]:
    """A cohort of about two clients (paper cohorts of 10-180 clients take minutes)."""
    model, data = group(config, "model"), group(config, "data")
    clients = int(data.get("num_clients", 10))
    if model.get("sampling", "fixed") == "poisson":
        return ["--model.client_rate", str(min(1.0, 2.0 / clients))]
    if int(model.get("clients_per_round", 10)) > 2 and clients >= 2:
        return ["--model.clients_per_round", "2"]
    return []


def _horizon_overrides(config: Path) -> list[str]:
    """Async local-DP strategies (ADP-FL and its baselines) split each client's ε over its
    n·E/N expected uploads (Eq. 10): with the cohort shrunk to two clients the budget horizon E
    (``strategy.init_args.rounds``) grows so that n·E, hence every per-upload budget, stays the
    config's own. Without it n·E < N and the run is refused (no client could ever upload)."""
    from fl_lightning.strategies.async_local_dp import AsyncLocalDP

    strategy = group(config, "strategy")
    init_args = strategy.get("init_args") or {}
    shrunk = _cohort_overrides(config)
    if "rounds" in init_args or "--model.clients_per_round" not in shrunk:
        return []
    module, _, name = str(strategy.get("class_path", "")).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return []
    if not (isinstance(cls, type) and issubclass(cls, AsyncLocalDP)):
        return []
    rounds = int(group(config, "trainer").get("max_steps", ROUNDS))
    cohort = int(group(config, "model").get("clients_per_round", 10))
    return ["--strategy.init_args.rounds", str(math.ceil(rounds * cohort / 2))]


def _model_overrides(config: Path) -> list[str]:
    shrink = MODEL_SHRINK.get(net_class(config) or "", {})
    return [
        arg
        for key, value in shrink.items()
        for arg in (f"--client.net.init_args.{key}", json.dumps(value))
    ]


def calibrates_noise(config: Path) -> bool:
    """Whether σ is left unset for the run to calibrate from ``privacy.target_epsilon``."""
    dp_sgd = group(config, "client").get("dp_sgd") or {}
    init_args = group(config, "strategy").get("init_args") or {}
    return any(
        "noise_multiplier" in d and d["noise_multiplier"] is None for d in (dp_sgd, init_args)
    )


def _budget_overrides(config: Path) -> list[str]:
    """No budget stop where σ is fixed (the module docstring says why); where σ is calibrated
    from the target, the target stays (it sets σ, and the run then fits in it)."""
    return [] if calibrates_noise(config) else ["--privacy.target_epsilon", "null"]


def offline_overrides(config: Path, tmp_path: Path, *, shrink: bool = True) -> list[str]:
    """The command-line overrides that run ``config`` offline, small and fast (module doc)."""
    return [
        *_dataset_overrides(config, tmp_path, shrink=shrink),
        *_cohort_overrides(config),
        *_horizon_overrides(config),
        *_budget_overrides(config),
        *(_model_overrides(config) if shrink else []),
        *RUN_OVERRIDES,
    ]


@dataclass
class Run:
    """A finished run: the CLI (``.model``, ``.datamodule``, ``.trainer``) and ``summary.json``."""

    cli: Any
    summary: dict[str, Any]
    ledger: dict[str, Any]
    """``privacy_ledger.json``: the events behind the printed ε."""

    @property
    def model(self) -> Any:
        return self.cli.model


@pytest.fixture
def run_experiment(tmp_path, monkeypatch):
    """``run_experiment(config, *extra, shrink=True) -> Run``: ``fl-lightning fit`` in-process
    on ``config`` with ``offline_overrides`` and then ``extra`` (later overrides win). A test may
    run several: each run gets its own directory (a run directory is never reused)."""
    from fl_lightning.runs.cli_class import build_cli_class

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    make = build_cli_class()
    seen: set[Path] = set()  # the summaries of this test's earlier runs

    def run(config: Path, *extra: str, shrink: bool = True) -> Run:
        root = tmp_path / (f"run{len(seen)}" if seen else "run")
        args = [
            "fit", "--config", str(config),
            *offline_overrides(config, tmp_path, shrink=shrink),
            *extra,
            "--trainer.default_root_dir", str(root),
        ]  # fmt: skip
        cli = make(args)
        # this run's summary: a logger may put it outside ``root``
        summaries = sorted(set(tmp_path.rglob("summary.json")) - seen)
        assert len(summaries) == 1, f"{config}: expected one summary.json, got {summaries}"
        seen.add(summaries[0])
        ledger = json.loads((summaries[0].parent / "privacy_ledger.json").read_text())
        return Run(cli, json.loads(summaries[0].read_text()), ledger)

    return run


def experiment_id(path: Path) -> str:
    return str(path.relative_to(REPO / "configs" / "experiment").with_suffix(""))
