#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs fl-lightning with its dev tools, pinned by
# constraints.txt. Re-running is cheap: the install is skipped while pyproject.toml and
# constraints.txt are unchanged. The editable install is a plain path entry to this checkout
# (pyproject.toml's package-dir), so the console script imports this checkout's fl_lightning
# and set-up prints no setuptools warning. `pre-commit install` then sets up the hooks of
# .pre-commit-config.yaml (pre-commit comes with the dev extras). GPU users: FL_CONSTRAINTS=/path/to/your-constraints.txt
# (e.g. a CUDA build of torch/torchvision) overrides the CPU pins.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
CONSTRAINTS="${FL_CONSTRAINTS:-constraints.txt}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.fl-lightning-installed"
want="$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c "$CONSTRAINTS" -e '.[dev]'
  echo "$want" > "$stamp"
fi
# Byte-compile the package as pip does for a regular install (it does not for an editable one):
# where PYTHONDONTWRITEBYTECODE is set, every Python process would otherwise compile its 30,000
# lines anew, about 1.2 CPU-s a process (each test worker, each CLI subprocess). Quick when
# nothing changed; a stale file is recompiled, and Python ignores an outdated .pyc anyway.
.venv/bin/python -m compileall -q fl_lightning
