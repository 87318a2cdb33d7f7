"""The tutorials' shown output: run each tutorial script (``docs/tutorials/scripts/``) and write
what it prints into its page, in the ```` ```text ```` block under the line
``<!-- output of docs/tutorials/scripts/NAME -->``, and what it prints on standard error in a
``<!-- stderr of docs/tutorials/scripts/NAME -->`` block under it (none where it prints nothing
there).

    python scripts/tutorial_outputs.py                 # every tutorial page
    python scripts/tutorial_outputs.py auditing        # the pages whose name contains "auditing"

Run it from the repository root with ``.venv`` active (the scripts call ``fl-lightning`` and
``python``), then read the diff. ``tests/test_tutorials.py`` (slow) runs the same scripts in a
fresh clone and fails when a page no longer shows what its script prints, numbers included.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = REPO / "docs" / "tutorials"
OUTPUT_BLOCK = re.compile(
    r"(<!-- output of (?P<script>docs/tutorials/scripts/[\w.-]+) -->\n```text\n)(?P<body>.*?)(```)",
    re.S,
)


ERROR_BLOCK = re.compile(
    r"\n<!-- stderr of (?P<script>docs/tutorials/scripts/[\w.-]+) -->\n```text\n(?P<body>.*?)```\n",
    re.S,
)
"""What a script prints on standard error, shown under its output block; no such block: the
page says the script prints nothing there (and the tests hold it to that)."""


def shown_outputs(page: Path) -> dict[str, str]:
    """``{script: the output the page shows}`` of every output block of ``page``."""
    return {m["script"]: m["body"] for m in OUTPUT_BLOCK.finditer(page.read_text())}


def shown_errors(page: Path) -> dict[str, str]:
    """``{script: what the page shows it prints on standard error}`` ("" where it shows no
    stderr block: nothing)."""
    shown = {m["script"]: m["body"] for m in ERROR_BLOCK.finditer(page.read_text())}
    return {script: shown.get(script, "") for script in shown_outputs(page)}


def normalise_errors(text: str) -> str:
    """Standard error as a page shows it: :func:`normalise`d, and "" when nothing was printed."""
    return normalise(text) if text.strip() else ""


def normalise(text: str) -> str:
    """What a script printed, as a page shows it: trailing blanks dropped, and paths in the
    system's temporary folder (an audit's shadow runs) written ``<tmp>/…``."""
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    text = re.sub(tmp + r"/[^\s/]+", "<tmp>/…", text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def run_script(
    script: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    """Runs one tutorial script (``bash`` for ``.sh``, ``python`` for ``.py``) from ``cwd``, the
    root of a checkout; its standard output is what the page shows."""
    program = ["bash"] if script.endswith(".sh") else [sys.executable]
    return subprocess.run(
        [*program, script],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_output(page: Path, script: str, output: str) -> None:
    """Replaces the body of ``script``'s output block in ``page`` by ``output``."""
    text = page.read_text()

    def body(m: re.Match[str]) -> str:
        return m.group(1) + output + m.group(4) if m["script"] == script else m.group(0)

    page.write_text(OUTPUT_BLOCK.sub(body, text))


def write_errors(page: Path, script: str, errors: str) -> None:
    """Shows ``errors`` (standard error, :func:`normalise_errors`d) under ``script``'s output
    block of ``page``: a stderr block written, replaced, or removed when there is nothing."""
    text = ERROR_BLOCK.sub(lambda m: "" if m["script"] == script else m.group(0), page.read_text())
    if errors:
        block = f"\n<!-- stderr of {script} -->\n```text\n{errors}```\n"
        end = next(m.end() for m in OUTPUT_BLOCK.finditer(text) if m["script"] == script)
        end = text.index("\n", end) + 1 if "\n" in text[end:] else len(text)
        text = text[:end] + block + text[end:]
    page.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="pages whose file name contains one of these")
    args = parser.parse_args()
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    for page in sorted(TUTORIALS.glob("*.md")):
        if args.only and not any(word in page.name for word in args.only):
            continue
        for script in shown_outputs(page):
            res = run_script(script, REPO, env)
            if res.returncode != 0:
                print(f"{script} exited {res.returncode}:\n{res.stderr[-3000:]}", file=sys.stderr)
                return 1
            write_output(page, script, normalise(res.stdout))
            write_errors(page, script, normalise_errors(res.stderr))
            print(f"{page.relative_to(REPO)}: wrote the output of {script}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
