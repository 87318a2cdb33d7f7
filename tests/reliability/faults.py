"""Fault injection into ``fl_lightning.utils.atomic`` for the reliability tests.

``python -m tests.reliability.faults [--suffix S] FAULT N -- <fl-lightning args>`` runs the
real CLI with a fault on the N-th write (1-based) of a file whose name ends with ``S`` (default
``.ckpt``):

* ``kill-mid-write``: half of the bytes reach the temporary file, then the process SIGKILLs
  itself (a crash or ``scancel`` during the write);
* ``kill-before-rename``: the temporary file is complete and fsync-ed, the process dies before
  ``os.replace``;
* ``kill-after-rename``: the rename happened, the process dies before the folder is fsync-ed;
* ``enospc`` / ``erofs`` / ``eacces``: the write raises ``OSError`` with that errno (disk full,
  read-only filesystem, permission denied) and the run goes on to report it.

:func:`install` does the same in-process (tests use it with ``monkeypatch``).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

FAULTS = ("kill-mid-write", "kill-before-rename", "kill-after-rename", "enospc", "erofs", "eacces")
ERRNO = {"enospc": errno.ENOSPC, "erofs": errno.EROFS, "eacces": errno.EACCES}


def _target_of(tmp: str | os.PathLike) -> str:
    """``last.ckpt`` from ``.last.ckpt.tmp-<pid>-<hex>``."""
    name = Path(tmp).name
    return name[1:].split(".tmp-", 1)[0] if name.startswith(".") else name


def install(fault: str, nth: int, suffix: str = ".ckpt", setattr_=setattr) -> dict[str, int]:
    """Arms ``fault`` for the ``nth`` write of a ``*suffix`` file; returns the write counter."""
    from fl_lightning.utils import atomic

    if fault not in FAULTS:
        raise SystemExit(f"unknown fault {fault!r}; one of {FAULTS}")
    seen = {"writes": 0}
    real_write, real_replace, real_fsync_dir = atomic._write_all, atomic._replace, atomic._fsync_dir
    state = {"armed": False}

    def die() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def write_all(fd: int, data: memoryview) -> None:
        target = _target_of(os.readlink(f"/proc/self/fd/{fd}"))
        state["armed"] = False
        if target.endswith(suffix):
            seen["writes"] += 1
            state["armed"] = seen["writes"] == nth
        if state["armed"] and fault == "kill-mid-write":
            real_write(fd, data[: len(data) // 2])
            os.fsync(fd)
            die()
        if state["armed"] and fault in ERRNO:
            real_write(fd, data[: len(data) // 3])
            raise OSError(ERRNO[fault], os.strerror(ERRNO[fault]))
        real_write(fd, data)

    def replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        if state["armed"] and fault == "kill-before-rename":
            die()
        real_replace(src, dst)

    def fsync_dir(folder: Path) -> None:
        if state["armed"] and fault == "kill-after-rename":
            die()
        real_fsync_dir(folder)

    setattr_(atomic, "_write_all", write_all)
    setattr_(atomic, "_replace", replace)
    setattr_(atomic, "_fsync_dir", fsync_dir)
    return seen


def main(argv: list[str]) -> int:
    suffix = ".ckpt"
    if argv[:1] == ["--suffix"]:
        suffix, argv = argv[1], argv[2:]
    fault, nth, sep, *rest = argv
    assert sep == "--", "usage: faults FAULT N [--suffix S] -- <fl-lightning args>"
    install(fault, int(nth), suffix)
    from fl_lightning.cli import main as cli_main

    return cli_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
