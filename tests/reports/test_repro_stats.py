"""The reproduction's statistics and verdict rules (issue 36): the paired test by seed, the
minimum detectable effect, the label rule (value / direction), Kendall τ within a column, the
untestable rules decided from the stored runs, no run serving two verdicts, headline n >= 5,
pooled claims; provenance of store rows (commit, relative paths, migration); the reference's
same_setting_except."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_lightning.reports import repro
from fl_lightning.reports.repro.cells import CellResult
from fl_lightning.reports.repro.claims import Pair, untestable_reasons, verdicts
from fl_lightning.reports.repro.definition import Arm, Definition, TableDef
from fl_lightning.sweeps.store import ResultStore

# --------------------------------------------------------------------------- statistics


def test_mde_of_the_issue_example():
    # "with seed SD ≈ 6.5 pt and n = 3 the smallest detectable effect is ≈ 20 pt"
    assert repro.mde(6.5, 3) == pytest.approx(20.1, abs=0.1)
    assert repro.mde(6.5, 10) < repro.mde(6.5, 5) < repro.mde(6.5, 3)
    assert repro.mde(0.0, 3) == 0.0 and repro.mde(1.0, 1) is None


def test_the_paired_test_uses_the_pairing():
    # arms far apart in spread, but the second is the first minus 1 on every seed
    a = {0: 60.0, 1: 75.0, 2: 90.0}
    b = {0: 59.0, 1: 74.1, 2: 88.9}
    test, seeds = repro.paired_test(a, b)
    assert seeds == [0, 1, 2] and test.n == 3
    assert test.estimate == pytest.approx(1.0, abs=1e-9)
    lo, hi = test.ci95
    assert 0 < lo < 1.0 < hi < 2  # paired: decisive; unpaired the spread (15 pt) would hide it
    assert test.kind.startswith("paired")
    # only the seeds both arms finished pair
    test, seeds = repro.paired_test({0: 1.0, 1: 2.0, 5: 9.0}, {1: 1.0, 0: 0.0, 7: 3.0})
    assert seeds == [0, 1] and test.estimate == 1.0 and test.ci95 == (1.0, 1.0)
    assert repro.paired_test({0: 1.0}, {0: 2.0})[0] is None


def test_t_interval_matches_scipy():
    from scipy import stats

    xs = [1.2, -0.4, 2.5, 0.9, 1.7]
    t = repro.mean_test(xs)
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=stats.tmean(xs), scale=stats.sem(xs))
    assert t.ci95 == pytest.approx((lo, hi))


@pytest.mark.parametrize(
    ("ci", "paper", "scope", "want"),
    [
        ((1.0, 3.0), 2.0, "value", "confirmed"),  # the paper's figure inside, 0 outside
        ((-0.09, 0.06), 2.64, "value", "contradicted"),  # 001 eps = 4: excludes +2.64
        ((3.0, 9.0), 2.0, "value", "contradicted"),  # ahead, but not by the paper's figure
        ((-1.0, 3.0), 2.0, "value", "inconclusive"),
        ((1.0, 3.0), 2.0, "direction", "confirmed"),
        ((3.0, 9.0), 2.0, "direction", "confirmed"),  # direction: any size on its side
        ((-11.9, -5.0), 2.5, "direction", "contradicted"),  # 004 pooled: wholly below
        ((-1.0, 3.0), 2.0, "direction", "inconclusive"),
        ((-3.0, -1.0), -1.0, "direction", "confirmed"),  # the paper's side is below 0
    ],
)
def test_label_rule(ci, paper, scope, want):
    assert repro.label(ci, paper, 0.0, scope) == want


def test_label_rule_rejects_a_sideless_direction():
    with pytest.raises(ValueError, match="no side"):
        repro.label((1.0, 2.0), 0.0, 0.0, "direction")


def test_kendall_only_over_five_items():
    k = repro.kendall([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    assert k == {"tau": None, "p_value": None, "n": 4}
    k = repro.kendall([1.0, 2.0, 3.0, 4.0, 5.0, None], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert k["n"] == 5 and k["tau"] == pytest.approx(1.0)


def test_kendall_is_computed_per_column_not_pooled():
    """Two columns whose means rise with the column (an ε trend) but disagree with the paper's
    order of methods within each column: pooled, τ would be high; per column it is -1."""
    from fl_lightning.reports.repro.documents import kendall_columns

    t = TableDef("IV", {}, [], None)
    cells = []
    for eps, base in ((0.1, 10.0), (4.0, 80.0)):
        for i in range(5):
            arm = Arm(f"m{i}_{eps}", f"M{i}", [], {}, where={"epsilon": eps})
            cells.append(CellResult(arm, base + i, [base - i], [], [], [], [], 1))
    cols = kendall_columns(t, cells)
    assert [c["column"] for c in cols] == ["epsilon = 0.1", "epsilon = 4.0"]
    assert all(c["tau"] == pytest.approx(-1.0) and c["n"] == 5 for c in cols)


# --------------------------------------------------------------------------- untestable rules


def _cell(arm: Arm | str, values: list[float], **kw) -> CellResult:
    arm = arm if isinstance(arm, Arm) else Arm(arm, arm, [], {})
    n = len(values)
    c = CellResult(
        arm,
        None,
        list(values),
        [],
        [],
        kw.get("curves", [{} for _ in values]),
        kw.get("metrics", [{} for _ in values]),
        n,
    )
    c.seeds = list(range(n))
    c.ids = [f"{arm.name}-s{s}" for s in range(n)]
    c.diverged = kw.get("diverged", 0)
    return c


def _table(kind: str = "accuracy", **kw) -> TableDef:
    return TableDef("T", {}, [], None, kind=kind, **kw)


def test_attack_table_without_or_with_a_failing_positive_control_is_untestable():
    p = Pair(_table("attack"), _cell("a", [51, 52]), _cell("b", [50, 50.5]))
    assert "no positive control" in untestable_reasons(p, None)[0]
    p = Pair(_table("attack", positive_control="pc"), p.a, p.b)
    assert "0.510 < 0.55" in untestable_reasons(p, 0.51)[0]
    assert untestable_reasons(p, 0.8) == []


def test_privacy_units_diverged_runs_and_silent_mechanisms_are_untestable():
    rec = [{"privacy/guarantee": "record-level (1.99, 1e-05)-DP"}] * 2
    cli = [{"privacy/guarantee": "none: as published", "privacy/epsilon_sound": 4.8e4}] * 2
    p = Pair(_table(), _cell("dpfl", [60, 62], metrics=rec), _cell("nbafl", [40, 45], metrics=cli))
    assert any("record-level" in r and "client-level" in r for r in untestable_reasons(p, None))
    p = Pair(_table(), _cell("a", [60, 62]), _cell("b", [40, 45], diverged=2))
    assert any("diverged" in r and "2/2" in r for r in untestable_reasons(p, None))
    silent = [{"round": [1, 2], "strategy/anr_fired": [0, 0]}] * 2
    p = Pair(_table(), _cell("dpfl", [60, 62], curves=silent), _cell("agn", [59, 61]))
    assert any("ANR never fired" in r for r in untestable_reasons(p, None))
    p = Pair(_table(), _cell("dpfl", [60, 62], curves=silent), _cell("agn", [], curves=[]))
    assert not any("never fired" in r for r in untestable_reasons(p, None))  # agn: no runs
    fired = [{"round": [1, 2], "strategy/anr_fired": [0, 1]}] * 2
    p = Pair(_table(), _cell("dpfl", [60, 62], curves=fired), _cell("agn", [59, 61]))
    assert untestable_reasons(p, None) == []


def test_identical_arms_and_arms_near_chance_are_untestable():
    p = Pair(_table(), _cell("dpfl", [63.9, 66.6, 63.1]), _cell("agn", [63.9, 66.6, 63.1]))
    assert any("identical results seed for seed" in r for r in untestable_reasons(p, None))
    p = Pair(_table(), _cell("adp", [18.8, 19.0]), _cell("even", [24.9, 25.0]))
    assert any("near chance" in r for r in untestable_reasons(p, None))
    p = Pair(_table(), _cell("adp", [18.8, 19.0]), _cell("even", [45.0, 46.0]))
    assert untestable_reasons(p, None) == []
    p = Pair(_table(classes=2), _cell("a", [55.0, 56.0]), _cell("b", [60.0, 61.0]))
    assert any("chance 50 %" in r for r in untestable_reasons(p, None))


# --------------------------------------------------------------------------- verdicts


def _defn(tables: list[TableDef], claims: list[dict]) -> Definition:
    arms = {a: Arm(a, a.upper(), [], {}) for t in tables for a in t.arms}
    return Definition("002", "", "scaled", [], arms, tables, claims, [], [], None, 3)


def test_no_run_serves_two_verdicts_and_headline_needs_five_pairs():
    t = TableDef("T", {}, ["a", "b", "c"], None)
    cells = {
        "T": {
            "a": _cell("a", [70, 71, 72, 73, 74]),
            "b": _cell("b", [60, 62, 61, 63, 60]),
            "c": _cell("c", [65, 66, 64, 66, 67]),
        }
    }
    claims = [
        {
            "claim": "a beats c",
            "table": "T",
            "better": {"arm": "a", "than": ["c"]},
            "paper_value": 6.0,
        },
        {
            "claim": "a beats b",
            "table": "T",
            "headline": True,
            "better": {"arm": "a", "than": ["b"]},
            "paper_value": 10.0,
        },
    ]
    rows, merged = verdicts(_defn([t], claims), cells)
    (v,) = rows
    assert v["claim"] == "a beats b" and v["headline"] is True  # headline first, n = 5
    assert v["test"]["n"] == 5 and v["verdict"] == "confirmed"
    assert set(v["runs"]) == {f"{x}-s{s}" for x in "ab" for s in range(5)}
    assert [m["claim"] for m in merged] == ["a beats c"]
    assert merged[0]["merged_into"] == ["a beats b"]
    # three seeds: the verdict stands, but not as a headline
    small = {"T": {k: _cell(k, c.values[:3]) for k, c in cells["T"].items()}}
    (v,), _ = verdicts(_defn([t], claims[1:]), small)
    assert "headline" not in v and "n >= 5" in v["headline_wanted"]


def test_a_claim_over_several_arms_takes_the_worst_comparison():
    t = TableDef("T", {}, ["a", "b", "c"], None)
    cells = {
        "T": {
            "a": _cell("a", [70, 71, 72]),
            "b": _cell("b", [60, 62, 61]),  # a beats b
            "c": _cell("c", [75, 76, 77.5]),  # c beats a: the claim "a beats both" fails
        }
    }
    claims = [
        {
            "claim": "a best",
            "table": "T",
            "scope": "direction",
            "better": {"arm": "a", "than": ["b", "c"]},
        }
    ]
    (v,), _ = verdicts(_defn([t], claims), cells)
    assert v["verdict"] == "contradicted" and v["test"]["comparison"] == "a − c"
    assert v["test"]["paper_value"] == 1.0 and "paper_value_note" in v
    assert "smallest detectable effect" in v["evidence"]


def test_an_untestable_comparison_leaves_a_contradicted_one_deciding():
    t = TableDef("T", {}, ["a", "b", "c"], None)
    cells = {
        "T": {
            "a": _cell("a", [70, 71, 72]),
            "b": _cell("b", [70, 71, 72]),  # identical to a: untestable
            "c": _cell("c", [75, 76, 77.5]),
        }
    }
    claims = [
        {
            "claim": "a best",
            "table": "T",
            "scope": "direction",
            "better": {"arm": "a", "than": ["b", "c"]},
        }
    ]
    (v,), _ = verdicts(_defn([t], claims), cells)
    assert v["verdict"] == "contradicted" and "identical" in v["evidence"]
    cells["T"]["c"] = _cell("c", [60, 61, 62])  # no contradiction left: untestable
    (v,), _ = verdicts(_defn([t], claims), cells)
    assert v["verdict"] == "untestable" and v["runs"] == [] and v["runs_inspected"]


def test_pooled_claim_pairs_each_run_once():
    t2 = TableDef("2", {}, ["r5", "e5", "r10", "e10"], None)
    t3 = TableDef("3", {}, ["r50", "e50"], None)
    cells = {
        "2": {
            "r5": _cell("r5", [40, 42, 45]),
            "e5": _cell("e5", [50, 55, 52]),
            "r10": _cell("r10", [55, 60, 58]),
            "e10": _cell("e10", [70, 72, 71]),
        },
        "3": {"r50": _cell("r50", [70, 71, 69]), "e50": _cell("e50", [75, 74, 78])},
    }
    pooled = [
        {"table": "2", "arm": "r5", "than": "e5"},
        {"table": "2", "arm": "r10", "than": "e10"},
        {"table": "3", "arm": "r50", "than": "e50"},
    ]
    claims = [{"claim": "ADP beats even", "headline": True, "pooled": pooled, "paper_value": 2.54}]
    (v,), _ = verdicts(_defn([t2, t3], claims), cells)
    assert v["test"]["n"] == 9 and v["headline"] and v["verdict"] == "contradicted"
    assert "9 of 9 negative" in v["evidence"] and len(v["runs"]) == 18
    bad = [{**claims[0], "pooled": [*pooled[:2], {"table": "2", "arm": "r5", "than": "e10"}]}]
    with pytest.raises(repro.ReproError, match="two pairs"):
        verdicts(_defn([t2, t3], bad), cells)


def test_a_claims_seeds_leave_the_other_seeds_to_a_later_claim():
    """A headline given every seed would take all 8 pairs; ``seeds`` keeps 5-7 for the next
    comparison of the same arms (paper 004: ADP-FL at eps = 10 against FedAvg without DP)."""
    t = TableDef("T", {}, ["a", "b", "c"], None)
    cells = {
        "T": {
            "a": _cell("a", [70, 71, 72, 73, 74, 75, 76, 77]),
            "b": _cell("b", [60, 62, 61, 63, 60, 61, 62, 63]),
            "c": _cell("c", [80, 81, 83, 82, 84, 85, 86, 88]),
        }
    }
    claims = [
        {"claim": "a beats b", "table": "T", "headline": True, "seeds": [0, 1, 2, 3, 4],
         "better": {"arm": "a", "than": ["b"]}, "paper_value": 10.0},
        {"claim": "a beats c", "table": "T", "seeds": [5, 6, 7],
         "better": {"arm": "a", "than": ["c"]}, "paper_value": 5.0},
    ]  # fmt: skip
    (head, side), merged = verdicts(_defn([t], claims), cells)
    assert head["test"]["n"] == 5 and set(head["runs"]) == {
        f"{x}-s{s}" for x in "ab" for s in range(5)
    }
    assert side["test"]["n"] == 3 and side["verdict"] == "contradicted" and not merged
    assert set(side["runs"]) == {f"{x}-s{s}" for x in "ac" for s in (5, 6, 7)}
    # without the headline's seeds the later claim finds every pair of a taken: merged
    (head,), merged = verdicts(_defn([t], [{**claims[0], "seeds": None}, claims[1]]), cells)
    assert head["test"]["n"] == 8 and merged[0]["claim"] == "a beats c"
    with pytest.raises(repro.ReproError, match="seeds: expected a non-empty list"):
        verdicts(_defn([t], [{**claims[0], "seeds": "0-4"}]), cells)


# --------------------------------------------------------------------------- provenance


def test_relative_row_and_the_provenance_store(tmp_path: Path):
    root = "/home/x/checkout"
    row = {
        "id": "p",
        "run_dir": f"{root}/docs/reproductions/store/002-scaled/runs/p/a1",
        "command": [
            "/opt/venv/bin/python",
            "-m",
            "fl_lightning.cli",
            "fit",
            "--config",
            f"{root}/configs/repro/002/scaled.yaml",
            "--data.root=/home/x/shared/data",
            '--trainer.logger={"save_dir": "' + root + '/docs/reproductions/store/x"}',
        ],
    }
    rel = repro.relative_row(row)  # the row's own root, read from its run_dir
    assert rel["run_dir"] == "docs/reproductions/store/002-scaled/runs/p/a1"
    assert rel["command"][0] == "python" and rel["command"][5] == "configs/repro/002/scaled.yaml"
    assert rel["command"][6] == "--data.root=../shared/data"
    assert root not in json.dumps(rel)
    assert not any(str(c).startswith("/") for c in rel["command"])

    store = repro.ProvenanceStore(tmp_path / "store")
    here = str(repro.REPO)
    store.append({"id": "q", "status": "running", "run_dir": f"{here}/runs/q", "command": ["x"]})
    (stored,) = ResultStore(tmp_path / "store").rows()
    assert stored["run_dir"] == "runs/q"
    assert stored["commit"] == repro.code_commit() and len(stored["commit"].split("+")[0]) == 40


def test_migrate_store_rewrites_paths_in_place(tmp_path: Path):
    d = tmp_path / "store"
    d.mkdir()
    rows = [
        {
            "id": "a",
            "status": "finished",
            "run_dir": "/m/docs/reproductions/store/s/runs/a",
            "command": ["/m/.venv/bin/fl-lightning", "fit", "--config", "/m/configs/c.yaml"],
        },
        {
            "id": "b",
            "status": "finished",
            "run_dir": "runs/b",
            "command": ["python"],
            "commit": "abc",
        },
    ]
    (d / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    n, changed = repro.migrate_store(d)
    assert (n, changed) == (2, 2)  # b: only its key order (sorted, as the store writes)
    got = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines()]
    assert got[0]["command"] == ["fl-lightning", "fit", "--config", "configs/c.yaml"]
    assert got[0]["run_dir"] == "docs/reproductions/store/s/runs/a"
    assert got[1]["commit"] == "abc" and "store_commit" not in got[1]
    assert repro.migrate_store(d) == (2, 0)  # idempotent
    commits = repro.report_commits(ResultStore(d), {"a", "b"})
    assert commits["ran_at"] == [{"commit": "abc", "points": 1}]
    assert commits["added_to_store_by"][0]["points"] == 1  # a: outside git, "uncommitted"


# --------------------------------------------------------------------------- settings, seeds


def test_same_setting_except_names_setting_keys(tmp_path: Path):
    (tmp_path / "base.yaml").write_text(
        "model: {clients_per_round: 10}\nstrategy:\n  class_path: A\n  init_args: {epsilon: 1.0}\n"
    )
    (tmp_path / "ref.yaml").write_text("strategy: {class_path: B}\n")
    arms = {
        "p": Arm("p", "P", [], {"strategy.init_args.epsilon": 5.0}),
        "ref": Arm("ref", "R", [str(tmp_path / "ref.yaml")], {}),
        "ref50": Arm("ref50", "R", [str(tmp_path / "ref.yaml")], {"model.clients_per_round": 50}),
    }
    t = TableDef("T", {}, ["p"], "ref")
    defn = Definition(
        "004", "", "scaled", [str(tmp_path / "base.yaml")], arms, [t], [], [], [], None, 3
    )
    same = repro.same_setting_except(defn, t, "ref")
    assert same["keys"] == ["strategy.class_path", "strategy.init_args.epsilon"]
    assert same["setting_keys"] == []
    same = repro.same_setting_except(defn, t, "ref50")
    assert same["setting_keys"] == ["model.clients_per_round"]


def test_arm_seeds_and_stored_seeds_extend_the_points():
    defn = repro.load_definition("002", "scaled")
    defn.arms["dpsgd"].seeds = 5
    t = next(x for x in defn.tables if "dpsgd" in x.arms)
    points = repro.plan(defn, seeds=3, extra={}, tables=[t])
    seeds = sorted(rp.seed for rp in points if rp.arm.name == "dpsgd")
    # its own 5, and the fresh seeds of the confirmatory §5.1 headline's registered plan
    assert seeds == [0, 1, 2, 3, 4, 25, 26, 27, 28, 29]
    assert defn.arms["anr"].seeds is None  # an arm without its own seeds runs the profile's
    assert max(rp.seed for rp in points if rp.arm.name == "anr") == 2
    # a seed stored beyond the plan (run with --seeds 7) is found and used
    extra = repro.points._repro_point(defn, defn.arms["anr"], 3, {}, 0, t)
    more = repro.with_stored_seeds(defn, points, {extra.point.id}, {})
    assert [rp.seed for rp in more if rp.arm.name == "anr"] == [0, 1, 2, 3]


def test_repro_is_listed_in_the_cli_help(capsys):
    from fl_lightning.cli import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "\n  repro " in out and "\n  audit " in out


def test_coverage_marks_a_run_item_without_runs_not_run():
    from fl_lightning.reports.repro.documents import coverage_json

    t = TableDef("T", {}, ["a"], None)
    defn = _defn([t], [])
    defn.coverage = [
        {"claim": "Table T", "status": "run", "tables": ["T"]},
        {"claim": "Table U", "status": "not_run", "reason": "no download"},
    ]
    empty = {"T": ([_cell("a", [])], None)}
    got = coverage_json(defn, empty)
    assert got[0]["status"] == "not_run" and "no finished run" in got[0]["reason"]
    assert got[1] == defn.coverage[1]
    assert coverage_json(defn, {"T": ([_cell("a", [1.0])], None)})[0]["status"] == "run"


def test_update_readme_rewrites_only_between_the_markers(tmp_path: Path):
    from fl_lightning.reports.repro.readme import END, START, update_readme

    out = tmp_path / "reports"
    out.mkdir()
    doc = {
        "paper": "004",
        "verdicts": [
            {"verdict": "contradicted", "headline": True},
            {"verdict": "untestable"},
        ],
        "merged_claims": [{"claim": "x"}],
        "coverage": [{"status": "run"}, {"status": "not_run", "reason": "r"}],
    }
    (out / "004.json").write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold row\n{END}\noutro\n")
    update_readme(readme, out)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old row" not in text
    row = next(x for x in text.splitlines() if x.startswith("| 004"))
    assert (
        "| 0 / 1 / 0 / 1 | contradicted (reading not stated, exploratory) | not stated | "
        "3 (1 untestable, 1 merged, 1 of 2" in row
    )
    # a registered, confirmatory headline on the published reading, and the paper's scale
    doc["verdicts"][0].update(reading="published", confirmatory=True)
    doc["scale"] = {"steps_fraction": 0.0056, "data_fraction": 0.133}
    (out / "004.json").write_text(json.dumps(doc))
    update_readme(readme, out)
    row = next(x for x in readme.read_text().splitlines() if x.startswith("| 004"))
    assert "| contradicted (published, confirmatory) | steps 0.56 %, data 13 % |" in row
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        update_readme(readme, out)


def test_migrate_store_from_the_command_line_needs_no_data(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr(repro.cli, "find_shared_data", lambda: None)  # a checkout without data
    store = tmp_path / "store"
    store.mkdir()
    row = {"id": "a", "status": "finished", "run_dir": "/m/docs/reproductions/store/s/runs/a"}
    (store / "results.jsonl").write_text(json.dumps(row) + "\n")
    assert repro.main(["002", "--store", str(store), "--migrate-store"]) == 0
    assert "1 of 1 rows rewritten" in capsys.readouterr().out
    got = json.loads((store / "results.jsonl").read_text())
    assert got["run_dir"] == "docs/reproductions/store/s/runs/a"
    assert repro.main(["002", "--store", str(tmp_path / "none"), "--migrate-store"]) == 2
