"""Every GCFL experiment config (and every method's strategy file; gcfl.yaml is the configs'
default) runs two rounds.

Datasets that are not offline here are swapped for ones of the same shape: ``mnist`` for
``mnist_offline``, ``cifar10`` for ``synthetic`` 3×32×32, COVID-19 Radiography for a generated
PNG fixture in the real ImageFolder layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_lightning.cli import main
from tests.conftest import offline_mnist_args
from tests.data.sources.covid_fixture import make_covid_fixture

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs/experiment/gcfl").glob("*.yaml"))
METHODS = ["gcfl_published", "fedavg", "dp_fedprox", "dp_scaffold", "dp_fedexp", "isolate"]


def _data_overrides(config: Path, tmp_path: Path) -> list[str]:
    text = config.read_text()
    if "dataset: mnist\n" in text:
        return ["--data.dataset=mnist_offline", "--data.download=false", *offline_mnist_args()]
    if "dataset: mnist_offline\n" in text:
        return offline_mnist_args()
    if "dataset: cifar10" in text:
        return [
            "--data.dataset=synthetic",
            "--data.download=false",
            '--data.dataset_options={"shape": [3, 32, 32], "num_classes": 10, '
            '"num_examples": 2000}',
        ]
    if "dataset: covid_radiography" in text:
        root = make_covid_fixture(tmp_path / "covid", per_class=8)
        # A 32-image fixture cannot afford epsilon = 2 (q = B/n_i near 1): report epsilon only.
        return [f"--data.root={root}", "--privacy.target_epsilon=null"]
    return []


def _run(config: Path, tmp_path: Path, extra: list[str]) -> dict:
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(tmp_path / "logs"), "name": "", "version": ""},
    }
    args = [
        "fit",
        f"--config={config}",
        *extra,
        "--trainer.max_steps=2",
        "--client.local_steps=1",
        "--client.batch_size=8",
        "--model.eval_every=1",
        f"--trainer.logger={json.dumps(logger)}",
    ]
    assert main(args) == 0
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    throughput = json.loads((tmp_path / "logs" / "throughput.json").read_text())
    assert throughput["throughput/test_samples_per_s"] > 0
    return summary


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_runs_two_rounds(config: Path, tmp_path: Path) -> None:
    summary = _run(config, tmp_path, _data_overrides(config, tmp_path))
    assert summary["rounds"] == 2
    assert 0.0 <= summary["test/accuracy"] <= 1.0
    assert "record-level" in summary["privacy/guarantee"]


@pytest.mark.parametrize("method", METHODS)
def test_each_method_runs_two_rounds(method: str, tmp_path: Path) -> None:
    config = ROOT / "configs/experiment/gcfl/mnist_offline_eps2.yaml"
    extra = [f"--strategy=configs/strategy/{method}.yaml", *offline_mnist_args()]
    summary = _run(config, tmp_path, extra)
    assert summary["rounds"] == 2
    assert summary["privacy/epsilon"] <= 2.0 + 1e-6
