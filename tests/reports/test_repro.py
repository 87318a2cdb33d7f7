"""``fl-lightning repro`` end to end on a tiny table (sweep -> store -> JSON -> Markdown -> PNG),
its resumability, the JSON schema, and the paper profile building one round on synthetic data."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import types
from pathlib import Path

import pytest
import yaml

from fl_lightning.reports import repro
from fl_lightning.sweeps import runner
from fl_lightning.sweeps.store import ResultStore

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 2, "enable_checkpointing": False, "enable_progress_bar": False},
    "model": {"clients_per_round": 3, "sampling": "poisson", "client_rate": 1.0, "eval_every": 1},
    "data": {"dataset": "digits", "num_clients": 3, "partitioner": "iid", "val_fraction": 0.1},
    "client": {
        "net": {
            "class_path": "fl_lightning.models.MLP",
            "init_args": {"input_dim": 64, "hidden": [16], "num_classes": 10},
        },
        "num_classes": 10,
        "optimizer": "adam",
        "lr": 0.01,
        "local_steps": 2,
        "batch_size": 32,
        "dp_sgd": {"noise_multiplier": 1.0, "max_grad_norm": 1.0},
    },
    "strategy": {
        "class_path": "fl_lightning.strategies.dpfl_agn.DPFLAGN",
        "init_args": {"anr": True},
    },
    "privacy": {"accountant": "rdp", "delta": 1.0e-5, "target_epsilon": None},
}
NONPRIVATE = {
    "client": {"dp_sgd": None},
    "strategy": {"class_path": "fl_lightning.strategies.fedavg.FedAvg"},
}


def _definition(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "np.yaml").write_text(yaml.safe_dump(NONPRIVATE))
    d = {
        "profiles": {
            "scaled": {"base": [str(tmp_path / "base.yaml")], "seeds": 1, "notes": ["a tiny table"]}
        },
        "arms": {
            "dpfl_agn": {"method": "DPFL-AGN", "overrides": {"strategy.init_args.anr": True}},
            "agn": {"method": "AGN", "overrides": {"strategy.init_args.anr": False}},
            "ref": {"method": "FedAvg (non-private)", "configs": [str(tmp_path / "np.yaml")]},
        },
        "tables": [
            {
                "table": "5.3",
                "where": {"dataset": "MNIST"},
                "arms": ["dpfl_agn", "agn"],
                "reference": "ref",
            }
        ],
        "claims": [
            {
                "claim": "DPFL-AGN beats AGN",
                "table": "5.3",
                "scope": "direction",
                "better": {"arm": "dpfl_agn", "than": ["agn"]},
            }
        ],
        "deviations": [{"what": "data", "paper": "MNIST", "ours": "digits", "why": "a test"}],
    }
    path = tmp_path / "002.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


class InProcessFit:
    """``subprocess.Popen`` as the sweep runner calls it, running its ``python -m
    fl_lightning.cli fit ...`` in this process: the runner's claims, store rows, curves,
    reports and resume are the ones under test, without a fresh interpreter importing torch
    and Lightning for every point (seconds of CPU each). The real subprocess is run by
    ``test_paper_profile_runs_one_round_on_synthetic_stand_ins``."""

    def __init__(self, argv: list[str], *, stdout, **_: object) -> None:
        from fl_lightning.cli import main

        assert argv[1:3] == ["-m", "fl_lightning.cli"], argv
        log = io.TextIOWrapper(stdout, encoding="utf-8", write_through=True)
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                self.returncode = main(argv[3:])
            except SystemExit as exit_:
                self.returncode = exit_.code if isinstance(exit_.code, int) else 1
        log.detach()  # the runner closes its own file

    def wait(self) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode

    def terminate(self) -> None:
        pass


def test_repro_end_to_end_and_resume(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    in_process = types.SimpleNamespace(**{**vars(subprocess), "Popen": InProcessFit})
    monkeypatch.setattr(runner, "subprocess", in_process)  # only the runner's launches
    defn = _definition(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    args = ["002", "--definition", str(defn), "--store", str(store), "--out", str(out)]
    args.append("--allow-dirty")  # a development checkout: rows record +dirty
    assert repro.main([*args, "--seeds", "1", "--arm", "dpfl_agn", "--arm", "ref"]) == 0
    rows = [r for r in ResultStore(store).rows() if r["status"] == "finished"]
    assert len(rows) == 2 and all(r["metrics"]["test/accuracy"] > 0 for r in rows)
    assert all(r["commit"] == repro.code_commit() for r in rows)  # provenance of each row
    curves = repro.load_curves(ResultStore(store))
    assert set(curves) == {r["id"] for r in rows}
    assert all(c["round"] == [1, 2] and len(c["test/accuracy"]) == 2 for c in curves.values())

    doc = json.loads((out / "002.json").read_text())
    assert repro.validate_document(doc) == []
    assert doc["paper"] == "002" and doc["profile"] == "scaled"
    (table,) = doc["tables"]
    cells = {c["arm"]: c for c in table["cells"]}
    assert cells["dpfl_agn"]["seeds"] == 1 and cells["dpfl_agn"]["paper"] == 95.23
    assert cells["dpfl_agn"]["epsilon_reported"] > 0
    assert cells["dpfl_agn"]["guarantee"].startswith("record-level")
    assert cells["agn"]["seeds"] == 0 and cells["agn"]["ours_mean"] is None  # not run (--arm)
    ref = table["nonprivate_reference"]
    assert ref["seeds"] == 1 and ref["guarantee"].startswith("none")
    (v,) = doc["verdicts"]
    # the tiny setting's reference (2 rounds) is far below the standard's 90 % floor
    assert v["verdict"] == "untestable" and "non-private reference" in v["reason"]
    assert "< 90 %" in v["reason"]
    md = (out / "002.md").read_text()
    assert "## Verdicts" in md and "| data | MNIST | digits | a test |" in md
    for png in ("002_5_3_accuracy_vs_round.png", "002_5_3_epsilon_vs_round.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in md

    # resumable: the rest of the table runs, what finished is not run again
    capsys.readouterr()
    assert repro.main(args) == 0
    text = capsys.readouterr().out
    assert "2 already finished, 1 to run" in text
    doc = json.loads((out / "002.json").read_text())
    cells = {c["arm"]: c for c in doc["tables"][0]["cells"]}
    assert cells["agn"]["seeds"] == 1
    assert doc["tables"][0]["kendall_n"] == 2
    # with everything finished: the documents are regenerated from the store alone
    (out / "002.md").unlink()
    n_rows = len(list(ResultStore(store).rows()))
    assert repro.main(args) == 0
    assert len(list(ResultStore(store).rows())) == n_rows and (out / "002.md").exists()
    assert json.loads((out / "002.json").read_text())["tables"] == doc["tables"]
    # a changed setting is a new point, never pooled with the old ones
    assert (
        repro.main([*args, "--seeds", "1", "--arm", "agn", "--dry-run", "--set", "client.lr=0.02"])
        == 0
    )
    assert "1 points, 0 finished, 1 to run" in capsys.readouterr().out


def test_schema_validation_names_the_defects():
    good = {
        "paper": "002",
        "profile": "scaled",
        "command": "x",
        "verdicts": [],
        "tables": [
            {
                "table": "5.3",
                "kendall_tau": None,
                "p_value": None,
                "nonprivate_reference": None,
                "cells": [
                    {
                        "method": "A",
                        "setting": {},
                        "paper": 1.0,
                        "ours_mean": 2.0,
                        "ours_std": None,
                        "seeds": 3,
                        "epsilon_reported": 1.0,
                        "guarantee": "g",
                    }
                ],
            }
        ],
    }
    assert repro.validate_document(good) == []
    bad = json.loads(json.dumps(good))
    del bad["tables"][0]["cells"][0]["seeds"]
    bad["verdicts"] = [{"claim": "c", "verdict": "likely", "evidence": "e"}]
    bad["tables"][0]["kendall_tau"] = "0.5"
    problems = repro.validate_document(bad)
    assert "tables[0].cells[0].seeds: missing" in problems
    assert any(p.startswith("verdicts[0].verdict") for p in problems)
    assert any(p.startswith("tables[0].kendall_tau") for p in problems)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["002", "--profile", "huge"], "--profile"),
        (["002", "--seeds", "0"], "--seeds"),
        (["002", "--table", "IX"], "--table"),
        (["002", "--arm", "nope"], "--arm"),
        (["002", "--set", "novalue"], "--set"),
        (["001", "--definition", "/nonexistent/001.yaml"], "PAPER"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, field, capsys):
    assert repro.main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}") and "\n" not in err


@pytest.mark.heavy
def test_paper_profile_runs_one_round_on_synthetic_stand_ins(tmp_path: Path, capsys):
    """The paper profile (offline MNIST, the paper's CNN, 1000 rounds) builds and runs
    one round when its data is replaced by synthetic 28x28 images."""
    store, out = tmp_path / "store", tmp_path / "out"
    argv = [
        "002",
        "--profile",
        "paper",
        "--table",
        "5.3",
        "--arm",
        "dpfl_agn",
        "--seeds",
        "1",
        "--store",
        str(store),
        "--out",
        str(out),
        "--set",
        "data.dataset=synthetic",
        "--set",
        "data.download=false",
        "--set",
        'data.dataset_options={"shape": [1, 28, 28], "num_examples": 1200}',
        "--set",
        "trainer.max_steps=1",
        "--set",
        "client.batch_size=4",
        "--allow-dirty",
    ]
    assert repro.main(argv) == 0, capsys.readouterr()
    (row,) = [r for r in ResultStore(store).rows() if r["status"] == "finished"]
    assert row["metrics"]["rounds"] == 1
    assert "AbadiCNN" in json.dumps(row["command"]) or "paper.yaml" in json.dumps(row["command"])
    doc = json.loads((out / "002.json").read_text())
    assert doc["profile"] == "paper" and repro.validate_document(doc) == []


def test_per_arm_paper_cells_and_the_simulated_time_axis(tmp_path: Path):
    """A table with an ε axis (paper 004, Table 2) picks each arm's paper cell by
    ``paper_where``, keeps the arm's own label, shows the async budget columns, and plots
    accuracy against the simulated clock when the runs log it."""
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(BASE))
    d = {
        "profiles": {"scaled": {"base": [str(base)], "seeds": 2}},
        "arms": {
            "adp1": {"method": "ADP-FL rising (ε = 1)", "overrides": {"x": 1}},
            "adp10": {"method": "ADP-FL rising (ε = 10)", "overrides": {"x": 10}},
            "even10": {"method": "Baseline (ε = 10)", "overrides": {"x": 11}},
            "ref": {"method": "FedAvg (no DP)", "overrides": {"x": 0}},
        },
        "tables": [
            {
                "table": "2",
                "where": {"dataset": "MNIST"},
                "arms": ["adp1", "adp10", "even10"],
                "reference": "ref",
                "paper_method": {"adp1": "ADP-FL", "adp10": "ADP-FL", "even10": "Baseline"},
                "paper_where": {
                    "adp1": {"epsilon": 1},
                    "adp10": {"epsilon": 10},
                    "even10": {"epsilon": 10},
                },
            }
        ],
        "claims": [
            {
                "claim": "c",
                "table": "2",
                "scope": "direction",
                "better": {"arm": "adp10", "than": ["even10"]},
            }
        ],
    }
    path = tmp_path / "004.yaml"
    path.write_text(yaml.safe_dump(d))
    defn = repro.load_definition("004", "scaled", path)
    points = repro.plan(defn, seeds=2, extra={}, tables=defn.tables)
    store = ResultStore(tmp_path / "store")
    store.root.mkdir(parents=True, exist_ok=True)
    acc = {"adp1": 0.3, "adp10": 0.8, "even10": 0.7, "ref": 0.9}
    with (store.root / "curves.jsonl").open("a") as f:
        for rp in points:
            # seed effects that differ by arm: the paired differences are not all equal (a
            # zero-width interval would make the comparison untestable, issue 57)
            a = acc[rp.arm.name] + 0.01 * rp.seed + 0.003 * rp.seed * (rp.arm.name == "adp10")
            store.append({"id": rp.point.id, "status": "finished", "metrics": {"test/accuracy": a}})
            curve = {
                "round": [1, 2],
                "test/accuracy": [a / 2, a],
                "strategy/async/sim_time": [1.0, 2.2],
                "strategy/clients_exited": [0.0, 0.0],
                "strategy/dispatched": [20.0, 20.0],
                "strategy/eps_paper_max": [0.5, 1.0],
                "strategy/weight_max": [0.2, 0.4],
                "strategy/frozen_total": [0.0, 3.0],
            }
            f.write(json.dumps({"id": rp.point.id, "curve": curve}) + "\n")
    out = tmp_path / "out"
    doc = repro.write_documents(defn, points, store, out, "fl-lightning repro 004")
    cells = {c["arm"]: c for c in doc["tables"][0]["cells"]}
    assert (cells["adp1"]["paper"], cells["adp10"]["paper"], cells["even10"]["paper"]) == (
        66.73,
        92.36,
        86.25,
    )
    assert cells["adp10"]["method"] == "ADP-FL rising (ε = 10)"  # the arm's label is kept
    diag = cells["adp10"]["diagnostics"]
    assert diag["last_round_dispatched_mean"] == 20.0 and diag["epsilon_frozen_mean"] == 3.0
    assert diag["weight_max_mean"] == pytest.approx(0.3)
    assert doc["verdicts"][0]["verdict"] == "confirmed"
    md = (out / "004.md").read_text()
    assert "Clients exited | Uploads in the last round" in md and "Largest weight" in md
    png = out / "004_2_accuracy_vs_sim_time.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png.name})" in md


def test_shipped_004_definition_plans_every_table(tmp_path: Path):
    defn = repro.load_definition("004", "scaled")
    assert [t.table for t in defn.tables] == ["2", "3", "4"]
    points = repro.plan(defn, seeds=3, extra={}, tables=defn.tables)
    arms = {rp.arm.name: rp.arm for rp in points}  # headline arms run their own seeds: 5
    fresh = [rp for i in range(len(defn.claims)) for rp in repro.claim_points(defn, i, {})]
    assert len(fresh) == 30  # the registered headline: 6 arms x 5 fresh seeds (20-24)
    assert {rp.seed for rp in fresh} == {20, 21, 22, 23, 24}
    assert len(points) == sum(max(3, a.seeds or 0) for a in arms.values()) + len(fresh)
    # an arm compared with seeds the headline has not taken starts at its first_seed
    seeds = {(rp.arm.name, rp.seed) for rp in points}
    assert {s for a, s in seeds if a == "adp_rising_e10_as1"} == {5, 6, 7}
    assert {s for a, s in seeds if a == "even_rounds_e10"} == set(range(8)) | set(range(20, 25))
    assert len(repro.plan(defn, seeds=3, extra={}, tables=defn.tables, arm_seeds=False)) == 3 * len(
        arms
    ) + len(fresh)  # --seeds N sets the arms' own seeds, not a registered plan's
    assert defn.tables[0].paper_where["adp_rising_e1"] == {"epsilon": 1}
    bad = yaml.safe_load(repro.definition_path("004").read_text())
    bad["tables"][0]["paper_where"]["nope"] = {"epsilon": 1}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(repro.ReproError, match="paper_where: 'nope'"):
        repro.load_definition("004", "scaled", path)
    bad = yaml.safe_load(repro.definition_path("004").read_text())
    bad["arms"]["adp_rising_e5_as1"]["first_seed"] = -1
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(repro.ReproError, match="adp_rising_e5_as1.first_seed: must be >= 0"):
        repro.load_definition("004", "scaled", path)
    bad["arms"]["adp_rising_e5_as1"]["first_seed"] = "3"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(repro.ReproError, match="first_seed: expected a whole number, got '3'"):
        repro.load_definition("004", "scaled", path)
    # a claim's seeds are checked when the definition loads, before any point runs
    bad = yaml.safe_load(repro.definition_path("004").read_text())
    bad["claims"][0]["seeds"] = "0-4"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(repro.ReproError, match=r"claims\[0\]\.seeds: expected a non-empty list"):
        repro.load_definition("004", "scaled", path)
    for seed, message in ((True, "expected a whole number, got True"), (-1, "must be >= 0")):
        bad["claims"][0]["seeds"] = [0, seed]
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(repro.ReproError, match=rf"claims\[0\]\.seeds: {message}"):
            repro.load_definition("004", "scaled", path)


@pytest.mark.slow
def test_004_paper_profile_runs_one_round_on_synthetic_stand_ins(tmp_path: Path, capsys):
    """Paper 004's paper profile (offline MNIST, the LSTM, 100 rounds) builds and runs one round of
    ADP-FL on synthetic 28x28 images (budget horizon kept at the profile's 100 rounds)."""
    store, out = tmp_path / "store", tmp_path / "out"
    argv = [
        "004", "--profile", "paper", "--table", "2", "--arm", "adp_rising_e10", "--seeds", "1",
        "--store", str(store), "--out", str(out), "--allow-dirty",
        "--set", "data.dataset=synthetic", "--set", "data.download=false",
        "--set", 'data.dataset_options={"shape": [1, 28, 28], "num_examples": 1200}',
        "--set", "trainer.max_steps=1", "--set", "strategy.init_args.rounds=100",
        "--set", "client.local_epochs=1",
    ]  # fmt: skip
    assert repro.main(argv) == 0, capsys.readouterr()
    # seed 0 of the arm (the registered headline's fresh seeds 20-24 are points of the table too)
    (row,) = [
        r for r in ResultStore(store).rows() if r["status"] == "finished" and "-s0-" in r["id"]
    ]
    assert row["metrics"]["rounds"] == 1 and "paper.yaml" in json.dumps(row["command"])
    doc = json.loads((out / "004.json").read_text())
    assert doc["profile"] == "paper" and repro.validate_document(doc) == []
