"""The client index, built once per file and cached: client id → number of examples.

Building it walks every client of the file once (for TFF's StackOverflow, 342,477 groups);
the result, two arrays (ids as UTF-8 bytes, int64 sizes), is saved as ``<key>.npz`` under the
cache folder and read back on later runs. The key hashes the source's resolved path, byte size
and modification time and the reader's ``kind`` (what a size means), so an edited file or a
different reader builds afresh. The cache folder: ``data.dataset_options.index_cache`` when
given, else ``$FL_LIGHTNING_CACHE``, else ``$XDG_CACHE_HOME/fl-lightning`` (``~/.cache``); the
index is written only after the whole walk succeeded, so a malformed file leaves nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE_ENV = "FL_LIGHTNING_CACHE"


def cache_folder(index_cache: str | None = None) -> Path:
    if index_cache:
        return Path(index_cache)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fl-lightning"


def index_key(sources: list[Path], kind: str) -> str:
    h = hashlib.sha256(kind.encode())
    for src in sources:
        st = src.stat()
        h.update(f"|{src.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def cached_index(
    sources: list[Path],
    kind: str,
    build: Callable[[], dict[str, np.ndarray]],
    index_cache: str | None = None,
) -> dict[str, np.ndarray]:
    """The index arrays of ``sources`` read by ``kind`` (``ids`` as UTF-8 bytes, ``sizes``
    int64, and whatever else the reader keeps, e.g. LEAF's file of each client): from the
    cache, else ``build()`` (then saved; a cache folder that cannot be written only loses the
    saving)."""
    path = cache_folder(index_cache) / f"index-{index_key(sources, kind)}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache entry is rebuilt
    arrays = build()
    arrays["ids"] = np.asarray(arrays["ids"], dtype=np.bytes_)
    arrays["sizes"] = np.asarray(arrays["sizes"], dtype=np.int64)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, allow_pickle=False, **arrays)
        os.replace(tmp, path)
    except OSError:
        pass
    return arrays
