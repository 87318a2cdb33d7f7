import itertools
import sys
from pathlib import Path

import pytest
import yaml

from fl_lightning.sweeps.spec import SpecError, build_command, expand, load_spec


def _spec(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_grid_is_exactly_the_cartesian_product(tmp_path):
    params = {
        "a": {"values": [1, 2, 3]},
        "b": {"values": ["x", "y"]},
        "c": {"value": 0.5},
        "d": {"distribution": "int_uniform", "min": 1, "max": 2},
    }
    spec = load_spec(_spec(tmp_path, {"method": "grid", "parameters": params, "program": "p"}))
    points = expand(spec)
    got = [tuple(p.params[k] for k in "abcd") for p in points]
    want = list(itertools.product([1, 2, 3], ["x", "y"], [0.5], [1, 2]))
    assert got == want
    assert len({p.id for p in points}) == len(want) == 12


def test_grid_nested_parameters_flatten_to_dotted_keys(tmp_path):
    params = {"strategy": {"parameters": {"init_args": {"parameters": {"clip": {"values": [1]}}}}}}
    spec = load_spec(_spec(tmp_path, {"method": "grid", "parameters": params, "program": "p"}))
    assert expand(spec)[0].params == {"strategy.init_args.clip": 1}


def test_grid_refuses_continuous_parameters(tmp_path):
    params = {"lr": {"distribution": "uniform", "min": 0.1, "max": 1.0}}
    spec = load_spec(_spec(tmp_path, {"method": "grid", "parameters": params, "program": "p"}))
    with pytest.raises(SpecError, match="parameters.lr"):
        expand(spec)


def test_random_count_k_gives_k_seeded_points(tmp_path):
    params = {
        "lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 1e-1},
        "mu": {"distribution": "uniform", "min": 0.0, "max": 1.0},
        "opt": {"values": ["sgd", "adam"]},
        "k": {"distribution": "int_uniform", "min": 1, "max": 5},
    }
    spec = load_spec(_spec(tmp_path, {"method": "random", "parameters": params, "program": "p"}))
    a = expand(spec, count=7, seed=3)
    b = expand(spec, count=7, seed=3)
    c = expand(spec, count=7, seed=4)
    assert len(a) == 7 and len({p.id for p in a}) == 7
    assert [p.params for p in a] == [p.params for p in b]
    assert [p.params for p in a] != [p.params for p in c]
    # the first points do not depend on the count (a resumed sweep finds them again)
    assert [p.params for p in expand(spec, count=3, seed=3)] == [p.params for p in a[:3]]
    for p in a:
        assert 1e-3 <= p.params["lr"] <= 1e-1 and 0 <= p.params["mu"] <= 1
        assert p.params["opt"] in ("sgd", "adam") and p.params["k"] in range(1, 6)


def test_random_without_count_and_bayes_are_refused(tmp_path):
    params = {"a": {"values": [1, 2]}}
    spec = load_spec(_spec(tmp_path, {"method": "random", "parameters": params, "program": "p"}))
    with pytest.raises(SpecError, match="--count"):
        expand(spec)
    spec = load_spec(_spec(tmp_path, {"method": "bayes", "parameters": params, "program": "p"}))
    with pytest.raises(SpecError, match="wandb agent"):
        expand(spec)


def test_command_macros_and_fl_lightning_uses_this_python(tmp_path):
    body = {
        "method": "grid",
        "parameters": {"a": {"value": 1}, "b": {"value": True}, "c": {"value": [1, 2]}},
        "command": ["fl-lightning", "fit", "--config", "x.yaml", "${args}"],
    }
    spec = load_spec(_spec(tmp_path, body))
    argv = build_command(spec, expand(spec)[0].params)
    assert argv == [
        sys.executable, "-m", "fl_lightning.cli", "fit", "--config", "x.yaml",
        "--a=1", "--b=True", "--c=[1, 2]",
    ]  # fmt: skip
    assert spec.config_paths() == ["x.yaml"]
    body["command"] = ["${env}", "${interpreter}", "${program}", "${args_no_hyphens}"]
    body["program"] = "prog.py"
    spec = load_spec(_spec(tmp_path, body))
    assert build_command(spec, {"a": 1}) == [sys.executable, "prog.py", "a=1"]
