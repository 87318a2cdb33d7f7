"""A fresh clone of this checkout, as a newcomer gets it, for the tests that run what the docs
show (``tests/test_docs_commands.py``, ``tests/test_tutorials.py``).

:func:`fresh_clone` is ``git clone`` of the checkout with the working tree's uncommitted changes
(tracked files changed or deleted, untracked files git does not ignore) committed on top, so the
clone tests what is here, not only the last commit. :func:`clone_env` is the environment a
command runs in: W&B offline, the real MNIST test set given or hidden (``FL_SHARED_DATA``
pointing at it, or at a folder that does not exist; the clone sits in a temporary folder, so no
``shared/`` is beside it), and the clone's ``.venv/bin`` first on ``PATH`` as after
``source .venv/bin/activate``. :func:`seed_venv` gives the clone a ``.venv`` that sees this
checkout's installed packages, so ``bash scripts/setup.sh`` in the clone installs only the
clone itself (editable), in seconds, without downloading torch again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def fresh_clone(dest: Path) -> Path:
    """``git clone`` of this checkout into ``dest`` plus its uncommitted changes, committed."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout (the test clones it)")
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    changed = _git("diff", "HEAD", "--name-only", "-z", cwd=REPO).split("\0")
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", cwd=REPO).split("\0")
    for rel in filter(None, [*changed, *untracked]):
        src, dst = REPO / rel, dest / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.exists() and not src.exists():
            dst.unlink()
    _git("add", "-A", cwd=dest)
    _git(
        "-c", "user.name=fl-lightning tests", "-c", "user.email=tests@localhost",
        "commit", "-q", "--allow-empty", "-m", "the working tree under test", cwd=dest,
    )  # fmt: skip
    return dest


def seed_venv(clone: Path) -> Path:
    """``clone/.venv``: a new virtual environment whose ``sys.path`` ends with this checkout's
    ``site-packages`` (a plain path line: its editable install of *this* checkout is not
    loaded), so the clone's own ``bash scripts/setup.sh`` finds every dependency installed."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    ours = sysconfig.get_paths()["purelib"]
    (theirs,) = (venv / "lib").glob("python3*/site-packages")
    (theirs / "_fl_lightning_test_checkout_site.pth").write_text(ours + "\n")
    return venv


def clone_env(clone: Path, *, mnist: Path | None, tmp: Path) -> dict[str, str]:
    """The environment of a command run in ``clone``, with or without the MNIST files."""
    venv_bin = clone / ".venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        {
            "PATH": os.pathsep.join(
                [str(venv_bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
            ),  # fmt: skip
            "VIRTUAL_ENV": str(clone / ".venv"),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "OMP_NUM_THREADS": "1",
            "FL_SHARED_DATA": str(mnist if mnist is not None else tmp / "no-shared-data-here"),
            "FL_SHARED_PAPERS": str(tmp / "no-shared-papers-here"),
            "HOME": env.get("HOME", str(tmp)),
        }
    )
    return env
