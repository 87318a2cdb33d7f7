"""Every sweep spec in sweeps/ parses, expands, and references configs that exist."""

from pathlib import Path

import pytest
import yaml

from fl_lightning.sweeps.runner import SweepRunner
from fl_lightning.sweeps.spec import build_command, expand, is_fl_lightning_fit, load_spec
from fl_lightning.sweeps.store import ResultStore
from fl_lightning.utils.tree import flatten_tree

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))
GROUPS = {"trainer", "model", "data", "client", "strategy", "privacy", "seed_everything",
          "ckpt_path", "optimizer", "lr_scheduler"}  # fmt: skip


def test_there_are_specs():
    assert any(p.name == "quickstart_eps.yaml" for p in SPECS)


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_spec_parses_and_references_existing_configs(path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)  # commands name configs relative to the repository root
    spec = load_spec(path)
    if spec.method != "bayes":
        points = expand(spec, count=3)
        assert points
        argv = build_command(spec, points[0].params)
        assert argv
    configs = spec.config_paths()
    if is_fl_lightning_fit(build_command(spec, {})):
        assert configs, f"{path.name}: an fl-lightning fit command without --config"
        for name in spec.parameters:
            assert name.split(".")[0] in GROUPS, f"{path.name}: unknown group in {name}"
    for cfg in configs:
        cfg_path = ROOT / cfg
        assert cfg_path.is_file(), f"{path.name}: {cfg} does not exist"
        assert isinstance(yaml.safe_load(cfg_path.read_text()), dict)


def test_swept_keys_are_the_keys_of_the_logged_config():
    """The W&B run config is the flattened resolved config (LoggedConfigCallback): a sweep
    parameter ``a.b.c`` shows up there under the same dotted name."""
    spec = load_spec(ROOT / "sweeps" / "quickstart_eps.yaml")
    tree: dict = {}
    for key, value in expand(spec)[0].params.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    assert set(flatten_tree(tree)) == set(spec.parameters)


def test_fl_lightning_points_log_into_their_run_dir(tmp_path):
    spec = load_spec(ROOT / "sweeps" / "quickstart_eps.yaml")
    point = expand(spec)[0]
    runner = SweepRunner(spec, ResultStore(tmp_path), wandb=True)
    argv = runner.command_for(point, tmp_path / "run")
    override = [a for a in argv if a.startswith("--trainer.logger=")]
    assert len(override) == 1 and argv[-1] == override[0]  # after the swept args
    loggers = yaml.safe_load(override[0].split("=", 1)[1])
    assert loggers[0]["class_path"].endswith("CSVLogger")
    assert loggers[0]["init_args"]["save_dir"] == str(tmp_path / "run")
    assert loggers[1]["class_path"].endswith("WandbLogger")
    assert "--strategy.init_args.noise_multiplier=0.5" in argv
