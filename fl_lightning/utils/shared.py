"""Where a checkout's ``shared/`` folders are (``shared/data``: the real MNIST test set;
``shared/papers``): one lookup for the data module, the reproduction harness and the tests.

The order is the environment's variable (``$FL_SHARED_DATA`` for ``data``), when set, and
nothing else; else the nearest ``shared/<name>`` *inside* the checkout (a device machine's copy
of the working tree carries ``shared/`` in it), then beside the checkout or one of its parents,
then beside the working directory or one of its parents.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SHARED_DATA_ENV = "FL_SHARED_DATA"
CHECKOUT = Path(__file__).resolve().parents[2]
"""The source checkout this package was imported from (its folder holding ``fl_lightning/``)."""
SHIPPED_DATA_ROOT = "../shared/data"
"""The shipped configs' ``data.root``: it holds only for a checkout that sits beside
``shared/``, so for this value (and only this one) the data module also looks where
:func:`shared_candidates` looks."""


def is_shipped_data_root(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` is the shipped configs' ``../shared/data`` (however it is spelt)."""
    return os.path.normpath(os.fspath(root)) == os.path.normpath(SHIPPED_DATA_ROOT)


def shared_candidates(name: str, env: str | None) -> list[Path]:
    """Where ``shared/<name>`` may be, nearest first: ``[$env]`` when the variable is set (an
    explicit setting is not second-guessed), else ``<checkout>/shared/<name>``, then
    ``<parent>/shared/<name>`` for each parent of the checkout, then the working directory and
    its parents."""
    if env and os.environ.get(env):
        return [Path(os.environ[env])]
    cwd = Path.cwd().resolve()
    bases = [CHECKOUT, *CHECKOUT.parents, cwd, *cwd.parents]
    out: list[Path] = []
    for base in bases:
        cand = base / "shared" / name
        if cand not in out:
            out.append(cand)
    return out


def find_shared(
    name: str, holds: Path | Callable[[Path], bool], env: str | None = None
) -> Path | None:
    """The first of :func:`shared_candidates` that holds what is wanted (``holds``: a relative
    path that must exist in it, or a predicate on the folder), resolved; None if none does."""
    test = holds if callable(holds) else (lambda folder: (folder / holds).exists())
    return next((c.resolve() for c in shared_candidates(name, env) if test(c)), None)


MNIST_TEST_MARKER = Path("MNIST", "raw", "t10k-images-idx3-ubyte.gz")


def find_shared_data() -> Path | None:
    """``shared/data`` with the real MNIST test set (``$FL_SHARED_DATA`` when set)."""
    return find_shared("data", MNIST_TEST_MARKER, SHARED_DATA_ENV)
