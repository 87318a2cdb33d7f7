"""``fl-lightning repro`` extensions used by paper 001: a per-arm tuning grid whose best value
sets the tables' arms (and shares its points with them), one paper table reproduced under
several labels, configurable diagnostic columns, per-round curve plots and the 'peak' claim.
No run is trained here: the store is filled by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fl_lightning.reports import repro
from fl_lightning.sweeps.store import ResultStore


def _definition(tmp_path: Path, **extra) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"seed_everything": 0}))
    d = {
        "profiles": {
            "scaled": {
                "base": [str(tmp_path / "base.yaml")],
                "seeds": 2,
                "tune": {
                    "param": "client.lr",
                    "values": [0.1, 0.2],
                    "arms": {"gcfl": {"inherit": ["gcfl_eps3"]}, "fedavg": {"values": [0.5]}},
                },
            }
        },
        "arms": {
            "gcfl": {"method": "GCFL"},
            "fedavg": {"method": "DP-FedAvg"},
            "gcfl_eps3": {"method": "GCFL", "overrides": {"privacy.target_epsilon": 3.0}},
        },
        "tables": [
            {
                "table": "II",
                "where": {"dataset": "MNIST", "metric": "ACC"},
                "arms": ["gcfl", "fedavg"],
            },
            {
                "table": "III",
                "label": "III-eps3",
                "where": {"dataset": "MNIST", "metric": "ACC", "epsilon": 3.0},
                "arms": ["gcfl_eps3"],
            },
        ],
        "columns": [{"key": "abs_cos_mean", "header": "mean abs(cos)", "digits": 3}],
        "plots": [
            {
                "column": "strategy/abs_cos_mean",
                "stem": "abs_cos_vs_round",
                "log": True,
                "fraction": True,
                "reference_column": "strategy/abs_cos_noise_only",
            }
        ],
        "claims": [
            {"claim": "GCFL peaks at 0.2", "table": "II", "peak": {"arm": "gcfl", "value": 0.2}},
            {
                "claim": "GCFL beats FedAvg",
                "table": "II",
                "better": {"arm": "gcfl", "than": ["fedavg"]},
                "paper_value": 5.61,
            },
        ],
        **extra,
    }
    path = tmp_path / "001.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _finish(store: ResultStore, rp: repro.ReproPoint, acc: float) -> None:
    store.append({"id": rp.point.id, "status": "finished", "metrics": {"test/accuracy": acc}})


def _tuned_store(tmp_path: Path):
    """The definition, its tuning points and table points, and a store where all finished."""
    defn = repro.load_definition("001", "scaled", _definition(tmp_path))
    assert [t.label for t in defn.tables] == ["II", "III-eps3"]
    tpoints = repro.tuning_points(defn, extra={})
    assert [(rp.arm.name, rp.arm.overrides["client.lr"]) for rp in tpoints] == [
        ("gcfl", 0.1),
        ("gcfl", 0.2),
        ("fedavg", 0.5),
    ]
    store = ResultStore(tmp_path / "store")
    for rp, acc in zip(tpoints, (0.50, 0.70, 0.60)):
        _finish(store, rp, acc)
    tuning = repro.choose(defn, tpoints, store)
    assert {r.arm: r.chosen for r in tuning} == {"gcfl": 0.2, "fedavg": 0.5}
    assert defn.arms["gcfl_eps3"].overrides == {"privacy.target_epsilon": 3.0, "client.lr": 0.2}
    points = repro.plan(defn, seeds=2, extra={}, tables=defn.tables)
    s0 = {rp.arm.name: rp.point.id for rp in points if rp.seed == 0}
    assert s0["gcfl"] == tpoints[1].point.id and s0["fedavg"] == tpoints[2].point.id
    assert s0["gcfl_eps3"] not in {rp.point.id for rp in tpoints}

    for rp in points:  # the other seeds finish too; one curve for the plot
        if rp.point.id not in {t.point.id for t in tpoints}:
            _finish(store, rp, {"gcfl": 0.68, "fedavg": 0.62, "gcfl_eps3": 0.8}[rp.arm.name])
    curve = {
        "round": [1, 2],
        "strategy/abs_cos_mean": [0.01, 0.02],
        "strategy/abs_cos_noise_only": [0.007, 0.007],
    }
    (store.root / "curves.jsonl").write_text(json.dumps({"id": s0["gcfl"], "curve": curve}))
    return defn, tuning, points, store


def test_tuning_chooses_per_arm_and_shares_points_with_the_tables(tmp_path: Path, monkeypatch):
    defn, tuning, points, store = _tuned_store(tmp_path)
    monkeypatch.setattr(repro.cli, "plots", lambda *a, **k: {})  # the figures: the slow test below
    out = tmp_path / "out"
    doc = repro.write_documents(defn, points, store, out, "fl-lightning repro 001", tuning=tuning)
    assert repro.validate_document(doc) == []
    tables = {t["table"]: t for t in doc["tables"]}
    assert tables["III-eps3"]["paper_table"] == "III" and "paper_table" not in tables["II"]
    assert tables["III-eps3"]["cells"][0]["paper"] == 92.76  # the eps = 3 column
    assert tables["II"]["cells"][0]["diagnostics"]["abs_cos_mean"] == pytest.approx(0.015)
    grid = {a["arm"]: a for a in doc["tuning"]["arms"]}
    assert grid["gcfl"]["chosen"] == 0.2 and grid["gcfl"]["applied_to"] == ["gcfl", "gcfl_eps3"]
    verdicts = {v["claim"]: v for v in doc["verdicts"]}
    peak = verdicts["GCFL peaks at 0.2"]  # one tuning seed per value: no interval
    assert peak["verdict"] == "untestable" and "no interval" in peak["reason"]
    md = (out / "001.md").read_text()
    assert "## Tuning of `client.lr`" in md and "**70.00**" in md
    assert "| mean abs(cos) |" in md and "## Table III-eps3" in md


@pytest.mark.slow
def test_tuning_and_curve_figures(tmp_path: Path):
    defn, tuning, points, store = _tuned_store(tmp_path)
    out = tmp_path / "out"
    repro.write_documents(defn, points, store, out, "fl-lightning repro 001", tuning=tuning)
    md = (out / "001.md").read_text()
    for png in ("001_II_abs_cos_vs_round.png", "001_tuning_client_lr.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in md


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {"tables": [{"table": "II", "arms": ["gcfl"]}, {"table": "II", "arms": ["gcfl"]}]},
            "label",
        ),
        (
            {
                "profiles": {
                    "scaled": {
                        "tune": {"param": "client.lr", "values": [0.1], "arms": {"nope": {}}}
                    }
                }
            },
            "tune.arms",
        ),
        ({"claims": [{"claim": "c", "table": "II", "scope": "maybe", "peak": {}}]}, "scope"),
        ({"claims": [{"claim": "c", "table": "nope", "better": {}}]}, "claims[0].table"),
        ({"coverage": [{"claim": "Table V", "status": "not_run"}]}, "coverage[0].reason"),
    ],
)
def test_bad_definitions_are_one_line_errors(tmp_path: Path, extra, field, capsys):
    path = _definition(tmp_path, **extra)
    assert repro.main(["001", "--definition", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and field in err and "\n" not in err


def test_dry_run_selects_a_table_by_label(tmp_path: Path, capsys):
    path = _definition(tmp_path)
    argv = ["001", "--definition", str(path), "--store", str(tmp_path / "s"), "--dry-run"]
    assert repro.main([*argv, "--table", "III-eps3"]) == 0
    out = capsys.readouterr().out
    assert "tuning: 2 points, 0 finished, 2 to run" in out  # gcfl's grid only
    assert "2 points, 0 finished, 2 to run (untuned" in out


@pytest.mark.parametrize("profile", ["scaled", "paper"])
def test_the_shipped_gcfl_definition_is_consistent(profile: str):
    defn = repro.load_definition("001", profile)
    assert defn.tune is not None and defn.tune.param == "client.lr"
    tables = {t.label: t for t in defn.tables}
    for claim in defn.claims:
        table = tables[claim["table"]]
        rule = claim.get("better") or claim.get("peak")
        arms = [rule["arm"], *rule.get("than", [])]
        assert set(arms) <= set(table.arms), claim["claim"]
    heirs = {a for h in defn.tune.inherit.values() for a in h} | set(defn.tune.values)
    in_tables = {a for t in defn.tables for a in [*t.arms, t.reference]}
    assert in_tables <= heirs  # every arm of every table has a tuned learning rate
    points = repro.plan(defn, seeds=3, extra={}, tables=defn.tables)
    assert len({rp.point.id for rp in points}) == len(points)
