"""Where a stored result came from: the code's commit (``git rev-parse HEAD``, ``+dirty`` when
tracked files differ from it) written into every store row, paths relative to the repository
root (a row must not hold the absolute paths of the machine that ran it), the one-off
migration of rows written before that, and the commits a report's points ran at."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from fl_lightning.sweeps.store import ResultStore

REPO = Path(__file__).resolve().parents[3]
STORE_MARK = "/docs/reproductions/store/"  # every repro store lives under it
DIRTY = "+dirty"


def _git(args: list[str], cwd: Path = REPO) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


OUTPUTS = "docs/reproductions"  # what the runs and reports write: not the code that ran


def dirty_files(root: Path = REPO) -> list[str]:
    """Tracked files that differ from HEAD, outside :data:`OUTPUTS` (the stores and reports
    the runs themselves append to)."""
    status = _git(
        ["status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){OUTPUTS}"],
        root,
    )
    return [line[3:] for line in (status or "").splitlines() if line.strip()]


def code_commit(root: Path = REPO) -> str | None:
    """``git rev-parse HEAD`` of the checkout the code runs from, ``+dirty`` appended when a
    tracked file outside the stores and reports differs from that commit (None outside a git
    checkout)."""
    head = _git(["rev-parse", "HEAD"], root)
    if not head:
        return None
    return head.strip() + (DIRTY if dirty_files(root) else "")


def rerunnable(row: dict[str, Any]) -> bool:
    """Whether a stored row says how to re-run it to the last digit: it finished, recorded the
    intra-op thread count it ran with (``threads``) and a clean commit (no :data:`DIRTY`)."""
    commit = str(row.get("commit") or "")
    return (
        row.get("status") == "finished"
        and isinstance(row.get("threads"), int)
        and bool(commit)
        and not commit.endswith(DIRTY)
    )


def _rel(text: str, root: str) -> str:
    """``text`` with the repository root ``root`` (and a trailing /) removed wherever it occurs
    (also inside a JSON argument such as the logger override)."""
    return text.replace(root.rstrip("/") + "/", "").replace(root.rstrip("/"), ".")


def relative_row(row: dict[str, Any], root: str | None = None) -> dict[str, Any]:
    """A store row with paths relative to the repository root: ``run_dir`` and every argument
    of ``command`` (the interpreter or entry point by its name only). ``root`` defaults to the
    row's own: the part of ``run_dir`` before ``/docs/reproductions/store/`` (rows written on
    another machine or checkout), else this checkout's."""
    run_dir = str(row.get("run_dir") or "")
    if root is None:
        root = run_dir.split(STORE_MARK)[0] if STORE_MARK in run_dir else str(REPO)
    out = dict(row)
    if run_dir:
        out["run_dir"] = _rel(run_dir, root)
    cmd = row.get("command")
    if isinstance(cmd, list) and cmd:
        first = str(cmd[0])
        head = os.path.basename(first) if first.startswith("/") else first
        args = [_rel(str(c), root) for c in cmd[1:]]
        for j, c in enumerate(args):  # a data root outside the checkout: relative to it too
            if c.startswith("--data.root=/"):
                args[j] = "--data.root=" + os.path.relpath(c.split("=", 1)[1], root)
        out["command"] = [head, *args]
    return out


class ProvenanceStore(ResultStore):
    """The result store whose rows record the code's commit and relative paths. The rows the
    runner keeps in memory (and runs from) stay absolute; only the stored copy changes."""

    def __init__(self, path: str | Path, worker: str | None = None) -> None:
        super().__init__(path, worker)
        self.commit = code_commit()

    def _append_unlocked(self, row: dict[str, Any]) -> None:
        stored = relative_row(row, str(REPO))
        if self.commit:
            stored["commit"] = self.commit
        super()._append_unlocked(stored)


def _blame(path: Path) -> dict[int, str]:
    """Line number (from 1) -> the commit that added the line (``git blame --porcelain``)."""
    out = _git(["blame", "--line-porcelain", "--", path.name], path.parent)
    commits: dict[int, str] = {}
    if not out:
        return commits
    for line in out.splitlines():
        parts = line.split(" ")
        if (
            len(parts) >= 3
            and len(parts[0]) == 40
            and all(c in "0123456789abcdef" for c in parts[0])
        ):
            commits[int(parts[2])] = parts[0]
    return commits


def migrate_store(store_dir: Path) -> tuple[int, int]:
    """The one-off migration of a store written before rows recorded their provenance: every
    row's ``run_dir`` and ``command`` relative to the repository root, and a row without a
    ``commit`` gets ``store_commit``: the commit that added the line to the store (``git
    blame``; the code's commit is not known for it). Rewrites ``results.jsonl`` in place
    (same rows, same order); returns (rows, rows changed)."""
    path = store_dir / "results.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"--migrate-store: no {path}")
    blame = _blame(path.resolve())
    lines = path.read_text().splitlines()
    out, changed = [], 0
    for i, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            out.append(line)
            continue
        new = relative_row(row)
        if "commit" not in new and "store_commit" not in new and i in blame:
            new["store_commit"] = blame[i]
        text = json.dumps(new, sort_keys=True, default=str)
        changed += text != line
        out.append(text)
    path.write_text("\n".join(out) + "\n")
    return len(lines), changed


def report_commits(store: ResultStore, ids: set[str]) -> dict[str, Any]:
    """The commits that produced a report's finished points: ``ran_at`` (the code's commit each
    row recorded, with its number of points) and, for rows from before that was recorded,
    ``added_to_store_by`` (the commit that added the row to the store: the row's
    ``store_commit`` from the migration, else ``git blame`` of the store now)."""
    ran: dict[str, int] = {}
    added: dict[str, int] = {}
    blame: dict[int, str] | None = None
    last: dict[str, tuple[int, dict[str, Any]]] = {}
    if store.path.exists():
        for i, line in enumerate(store.path.read_text().splitlines(), start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("id") in ids:
                last[row["id"]] = (i, row)
    for i, row in last.values():
        if row.get("status") != "finished":
            continue
        if row.get("commit"):
            ran[row["commit"]] = ran.get(row["commit"], 0) + 1
            continue
        commit = row.get("store_commit")
        if commit is None:
            if blame is None:
                blame = _blame(store.path.resolve())
            commit = blame.get(i, "uncommitted")
        added[commit] = added.get(commit, 0) + 1
    return {
        "ran_at": [{"commit": c, "points": n} for c, n in sorted(ran.items())],
        "added_to_store_by": [{"commit": c, "points": n} for c, n in sorted(added.items())],
        "note": "ran_at: the code's commit each point recorded when it ran (+dirty: with "
        "uncommitted changes); added_to_store_by: for points stored before rows recorded it, "
        "the commit that added the row to the store (git blame), not the code's commit",
    }
