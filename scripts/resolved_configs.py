"""Resolve every experiment config (as ``fl-lightning fit --config X --print_config`` does) and
compare two checkouts, so a refactor of configs/ can prove it changed nothing it did not mean to.

    python scripts/resolved_configs.py dump out.json          # this checkout
    python scripts/resolved_configs.py compare --against main  # a git ref against this checkout
    python scripts/resolved_configs.py compare --against main --ignore model.executor

``compare`` exports the ref with ``git archive`` into a temporary directory, resolves its
experiments there with its own code, resolves this checkout's, and prints every experiment whose
resolved config differs (a dotted key with both values). Keys given with ``--ignore`` (the
intentional changes) are skipped. Exit status 1 when anything else differs, 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def resolve_all(root: Path) -> dict[str, Any]:
    """{experiment path relative to configs/experiment: resolved config} for ``root``."""
    import yaml

    os.chdir(root)
    sys.path.insert(0, str(root))
    from fl_lightning.runs.cli_class import build_cli_class

    # LightningCLI warns when args= is given while sys.argv holds this script's arguments.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    make = build_cli_class()
    out = {}
    for path in sorted((root / "configs" / "experiment").rglob("*.yaml")):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            make(["fit", "--config", str(path), "--print_config"])
        out[str(path.relative_to(root / "configs" / "experiment"))] = yaml.safe_load(buf.getvalue())
    return out


def differences(a: Any, b: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from differences(
                a.get(key, "<absent>"), b.get(key, "<absent>"), f"{prefix}.{key}".lstrip(".")
            )
    elif a != b:
        yield prefix, a, b


def _dump_in(root: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "dump", str(out), "--root", str(root)]
    subprocess.run(cmd, check=True, env=env, cwd=root, stdout=subprocess.DEVNULL)


def compare(ref: str, ignore: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="fl-configs-") as tmp:
        old_root = Path(tmp) / "ref"
        old_root.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(old_root, filter="data")
        _dump_in(old_root, Path(tmp) / "old.json")
        _dump_in(REPO, Path(tmp) / "new.json")
        old = json.loads((Path(tmp) / "old.json").read_text())
        new = json.loads((Path(tmp) / "new.json").read_text())
    changed = 0
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            print(f"{name}: only in {'this checkout' if name in new else ref}")
            changed += 1
            continue
        diffs = [
            d
            for d in differences(old[name], new[name])
            if not any(d[0] == k or d[0].startswith(k + ".") for k in ignore)
        ]
        for key, a, b in diffs:
            print(f"{name}: {key}: {a!r} -> {b!r}")
        changed += bool(diffs)
    print(f"{changed} of {len(set(old) | set(new))} experiments resolve differently from {ref}")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump", help="resolve this checkout's experiments into a JSON file")
    dump.add_argument("out", type=Path)
    dump.add_argument("--root", type=Path, default=REPO)
    cmp = sub.add_parser("compare", help="compare a git ref's resolved experiments with these")
    cmp.add_argument("--against", required=True, help="a git ref, e.g. main or HEAD~3")
    cmp.add_argument("--ignore", action="append", default=[], help="a dotted key to skip")
    args = parser.parse_args(argv)
    if args.command == "dump":
        configs = resolve_all(args.root.resolve())
        args.out.write_text(json.dumps(configs, indent=1, sort_keys=True, default=str) + "\n")
        return 0
    check = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", args.against + "^{commit}"],
        capture_output=True,
    )
    if check.returncode:
        print(f"error: --against: {args.against!r} is not a git ref of {REPO}", file=sys.stderr)
        return 2
    return compare(args.against, args.ignore)


if __name__ == "__main__":
    sys.exit(main())
