"""The paper-scale GPU queue (benchmarks/gpu_paper_scale.{py,sh}, issue 37) checked on the CPU,
so that device time never discovers a typo: every cell resolves to its paper's definition,
table and arms; the queue runs one cell per paper first, cheapest first; the budget skips what
does not fit; and the whole shell script runs at toy size (one real run, the other cells by
``repro --dry-run``, the store read back by ``--report-only``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fl_lightning.reports.repro.definition import load_definition
from tests.conftest import REPO, SHARED_DATA

_spec = importlib.util.spec_from_file_location(
    "gpu_paper_scale", REPO / "benchmarks" / "gpu_paper_scale.py"
)
assert _spec is not None and _spec.loader is not None
gps = importlib.util.module_from_spec(_spec)
sys.modules["gpu_paper_scale"] = gps
_spec.loader.exec_module(gps)


@pytest.mark.parametrize("cell", gps.QUEUE, ids=lambda c: c.key)
def test_every_cell_resolves_to_its_paper_profile(cell) -> None:
    defn = load_definition(cell.paper, "paper")
    tables = [t for t in defn.tables if cell.table in (t.label, t.table)]
    assert tables, f"{cell.key}: no table {cell.table!r}"
    assert set(cell.arms) <= set(tables[0].arms), f"{cell.key}: arms not in {tables[0].label}"
    assert defn.data_root == "shared"  # the offline data, found inside or beside the checkout
    assert cell.claim in [c["claim"] for c in defn.claims]
    config = Path(defn.base[0]) if Path(defn.base[0]).is_absolute() else REPO / defn.base[0]
    text = config.read_text()
    assert "mnist_offline" in text and "download" not in text
    assert f"max_steps: {cell.rounds}\n" in text  # the estimate's rounds are the profile's


def test_one_cell_per_paper_first_then_cheapest_first() -> None:
    estimates = {
        c.key: {"gpu_s_estimate": 100.0 * (len(gps.QUEUE) - i)} for i, c in enumerate(gps.QUEUE)
    }
    queue = gps.ordered(gps.QUEUE, estimates)
    first = [c for c in queue if c.passes == 1]
    assert queue[: len(first)] == first
    assert sorted(c.paper for c in first) == ["000", "001", "002", "003", "004"]
    costs = [estimates[c.key]["gpu_s_estimate"] for c in first]
    assert costs == sorted(costs)
    assert gps.ordered(gps.QUEUE, {})[0] == gps.QUEUE[0]  # no estimates: the listed order


def test_cells_that_do_not_fit_the_budget_are_skipped_without_running(tmp_path) -> None:
    estimates = tmp_path / "estimates.json"
    cells = [{"key": c.key, "gpu_s_estimate": 10_000} for c in gps.QUEUE]
    estimates.write_text(json.dumps([{"cells": cells}]))
    args = gps.argparse.Namespace(
        out=str(tmp_path / "out"),
        budget_s=300.0,
        store_root=str(tmp_path / "store"),
        toy=False,
        estimates=str(estimates),
    )
    assert gps.run(args) == 0
    rows = [
        json.loads(line) for line in (tmp_path / "out" / "queue.jsonl").read_text().splitlines()
    ]
    assert len(rows) == len(gps.QUEUE)
    assert all(r["status"] == "skipped: estimate exceeds what is left" for r in rows)
    assert not (tmp_path / "store").exists()


def test_bad_budget_is_a_one_line_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        gps.main(["run", "--out", "x", "--budget-s", "0"])
    assert exc.value.code == 2
    assert "--budget-s: must be > 0" in capsys.readouterr().err


@pytest.mark.slow  # ten processes: about a minute on an idle 2-core CPU
@pytest.mark.skipif(SHARED_DATA is None, reason="needs the real MNIST test set (shared/data)")
def test_the_whole_script_runs_at_toy_size(tmp_path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PAPER_SCALE_TOY": "1", "PY": sys.executable}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_paper_scale.sh", str(out), "600"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "queue.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows[:1]] == ["finished"]
    assert all(r["status"] == "resolved (dry run)" for r in rows[1 : len(gps.QUEUE)])
    assert rows[-1]["status"] == "report-only rc 0"
    first = rows[0]["cell"].split("/")[0]
    store = out / "toy-store" / f"{first}-paper" / "results.jsonl"
    assert any(json.loads(line).get("status") == "finished" for line in store.open())
    assert (out / "reports" / f"{first}.md").exists()
    assert (out / "store" / f"{first}-paper" / "results.jsonl").exists()  # brought back
    assert "shared data:" in (out / "machine.txt").read_text()


@pytest.mark.slow  # three benchmark processes at toy size
def test_the_section2_script_runs_at_toy_size(tmp_path) -> None:
    """benchmarks/gpu_section2.sh (cuDNN / channels-last / unfold + bmm, the profiled DP-SGD
    round, the sequential path's speed) on the CPU at toy size: every step runs and writes."""
    out = tmp_path / "s2"
    env = {**os.environ, "GPU_SECTION2_TOY": "1", "PY": sys.executable, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_section2.sh", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((out / "conv_paths.json").read_text())["rows"]
    assert {r["variant"] for r in rows} == {"default", "benchmark", "channels_last", "unfold_bmm"}
    assert max(r["max_abs_diff"] for r in rows) < 1e-2  # the four paths compute one convolution
    assert "device kernels" in (out / "profile_dp.txt").read_text()
    assert (out / "cohort_speed_gpu.json").read_text().strip()


def test_estimates_merge_over_records_and_skip_failed_cells(tmp_path) -> None:
    path = tmp_path / "estimates.json"
    first, second = gps.QUEUE[0].key, gps.QUEUE[1].key
    records = [
        {"cells": [{"key": first, "gpu_s_estimate": 50}, {"key": second, "gpu_s_estimate": 9}]},
        {"cells": [{"key": first, "gpu_s_estimate": 70}, {"key": second, "error": "boom"}]},
    ]
    path.write_text(json.dumps(records))
    found = gps.load_estimates(path)
    assert found[first]["gpu_s_estimate"] == 70 and found[second]["gpu_s_estimate"] == 9
