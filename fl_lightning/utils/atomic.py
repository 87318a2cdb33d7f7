"""Atomic file writes: a run killed at any instant leaves either the old file or the new one.

``atomic_write(path, data)`` writes ``data`` to a temporary file in the same folder
(``.<name>.tmp-<pid>-<random>``), ``fsync``s it, renames it over ``path`` with ``os.replace``
(atomic on POSIX and Windows within one filesystem) and ``fsync``s the folder so the rename
itself survives a power loss. A failure (disk full, read-only folder) removes the temporary
file and raises :class:`OutputWriteError`, an ``OSError`` whose message names the file and the
reason on one line; the previous ``path`` is untouched.

Checkpoints (``AtomicCheckpointIO``), ``summary.json``, ``config.yaml`` and the partition table
are written this way; the accountant's state lives in the checkpoint, so it is replaced
together with the weights it belongs to. The private helpers ``_write_all``, ``_replace`` and
``_fsync_dir`` are the three steps of a write, separate so that the fault tests
(``tests/reliability``) can kill a process inside each one.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning.pytorch.plugins.io import TorchCheckpointIO

_CHUNK = 1 << 20


class OutputWriteError(OSError):
    """A file of the run could not be written; the message is one line naming it and why."""

    def __str__(self) -> str:
        return str(self.strerror)


def _write_all(fd: int, data: memoryview) -> None:
    """Writes every byte of ``data`` (``os.write`` may write less than asked)."""
    done = 0
    while done < len(data):
        done += os.write(fd, data[done : done + _CHUNK])


_replace = os.replace


def _fsync_dir(folder: Path) -> None:
    """Makes a rename in ``folder`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder; the rename still happened
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(path: Path) -> None:
    """Removes temporary files of ``path`` left by killed writers (their process is gone)."""
    prefix = f".{path.name}.tmp-"
    with contextlib.suppress(OSError):
        for entry in path.parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            pid = entry.name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    entry.unlink()


def describe(err: OSError) -> str:
    """``err``'s reason in words (``No space left on device``), without the file name."""
    return err.strerror or str(err) or type(err).__name__


def atomic_write(path: str | os.PathLike, data: bytes | bytearray | memoryview | str) -> None:
    """Replaces ``path`` with ``data`` atomically and durably (see the module docstring)."""
    path = Path(path)
    payload = memoryview(data.encode() if isinstance(data, str) else data).cast("B")
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        _replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputWriteError(err.errno, f"cannot write {path}: {describe(err)}") from err
    _fsync_dir(path.parent)
    _remove_stale_temporaries(path)


CHECKPOINT_ERRORS = (pickle.UnpicklingError, EOFError, RuntimeError, OSError)


_CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive; a legacy pickle


def checkpoint_error(path: Any, err: BaseException, *, field: str = "ckpt_path") -> ValueError:
    """The one-line error (naming ``field``: ``ckpt_path``, audit's ``--checkpoint``) for a
    checkpoint ``torch.load(weights_only=True)`` could not read: a missing file, a file that
    is no checkpoint at all (a config given by mistake, a truncated or corrupt file), or a
    Python object it refuses (unpickling it could run code)."""
    hint = "give a .ckpt written by fl-lightning fit (<run>/checkpoints/last.ckpt)"
    if not os.path.isfile(path):
        return ValueError(f"{field}: {path} does not exist or is not a file; {hint}")
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as read_err:
        return ValueError(f"{field}: cannot read {path} ({describe(read_err)})")
    if not head.startswith(_CHECKPOINT_MAGIC):
        try:
            first = head.decode("utf-8").strip().splitlines()[0][:40]
        except (UnicodeDecodeError, IndexError):
            first = None
        what = f"a text file (it begins {first!r})" if first else "not a torch checkpoint"
        return ValueError(f"{field}: {path} is {what}, not a checkpoint; {hint}")
    text = str(err)
    refused = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", text)
    if isinstance(err, pickle.UnpicklingError) and refused:
        return ValueError(
            f"{field}: {path} holds a {refused.group(1).rstrip('.')} object, which "
            "torch.load(weights_only=True) refuses: fl-lightning loads only checkpoints of "
            "plain tensors and containers, since unpickling anything else can run code"
        )
    why = type(err).__name__
    return ValueError(f"{field}: {path} is not a readable checkpoint ({why}); {hint}")


def build_checkpoint_io() -> TorchCheckpointIO:  # an AtomicCheckpointIO (Lightning imported lazily)
    """Lightning's ``TorchCheckpointIO`` with atomic, fsync-ed saves and ``weights_only`` loads."""
    import torch
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    class AtomicCheckpointIO(TorchCheckpointIO):
        """Saves through :func:`atomic_write` (a killed or failed save leaves the previous
        checkpoint whole) and loads only with ``torch.load(weights_only=True)``: a checkpoint
        holding arbitrary Python objects (which unpickling would execute) is refused with a
        one-line ``ckpt_path`` error, and so is a truncated or corrupt one."""

        def save_checkpoint(
            self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
        ) -> None:
            if "://" in str(path):  # remote storage: Lightning's own fsspec transaction
                super().save_checkpoint(checkpoint, path, storage_options)
                return
            if storage_options is not None:
                raise TypeError(
                    "`Trainer.save_checkpoint(..., storage_options=...)` with `storage_options` "
                    f"arg is not supported for `{type(self).__name__}`."
                )
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            try:
                atomic_write(path, buffer.getbuffer())
            except OutputWriteError as err:
                kept = Path(path)
                note = (
                    f"the previous {kept.name} is intact" if kept.exists()
                    else "no earlier checkpoint was written there"
                )  # fmt: skip
                raise OutputWriteError(
                    err.errno, f"trainer.default_root_dir: checkpoint not saved, {err} ({note})"
                ) from err

        def load_checkpoint(
            self, path: Any, map_location: Any = None, weights_only: bool | None = None
        ) -> dict[str, Any]:
            if "://" in str(path):
                return super().load_checkpoint(path, map_location, weights_only=True)
            if not Path(path).is_file():
                raise FileNotFoundError(f"ckpt_path: no checkpoint file at {path}")
            try:
                return torch.load(path, map_location=map_location, weights_only=True)
            except CHECKPOINT_ERRORS as err:
                raise checkpoint_error(path, err) from err

    return AtomicCheckpointIO()
