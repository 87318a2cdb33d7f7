"""``fl-lightning repro P --verify K``: re-run K stored cells and compare every stored metric.

A cell is eligible when its row finished, recorded the intra-op thread count it ran with
(``threads``) and a clean commit, and is a point of the current definition (so the same command
can be rebuilt). K of them are drawn at random (the seed is printed, and ``--verify-seed`` replays
the draw), each re-run into a temporary store with its row's threads, and every key of the
row's ``metrics`` is compared for equality (floats to the last digit). Each result is appended to
``verification.jsonl`` beside the store, which the report lists, with the processor of the
row and of the re-run (float sums differ between processors: a row made on another one re-runs
here with ``--rerun-elsewhere``)."""

from __future__ import annotations

import json
import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fl_lightning.reports.repro.points import (
    ReproPoint,
    ReproRunner,
    numeric_versions,
    processor_label,
)
from fl_lightning.reports.repro.provenance import rerunnable
from fl_lightning.sweeps.store import ResultStore

LOG = "verification.jsonl"


def eligible(store: ResultStore, points: list[ReproPoint]) -> list[str]:
    """The ids of rows that can be verified (finished, threads and a clean commit recorded,
    a point of the current definition), sorted."""
    ids = {rp.point.id for rp in points}
    out = []
    for rid, row in store.latest().items():
        if rid in ids and rerunnable(row):
            out.append(rid)
    return sorted(out)


def compare(stored: dict[str, Any], new: dict[str, Any]) -> tuple[int, list[str]]:
    """(metrics compared, the keys whose values differ or are missing in ``new``)."""
    differs = [k for k in sorted(stored) if k not in new or new[k] != stored[k]]
    return len(stored), differs


def verify(
    store: ResultStore,
    points: list[ReproPoint],
    k: int,
    *,
    seed: int | None,
    name: str,
    data_root: str | None,
    commit: str | None,
) -> list[dict[str, Any]]:
    """Re-runs ``k`` eligible cells drawn with ``seed`` (a fresh one when None, printed) and
    appends each comparison to ``<store>/verification.jsonl``; returns the entries."""
    pool = eligible(store, points)
    if len(pool) < k:
        raise ValueError(
            f"--verify: {len(pool)} stored cells can be verified (finished, with threads and a "
            f"clean commit recorded, in the current definition); {k} asked"
        )
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    chosen = random.Random(seed).sample(pool, k)
    print(f"verifying {k} of {len(pool)} eligible cells (draw seed {seed}): {', '.join(chosen)}")
    latest = store.latest()
    by_id = {rp.point.id: rp for rp in points}
    out = []
    for rid in chosen:
        row = latest[rid]
        with tempfile.TemporaryDirectory(prefix="fl-verify-") as tmp:
            runner = ReproRunner(
                [by_id[rid]],
                ResultStore(Path(tmp)),
                name=name,
                data_root=data_root,
                threads=int(row["threads"]),
            )
            new = runner.run_point(by_id[rid].point)
        n, differs = compare(row.get("metrics") or {}, new.get("metrics") or {})
        if new.get("status") != "finished":
            differs = [f"the re-run {new.get('status')}: {new.get('error', '')}"]
        entry = {
            "run": rid,
            "attempt": row.get("attempt"),
            "commit": commit,
            "stored_commit": row.get("commit"),
            "threads": int(row["threads"]),
            "identical": new.get("status") == "finished" and not differs and n > 0,
            "metrics_compared": n,
            "differs": differs,
            "versions": numeric_versions(),
            "stored_versions": row.get("versions"),
            "machine": runner.machine,
            "stored_machine": row.get("machine"),
            "draw_seed": seed,
            "verified_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if differs and new.get("status") == "finished":
            entry["values"] = {
                k: {"stored": (row.get("metrics") or {}).get(k), "rerun": new["metrics"].get(k)}
                for k in differs
            }
        with (store.root / LOG).open("a") as f:
            f.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
        verdict = "identical" if entry["identical"] else "DIFFERS: " + ", ".join(differs)
        if not entry["identical"] and row.get("machine") != entry["machine"]:
            verdict += (
                f" (the row was made on {processor_label(row.get('machine'))}, this run on "
                f"{processor_label(entry['machine'])}: --rerun-elsewhere WHY --point {rid} "
                "re-runs it here)"
            )
        print(f"{rid}: {verdict} ({n} metrics, {entry['threads']} thread(s))")
        out.append(entry)
    return out


def load_verification(
    store_root: Path, latest: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The latest verification of each stored cell of ``latest`` (id -> its current row), in
    the order first verified, split in two: those of the row the cell holds now, and those of
    an earlier attempt that a re-run has since replaced (``--rerun-elsewhere``: made on
    another processor). An entry names the attempt it re-ran (``attempt``); older entries,
    which do not, are matched by the commit of the row they re-ran (``stored_commit``)."""
    path = store_root / LOG
    found: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            if e.get("run") in latest:
                found[e["run"]] = e
    now: list[dict[str, Any]] = []
    earlier: list[dict[str, Any]] = []
    for rid, e in found.items():
        row = latest[rid]
        same = (
            e["attempt"] == row.get("attempt")
            if "attempt" in e
            else e.get("stored_commit") == row.get("commit")
        )
        (now if same else earlier).append(e)
    return now, earlier
