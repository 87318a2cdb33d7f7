"""Throughput of the local-DP weight mechanisms on a 10M-coordinate float32 vector (paper 003).

One ``privatize`` call per timing, single thread (``torch.set_num_threads(1)``: numbers are per
core), median of ``--repeats`` runs after one warm-up, wall-clock and process CPU time.
Reference rows, timed in the same run:

* ``bare torch rand+where``: ``torch.rand`` + ``torch.where``, the least a sign mechanism must
  do with PyTorch's generator (mt19937);
* ``bare fast uniforms+mask``: the same sign flip with the package's random source
  (``fast_random.ChunkedUniforms``: SFC64 raw bits, chunked) and a {0, 1} mask;
* ``uniforms only``: drawing 10M uniforms with each source (what the generator alone costs).

``--legacy`` adds the pre-``fast_random`` implementations (torch.rand + torch.where, whole-vector
ops; copied below, benchmark only) so before/after come from one run.

The machine (CPU model, core count, torch threads, platform) and the load average before and
after the run are measured and printed, never typed in. ``--out DIR`` appends the run to
``DIR/mechanism_throughput.json`` and a section to ``DIR/mechanism_throughput.md``; nothing
recorded is rewritten.

Usage: ``PYTHONPATH=. python benchmarks/mechanism_throughput.py --repeats 7 --legacy
[--out benchmarks/results]``
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _record import out_dir, record_run

from fl_lightning.privacy.mechanisms.fast_random import ChunkedUniforms
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism
from fl_lightning.privacy.mechanisms.registry import make_local_mechanism

EPSILON = 1.5
MECHANISMS = [
    ("spm", "published"),
    ("spm", "debiased"),
    ("spm", "unbiased_c"),
    ("pnpm", "published"),
    ("duchi", "published"),
    ("ldp_fl", "published"),
    ("pm", "published"),
    ("hm", "published"),
    ("laplace", "published"),
    ("gaussian", "published"),
]


# --- Legacy implementations (main before fast_random), for the before/after comparison. ---
def _legacy_spm(
    w: torch.Tensor, *, keep_prob: float, bound: float, scale: float, generator: torch.Generator
) -> torch.Tensor:
    p, c = keep_prob, bound
    u = torch.rand(w.shape, generator=generator, dtype=w.dtype)
    b1, b2 = (c - 1.0) / p, -(c - 1.0) / (1.0 - p)
    a2 = -1.0 - b2 * p
    keep = u < p
    kept = u * (b1 * scale)
    kept.add_(scale)
    flipped = u.mul_(b2 * scale).add_(a2 * scale)
    return torch.where(keep, kept, flipped).mul_(w)


def _legacy_duchi(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    a = math.exp(epsilon)
    b = (a + 1.0) / (a - 1.0)
    u = torch.rand(t.shape, generator=generator, dtype=t.dtype)
    threshold = t * ((a - 1.0) / (2.0 * a + 2.0)) + 0.5
    pos = torch.full_like(t, b)
    return torch.where(u < threshold, pos, pos.neg())


def _legacy_pm(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    s = math.exp(epsilon / 2.0)
    c = (s + 1.0) / (s - 1.0)
    p = s / (s + 1.0)
    u = torch.rand(t.shape, generator=generator, dtype=t.dtype)
    left = t * ((c + 1.0) / 2.0) - (c - 1.0) / 2.0
    inside = left + u * ((c - 1.0) / p)
    outside = (u - p) * ((c + 1.0) / (1.0 - p)) - c
    outside = torch.where(outside >= left, outside + (c - 1.0), outside)
    return torch.where(u < p, inside, outside)


def legacy_privatize(m: LocalMechanism, x: torch.Tensor, g: torch.Generator) -> torch.Tensor | None:
    """The pre-fast_random ``privatize`` of mechanism ``m`` (None: unchanged mechanism)."""
    if m.name in ("spm", "pnpm"):
        return _legacy_spm(x, keep_prob=m.keep_prob, bound=m.bound, scale=m.scale, generator=g)
    if m.name == "duchi":
        return _legacy_duchi(x, epsilon=m.epsilon, generator=g)
    if m.name == "ldp_fl":
        t = ((x - m.centre) / m.radius).clamp_(-1.0, 1.0)
        return _legacy_duchi(t, epsilon=m.epsilon, generator=g).mul_(m.radius).add_(m.centre)
    if m.name == "pm":
        return _legacy_pm(x, epsilon=m.epsilon, generator=g)
    if m.name == "hm":
        use_pm = torch.rand(x.shape, generator=g, dtype=x.dtype) < m.alpha
        a = _legacy_pm(x, epsilon=m.epsilon, generator=g)
        b = _legacy_duchi(x, epsilon=m.epsilon, generator=g)
        return torch.where(use_pm, a, b)
    return None


# --- Timing. ---
def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of this process) over ``repeats`` calls.

    On a shared machine the CPU time (``time.process_time``) excludes time spent waiting for a
    core, so it is the steadier per-core figure; on an idle machine the two agree."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--legacy", action="store_true", help="also time the old code")
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "mechanism_throughput")
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    x = torch.randn(args.n).mul_(0.1).clamp_(-1, 1)
    g = torch.Generator().manual_seed(0)

    def torch_reference() -> torch.Tensor:
        u = torch.rand(x.shape, generator=g)
        return torch.where(u < 0.6, x, -x)

    def fast_reference() -> torch.Tensor:  # x·(2·[u < p] − 1) with the fast uniforms
        run = ChunkedUniforms(x, generator=g, draws=1)
        for c in run:
            torch.lt(c.u[0], 0.6, out=c.out)
            c.out.mul_(2.0).sub_(1.0).mul_(c.x)
        return run.result()

    def fast_uniforms_only() -> None:
        for _ in ChunkedUniforms(x, generator=g, draws=1):
            pass

    rows = [
        ("bare torch rand+where (reference)", median_time(torch_reference, args.repeats)),
        ("bare fast uniforms+mask (new reference)", median_time(fast_reference, args.repeats)),
        ("uniforms only: torch.rand", median_time(lambda: torch.rand(x.shape, generator=g), 3)),
        ("uniforms only: fast_random (SFC64 bits)", median_time(fast_uniforms_only, 3)),
    ]
    for name, variant in MECHANISMS:
        m = make_local_mechanism(name, epsilon=EPSILON, variant=variant)
        label = f"{name} ({variant})" if name == "spm" else name
        rows.append((label, median_time(lambda m=m: m.privatize(x, generator=g), args.repeats)))
        if args.legacy and legacy_privatize(m, x[:2], g) is not None:
            legacy = median_time(lambda m=m: legacy_privatize(m, x, g), args.repeats)
            rows.append((f"{label}, legacy (torch.rand)", legacy))
    ref_wall, ref_cpu = rows[0][1]
    command = "python benchmarks/mechanism_throughput.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; CPU: {cpu_model()}; n = {args.n:,}, eps = {EPSILON}, "
        f"median of {args.repeats} after a warm-up.",
        "",
        "| mechanism | wall ms | M coords/s (wall) | vs torch ref (wall) "
        "| CPU ms | M coords/s (CPU) | vs torch ref (CPU) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, (wall, cpu) in rows:
        lines.append(
            f"| {label} | {wall * 1e3:.1f} | {args.n / wall / 1e6:.0f} | {ref_wall / wall:.2f}x "
            f"| {cpu * 1e3:.1f} | {args.n / cpu / 1e6:.0f} | {ref_cpu / cpu:.2f}x |"
        )
    record_run(
        out,
        "mechanism_throughput",
        title=f"n = {args.n:,}, 1 torch thread",
        intro="# Mechanism throughput (paper 003 local-DP weight mechanisms)\n\n"
        "`benchmarks/mechanism_throughput.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        threads=1,
        machine_extra={"cpu_model": cpu_model()},
        seconds_wall_cpu={label: list(t) for label, t in rows},
    )


if __name__ == "__main__":
    main()
