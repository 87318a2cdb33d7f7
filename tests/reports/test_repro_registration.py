"""Registered analysis plans (issue 47): ``--register`` freezes each claim's plan with its
sha256, the commit and the time; rows record the plan they ran under, their threads and library
versions; a verdict is confirmatory only on runs made under its plan after registration; a plan
changed after its runs keeps the old verdict beside the new; a dirty checkout adds no rows;
``--verify`` re-runs stored cells; pooled claims are tested per column; a plan's minimum
activity makes an idle mechanism untestable."""

from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path

import pytest
import yaml

from fl_lightning.reports import repro
from fl_lightning.reports.repro import claims as claims_mod
from fl_lightning.reports.repro import registration, verify
from fl_lightning.reports.repro.cells import CellResult
from fl_lightning.reports.repro.definition import Arm, ReproError, TableDef
from fl_lightning.reports.repro.points import machine, processor_label
from fl_lightning.sweeps import runner
from fl_lightning.sweeps.store import ResultStore
from tests.reports.test_repro import BASE, NONPRIVATE, InProcessFit

CLEAN = "0123456789abcdef0123456789abcdef01234567"


def _definition(tmp_path: Path, paper_value: float = 0.5) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "np.yaml").write_text(yaml.safe_dump(NONPRIVATE))
    d = {
        "profiles": {"scaled": {"base": [str(tmp_path / "base.yaml")], "seeds": 1}},
        "arms": {
            "dpfl_agn": {
                "method": "AGN at lr 0.01",
                "overrides": {"strategy.init_args.anr": False},
            },
            "agn": {
                "method": "AGN",
                "overrides": {"strategy.init_args.anr": False, "client.lr": 0.05},
            },
            "ref": {"method": "FedAvg (non-private)", "configs": [str(tmp_path / "np.yaml")]},
        },
        "tables": [{"table": "5.3", "where": {"dataset": "MNIST"}, "arms": ["dpfl_agn", "agn"]}],
        "claims": [
            {
                "claim": "DPFL-AGN beats AGN",
                "reading": "published",
                "confirmatory": True,
                "seeds": [7, 8],
                "table": "5.3",
                "better": {"arm": "dpfl_agn", "than": ["agn"]},
                "paper_value": paper_value,
            }
        ],
    }
    path = tmp_path / "002.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.fixture
def clean_checkout(monkeypatch):
    """The checkout as a clean commit (the tests do not depend on the developer's git state)."""
    state = {"commit": CLEAN}
    monkeypatch.setattr(repro.provenance, "code_commit", lambda root=None: state["commit"])
    monkeypatch.setattr(repro.cli, "code_commit", lambda root=None: state["commit"])
    monkeypatch.setattr(repro.cli, "dirty_files", lambda root=None: ["fl_lightning/x.py"])
    monkeypatch.setenv("WANDB_MODE", "disabled")
    in_process = types.SimpleNamespace(**{**vars(subprocess), "Popen": InProcessFit})
    monkeypatch.setattr(runner, "subprocess", in_process)
    return state


def test_register_run_confirm_and_supersede(tmp_path: Path, capsys, clean_checkout):
    path = _definition(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    args = ["002", "--definition", str(path), "--store", str(store), "--out", str(out)]
    # runs made before registration are exploratory
    assert repro.main([*args, "--register"]) == 0
    registry = tmp_path / "002.scaled.plans.json"
    (entry,) = json.loads(registry.read_text())["plans"]
    assert entry["registered_commit"] == CLEAN and entry["status"] == "current"
    assert entry["sha256"] == registration.plan_sha256(entry["plan"])
    assert entry["plan"]["seeds"] == [7, 8] and len(entry["plan"]["points"]) == 4
    assert entry["plan"]["reading"] == "published"
    # registering again changes nothing
    capsys.readouterr()
    assert repro.main([*args, "--register"]) == 0
    assert "registered 0 plan(s)" in (text := capsys.readouterr().out) and "1 unchanged" in text
    assert len(json.loads(registry.read_text())["plans"]) == 1

    assert repro.main(args) == 0
    rows = [r for r in ResultStore(store).rows() if r["status"] == "finished"]
    mine = [r for r in rows if r["id"] in entry["plan"]["points"]]
    assert len(mine) == 4
    assert all(r["plan_sha256"] == entry["sha256"] and r["threads"] == 1 for r in mine)
    assert all(r["commit"] == CLEAN and "torch" in r["versions"] for r in mine)
    (v,) = json.loads((out / "002.json").read_text())["verdicts"]
    assert v["plan"]["sha256"] == entry["sha256"] and v["confirmatory"] is True
    assert v["reading"] == "published" and sorted(v["runs"]) == sorted(entry["plan"]["points"])

    # the plan changes after its runs: the verdict is no longer confirmatory until it is
    # registered again, and then its runs (made under the old plan) are exploratory
    _definition(tmp_path, paper_value=0.7)
    assert repro.main([*args, "--report-only"]) == 0
    (v2,) = json.loads((out / "002.json").read_text())["verdicts"]
    assert v2["plan"] is None and v2["confirmatory"] is False
    assert "changed after registration" in v2["confirmatory_note"]
    assert repro.main([*args, "--register"]) == 0
    entries = json.loads(registry.read_text())["plans"]
    assert [e["status"] for e in entries] == ["superseded", "current"]
    assert entries[0]["verdict_then"]["verdict"] == v2["verdict"]  # the old result is kept
    assert repro.main([*args, "--report-only"]) == 0
    doc = json.loads((out / "002.json").read_text())
    (v3,) = doc["verdicts"]
    assert v3["plan"]["sha256"] == entries[1]["sha256"] and v3["confirmatory"] is False
    assert "not made under the registered plan" in v3["confirmatory_note"]
    (dev,) = doc["plan_deviations"]
    assert dev["sha256"] == entry["sha256"] and dev["verdict_then"]["verdict"] == v2["verdict"]
    assert "Plans or rules changed after registration" in (out / "002.md").read_text()


def test_dirty_checkout_adds_no_rows_and_registers_nothing(tmp_path: Path, capsys, clean_checkout):
    path = _definition(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    args = ["002", "--definition", str(path), "--store", str(store), "--out", str(out)]
    clean_checkout["commit"] = CLEAN + "+dirty"
    assert repro.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted changes (fl_lightning/x.py)" in err
    assert not (store / "results.jsonl").exists() and not out.exists()
    assert repro.main([*args, "--register"]) == 2
    assert "commit the definition first" in capsys.readouterr().err
    assert not (tmp_path / "002.scaled.plans.json").exists()
    # --allow-dirty: rows record +dirty and serve no plan
    clean_checkout["commit"] = CLEAN
    assert repro.main([*args, "--register"]) == 0
    clean_checkout["commit"] = CLEAN + "+dirty"
    assert repro.main([*args, "--allow-dirty", "--seeds", "1", "--arm", "agn"]) == 0
    rows = [r for r in ResultStore(store).rows() if r["status"] == "finished"]
    assert rows and all(r["commit"].endswith("+dirty") and "plan_sha256" not in r for r in rows)


def test_verify_reruns_stored_cells_and_reports_them(tmp_path: Path, capsys, clean_checkout):
    path = _definition(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    args = ["002", "--definition", str(path), "--store", str(store), "--out", str(out)]
    assert repro.main([*args, "--verify", "1"]) == 2  # nothing stored yet
    assert "0 stored cells can be verified" in capsys.readouterr().err
    assert repro.main([*args, "--seeds", "1"]) == 0
    capsys.readouterr()
    assert repro.main([*args, "--verify", "2", "--verify-seed", "5"]) == 0
    text = capsys.readouterr().out
    assert "draw seed 5" in text and text.count(": identical (") == 2
    log = [json.loads(x) for x in (store / "verification.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(e["identical"] and e["metrics_compared"] >= 5 for e in log)
    assert all(e["commit"] == CLEAN and e["threads"] == 1 for e in log)
    # the row and its re-run name the processor each ran on (float sums differ between them)
    rows = [json.loads(x) for x in (store / "results.jsonl").read_text().splitlines()]
    assert all(r["machine"] == machine() for r in rows if r.get("status") == "finished")
    assert all(e["machine"] == e["stored_machine"] == machine() for e in log)
    assert (
        f"{processor_label(machine())}; {processor_label(machine())}"
        in (out / "002.md").read_text()
    )
    doc = json.loads((out / "002.json").read_text())
    assert {e["run"] for e in doc["verification"]} == {e["run"] for e in log}
    # the same seed draws the same cells
    assert repro.main([*args, "--verify", "2", "--verify-seed", "5"]) == 0
    again = [json.loads(x) for x in (store / "verification.jsonl").read_text().splitlines()]
    assert [e["run"] for e in again[2:]] == [e["run"] for e in log]


def test_compare_finds_every_differing_metric():
    stored = {"test/accuracy": 0.91, "test/loss": 0.3, "privacy/epsilon": 2.0}
    assert verify.compare(stored, dict(stored)) == (3, [])
    assert verify.compare(stored, {**stored, "test/loss": 0.30000001}) == (3, ["test/loss"])
    assert verify.compare(stored, {"test/accuracy": 0.91}) == (3, ["privacy/epsilon", "test/loss"])


def _cell(arm: str, values: list[float], curves: list[dict] | None = None) -> CellResult:
    n = len(values)
    return CellResult(
        Arm(arm, arm.upper(), [], {}),
        None,
        values,
        [1.0] * n,
        ["record-level"] * n,
        curves or [{}] * n,
        [{}] * n,
        n,
        seeds=list(range(n)),
        ids=[f"{arm}-s{s}-0" for s in range(n)],
    )


def _defn_with(claim: dict) -> repro.Definition:
    t2, t3 = TableDef("2", {}, ["a", "b", "c", "d"], None), TableDef("3", {}, ["c", "d"], None)
    arms = {k: Arm(k, k.upper(), [], {}) for k in "abcd"}
    return repro.Definition("004", "", "scaled", [], arms, [t2, t3], [claim], [], [], None, 3)


def test_a_pool_is_not_confirmed_by_columns_that_disagree():
    # column 1: +1.0 +- 0.1 (paper +1.0); column 2: +5.0 +- 0.1 (paper +1.0): the pool's mean
    # +3.0 holds the pooled paper value +3.0 (and not 0), yet column 2 excludes its own value
    claim = {
        "claim": "pooled",
        "pooled": [
            {"table": "2", "arm": "a", "than": "b", "paper_value": 1.0},
            {"table": "3", "arm": "c", "than": "d", "paper_value": 1.0},
        ],
        "paper_value": 3.0,
    }
    cells = {
        "2": {"a": _cell("a", [81.0, 81.1, 80.9]), "b": _cell("b", [80.0, 80.0, 80.0])},
        "3": {"c": _cell("c", [85.0, 85.1, 84.9]), "d": _cell("d", [80.0, 80.0, 80.0])},
    }
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "contradicted" and "C − D" in v["test"]["comparison"]
    assert v["test"]["paper_value"] == 1.0 and v["pooled_test"]["paper_value"] == 3.0
    assert [c["paper_value"] for c in v["test"]["columns"]] == [1.0, 1.0]
    assert "columns that disagree" in v["evidence"]
    # with column 2 agreeing, the pool decides and lists its columns
    claim["pooled"][1]["paper_value"] = 5.0
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "confirmed" and len(v["test"]["columns"]) == 2
    assert "pool" in v["test"]["kind"]


def test_a_plan_whose_mechanism_barely_acted_is_untestable():
    fired = [{"strategy/anr_fired": [0, 1, 0]}, {"strategy/anr_fired": [0, 0, 0]}] * 2
    claim = {
        "claim": "ANR helps",
        "table": "2",
        "better": {"arm": "a", "than": ["b"]},
        "paper_value": 0.9,
        "min_activity": {"arm": "a", "column": "strategy/anr_fired", "per_run": 2},
    }
    cells = {"2": {"a": _cell("a", [90.0, 91.0, 92.0, 89.0], fired), "b": _cell("b", [89.0] * 4)}}
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "untestable" and "acted 0.5 times a run" in v["reason"]
    fired = [{"strategy/anr_fired": [1, 1, 0]}] * 4
    cells["2"]["a"] = _cell("a", [90.0, 91.0, 92.0, 89.0], fired)
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] != "untestable"


def test_definition_checks_readings_headlines_and_activity(tmp_path: Path):
    base = yaml.safe_load(_definition(tmp_path).read_text())
    for change, field in (
        ({"reading": "mine"}, "claims[0].reading"),
        ({"headline": True, "confirmatory": False}, "claims[0].confirmatory"),
        ({"min_activity": {"arm": "zz", "column": "c", "per_run": 1}}, "min_activity.arm"),
    ):
        d = json.loads(json.dumps(base))
        d["claims"][0].update(change)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(d))
        with pytest.raises(ReproError, match=field.replace("[", r"\[").replace("]", r"\]")):
            repro.load_definition("002", "scaled", path)


def test_every_shipped_claim_names_its_reading_and_headlines_are_published_and_fresh():
    for paper in ("000", "001", "002", "003", "004"):
        defn = repro.load_definition(paper, "scaled")
        assert defn.scale["steps_fraction"] > 0 and defn.scale["data_fraction"] > 0
        heads = [c for c in defn.claims if c.get("headline")]
        assert heads, paper
        for c in defn.claims:
            assert c.get("reading") in ("published", "variant"), (paper, c["claim"])
        for c in heads:
            assert c["reading"] == "published" and len(c["seeds"]) >= 5, (paper, c["claim"])
            assert min(c["seeds"]) >= 20  # seeds no earlier run used
