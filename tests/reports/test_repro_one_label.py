"""Issue 57: one comparison gets one label; a zero-width interval is untestable; pairs where the
compared mechanism never acted are named ties; the rules in force are recorded and a change
after registration shows both labels; a cell pools rows of one provenance; stored rows that
do not say how to re-run them are run again; a published headline says which gaps it fills."""

from __future__ import annotations

import json
from pathlib import Path

from fl_lightning.reports.repro import claims as claims_mod
from fl_lightning.reports.repro import readme, registration, rules
from fl_lightning.reports.repro.cells import one_provenance, provenance_of
from fl_lightning.reports.repro.points import ReproRunner, machine
from fl_lightning.reports.repro.provenance import rerunnable
from fl_lightning.sweeps.spec import Point
from fl_lightning.sweeps.store import ResultStore
from tests.reports.test_repro_registration import _cell, _defn_with

CLEAN = "0123456789abcdef0123456789abcdef01234567"


def test_a_claim_over_runs_another_verdict_inspected_is_merged_into_it():
    fired = [{"strategy/anr_fired": [0, 0, 1]}] + [{"strategy/anr_fired": [0, 0, 0]}] * 3
    idle = {
        "claim": "ANR helps",
        "table": "2",
        "better": {"arm": "a", "than": ["b"]},
        "paper_value": 0.9,
        "min_activity": {"arm": "a", "column": "strategy/anr_fired", "per_run": 2},
    }
    same = {
        "claim": "A beats B",
        "table": "2",
        "better": {"arm": "a", "than": ["b"]},
        "paper_value": 5.0,
    }
    cells = {"2": {"a": _cell("a", [90.0, 91.0, 92.0, 89.0], fired), "b": _cell("b", [89.5] * 4)}}
    defn = _defn_with(idle)
    defn.claims.append(same)
    rows, merged = claims_mod.verdicts(defn, cells)
    assert [v["verdict"] for v in rows] == ["untestable"]
    assert merged[0]["claim"] == "A beats B" and merged[0]["label"] == "untestable"
    assert merged[0]["label_then"] == "contradicted"


def test_every_pair_equal_is_untestable_and_idle_runs_are_named_ties():
    curves = [
        {"strategy/projected": [0, 0]},
        {"strategy/projected": [0, 2]},
        {"strategy/projected": [0, 0]},
    ]
    claim = {
        "claim": "GCFL",
        "table": "2",
        "better": {"arm": "a", "than": ["b"]},
        "paper_value": 2.0,
    }
    cells = {
        "2": {"a": _cell("a", [85.0, 86.0, 87.0], curves), "b": _cell("b", [85.0, 86.0, 87.0])}
    }
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "untestable" and "identical" in v["reason"] and v["runs_inspected"]
    # the same shift in every pair: an interval of zero width is no evidence either
    cells["2"]["b"] = _cell("b", [84.0, 85.0, 86.0])
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "untestable" and "standard deviation 0" in v["reason"]
    cells["2"]["b"] = _cell("b", [84.0, 85.5, 86.2])
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "contradicted" and "never acted in 2 of 3 runs" in v["evidence"]


def test_a_contradiction_beyond_the_paper_value_says_it_is_in_the_papers_favour():
    claim = {
        "claim": "A wins",
        "table": "2",
        "better": {"arm": "a", "than": ["b"]},
        "paper_value": 1.0,
    }
    cells = {"2": {"a": _cell("a", [85.0, 86.1, 87.0]), "b": _cell("b", [80.0, 81.0, 82.1])}}
    (v,), _ = claims_mod.verdicts(_defn_with(claim), cells)
    assert v["verdict"] == "contradicted" and v["contradicted_direction"] == "in the paper's favour"


def test_rule_changes_show_the_registered_label(tmp_path: Path):
    for f in rules.RULES_FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(f"# {f}\n")
    now = rules.rules_id(tmp_path)
    assert len(now) == 16 and now != rules._digest(["other"])
    claim = {
        "claim": "c",
        "registered_label": {"rules": "old", "label": "contradicted", "reason": "why"},
    }
    defn = _defn_with(claim)
    row = {"claim": "c", "verdict": "untestable", "confirmatory": True, "plan": {"rules": "old"}}
    (d,) = registration.rule_changes(defn, [row], now)
    assert (d["registered_label"], d["label"], d["reason"]) == ("contradicted", "untestable", "why")
    assert registration.rule_changes(defn, [{**row, "plan": {"rules": now}}], now) == []
    (d,) = registration.rule_changes(defn, [{**row, "plan": {"rules": "older"}}], now)
    assert d["registered_label"] == "not recorded"


def test_a_cell_pools_rows_of_one_provenance():
    c = _cell("a", [80.0, 81.0, 82.0, 70.0, 71.0, 72.0])
    reg = {"plan_sha256": "f" * 64, "threads": 1, "commit": CLEAN, "status": "finished"}
    old = {"status": "finished", "commit": CLEAN + "+dirty"}
    c.provenance = [provenance_of(reg)] * 3 + [provenance_of(old)] * 3
    shown = one_provenance(c, {"f" * 12})
    assert shown.values == [80.0, 81.0, 82.0] and shown.other_rows[0]["n"] == 3
    assert shown.other_rows[0]["mean"] == 71.0 and "+dirty" in shown.other_rows[0]["provenance"]


def test_rows_without_threads_or_at_a_dirty_commit_are_run_again(tmp_path: Path):
    store = ResultStore(tmp_path)
    assert not rerunnable({"status": "finished", "threads": 1, "commit": CLEAN + "+dirty"})
    assert rerunnable({"status": "finished", "threads": 1, "commit": CLEAN})
    for pid, extra in (("old", {}), ("new", {"threads": 1, "commit": CLEAN})):
        store.append({"id": pid, "sweep": "s", "status": "finished", **extra})
    runner = ReproRunner([], store, name="s", data_root=None, rerun={"old", "new"})
    todo, done, _ = runner.pending([Point(0, {}, "old"), Point(1, {}, "new")])
    assert [p.id for p in todo] == ["old"] and done == 1
    assert runner.claimable("old", {"status": "finished"}, 1)
    assert not runner.claimable("new", {"status": "finished", "threads": 1, "commit": CLEAN}, 1)


def test_rows_made_on_another_processor_run_again_once_here(tmp_path: Path):
    here = machine()
    assert here["cpu"] and here["isa"]
    store = ResultStore(tmp_path)
    sound = {"status": "finished", "threads": 1, "commit": CLEAN}
    for pid, extra in (("unknown", {}), ("other", {"machine": {"cpu": "x", "isa": "AVX512"}})):
        store.append({"id": pid, "sweep": "s", **sound, **extra})
    store.append({"id": "here", "sweep": "s", **sound, "machine": here})
    store.append({"id": "unnamed", "sweep": "s", **sound})
    pts = [Point(i, {}, pid) for i, pid in enumerate(("unknown", "other", "here", "unnamed"))]
    runner = ReproRunner(
        [], store, name="s", data_root=None, rerun={"unknown", "other", "here"}, elsewhere="why"
    )
    todo, done, _ = runner.pending(pts)
    # a re-runnable row made elsewhere runs again; one made here, or not named, does not
    assert [p.id for p in todo] == ["unknown", "other"] and done == 2
    runner.command_for = lambda point, run_dir: ["fl-lightning", "fit"]  # type: ignore[method-assign]
    row = runner._running_row(pts[1], 2)
    assert row["machine"] == here and row["rerun_reason"] == "why"
    # without --rerun-elsewhere the same re-runnable rows are left alone
    plain = ReproRunner([], store, name="s", data_root=None, rerun={"unknown", "other"})
    plain.command_for = runner.command_for  # type: ignore[method-assign]
    assert plain.pending(pts)[0] == [] and "rerun_reason" not in plain._running_row(pts[1], 2)


def test_register_reruns_lists_the_points_once(tmp_path: Path):
    defn = _defn_with({"claim": "c", "table": "2", "better": {"arm": "a", "than": ["b"]}})
    path = tmp_path / "plans.json"
    sha, n = registration.register_reruns(defn, ["p1", "p2"], path, CLEAN)
    assert n == 2 and registration.point_plans(registration.load_registry(path)) == {
        "p1": sha,
        "p2": sha,
    }
    assert registration.register_reruns(defn, ["p1"], path, CLEAN) == ("", 0)
    entry = json.loads(path.read_text())["plans"][0]
    assert entry["plan"]["confirmatory"] is False and entry["plan"]["kind"] == registration.RERUN


def test_the_readme_says_which_gaps_a_published_headline_fills():
    v = {"reading": "published", "gaps_filled": ["alpha_s = 0.5"]}
    assert readme._reading(v) == "published, gaps filled: alpha_s = 0.5"
    assert readme._reading({"reading": "published", "gaps_filled": []}) == "published"


def test_a_verification_of_a_replaced_row_is_listed_apart(tmp_path: Path):
    from fl_lightning.reports.repro.documents import _plans_markdown
    from fl_lightning.reports.repro.verify import LOG, load_verification

    latest = {
        "kept": {"attempt": 1, "commit": CLEAN},
        "legacy": {"attempt": 1, "commit": CLEAN},
        "moved": {"attempt": 2, "commit": CLEAN},
        "redone": {"attempt": 2, "commit": CLEAN},
    }
    base = {"commit": CLEAN, "threads": 1, "metrics_compared": 4}
    log = [
        {"run": "kept", "attempt": 1, "identical": True, "differs": []},
        {"run": "legacy", "stored_commit": CLEAN, "identical": True, "differs": []},
        {"run": "moved", "stored_commit": "27963bb", "identical": False, "differs": ["t/l"]},
        {"run": "redone", "attempt": 1, "identical": False, "differs": ["t/a"]},
        {"run": "unknown", "attempt": 1, "identical": True, "differs": []},
    ]
    (tmp_path / LOG).write_text("".join(json.dumps({**base, **e}) + "\n" for e in log))
    now, earlier = load_verification(tmp_path, latest)
    assert [e["run"] for e in now] == ["kept", "legacy"]
    assert [e["run"] for e in earlier] == ["moved", "redone"]
    text = "\n".join(_plans_markdown({"verification": now, "verification_replaced": earlier}))
    assert "2 earlier row(s) that a re-run has since replaced" in text
    assert "moved at `27963bb`" in text and "differed in t/l" in text
