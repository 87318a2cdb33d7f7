"""Keeping freed heap memory for reuse (glibc), so that a training step's large buffers do not
page-fault on every step.

A DP-SGD step allocates and frees tens of MB per step (per-example gradients, the activation
gradients kept for them, the noise). glibc's default policy returns freed memory at the top of
the heap to the kernel once more than twice the (dynamic, ≤ 32 MiB) mmap threshold is free
there, and the heap is fragmented enough that the next step's requests do not fit the free
chunks; so every step grows the heap again and touches fresh pages. Measured on the MNIST CNN
at batch 64 (1 thread, ``benchmarks/dpsgd_step.py``): ≈ 7,000 minor page faults per ``bk``
step, ≈ 10 ms of a ≈ 95 ms step, against none for a non-private step.

:func:`retain_freed_heap` fixes glibc's policy for the process: requests up to 32 MiB (the
ceiling the dynamic threshold reaches anyway) come from the heap, and up to 64 MiB of freed
memory stays at its top instead of going back to the kernel. The cost is that much resident
memory kept between steps. It changes no result, only where memory comes from.
``FL_LIGHTNING_HEAP=default`` in the environment leaves glibc's policy alone.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: ``mallopt`` parameters (glibc ``malloc.h``).
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
#: Requests up to this size come from the heap (glibc's ceiling of its dynamic threshold).
MMAP_THRESHOLD = 32 * 2**20
#: Freed memory kept at the heap's top (and extra obtained whenever it grows).
TOP_PAD = 64 * 2**20
#: ``FL_LIGHTNING_HEAP=default`` leaves glibc's policy as it is (e.g. to compare).
OPT_OUT = "FL_LIGHTNING_HEAP"
#: Environment variables through which a user has already chosen glibc's malloc policy.
USER_SETTINGS = (
    "MALLOC_TOP_PAD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)

_applied: bool | None = None


def retain_freed_heap() -> bool:
    """Sets glibc's ``M_MMAP_THRESHOLD`` to 32 MiB and ``M_TOP_PAD`` to 64 MiB, once per
    process; returns whether they are set. Nothing happens on another C library (macOS,
    musl), when the user chose a malloc policy through the environment (``USER_SETTINGS``),
    preloads another allocator (``LD_PRELOAD``: jemalloc, tcmalloc) or opts out
    (``FL_LIGHTNING_HEAP=default``)."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if os.environ.get(OPT_OUT) == "default":
        return False
    if any(os.environ.get(name) for name in (*USER_SETTINGS, "LD_PRELOAD")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # The threshold first: setting any of these freezes glibc's dynamic threshold.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TOP_PAD, TOP_PAD))
