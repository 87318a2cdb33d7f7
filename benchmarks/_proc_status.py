"""A field of this process's ``/proc/self/status`` (Linux), shared by the memory benchmarks:
``VmRSS`` (resident now), ``VmHWM`` (peak resident, resettable through ``clear_refs``)."""

from __future__ import annotations


def status_kib(field: str) -> int:
    """The value of ``field`` in KiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def status_mib(field: str) -> float:
    """The value of ``field`` in MiB."""
    return status_kib(field) / 1024
