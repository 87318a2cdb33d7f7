"""The machine's own speed, to record beside a timing taken on a shared or throttled host.

A fixed amount of work timed twice: 20 million Python multiply-adds (the interpreter's speed,
what most of the test suite's CPU is) and 30 products of two 600 × 600 float64 matrices (BLAS).
On the 2-core machine of docs/performance.md ("The test suite's time") the loop took 1.75 s to
3.1 s within one afternoon with nothing else running, so a suite time without this beside it
cannot be compared with another.

    python benchmarks/host_speed.py        # one line: "python loop 2.10 s, matmul 0.14 s"
"""

from __future__ import annotations

import time

import numpy as np

LOOP = "s = 0\nfor i in range(20_000_000):\n    s += i * i\n"


def python_loop_s() -> float:
    """The loop at module scope (global names, as a script's top level runs it; about half as
    fast as the same loop inside a function), which is how the afternoon's samples were taken."""
    code = compile(LOOP, "<host_speed>", "exec")
    start = time.perf_counter()
    exec(code, {})  # noqa: S102 - a fixed string of this file
    return time.perf_counter() - start


def matmul_s(size: int = 600, repeats: int = 30) -> float:
    x = np.random.default_rng(0).standard_normal((size, size))
    start = time.perf_counter()
    for _ in range(repeats):
        x @ x
    return time.perf_counter() - start


def main() -> None:
    print(f"python loop {python_loop_s():.2f} s, matmul {matmul_s():.2f} s")


if __name__ == "__main__":
    main()
