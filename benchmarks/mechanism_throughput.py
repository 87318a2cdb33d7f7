"""Throughput of the local-DP weight mechanisms on a 10M-coordinate float32 vector (paper 003).

Reference: a bare PyTorch sign flip (``torch.rand`` + ``torch.where``, the least any sign
mechanism must do). Single thread (``torch.set_num_threads(1)``) so the numbers are per core.
Usage: ``python benchmarks/mechanism_throughput.py [--n 10000000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from fl_lightning.privacy.mechanisms.ldp import make_local_mechanism


def best_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(args.n).mul_(0.1).clamp_(-1, 1)
    g = torch.Generator().manual_seed(0)

    def reference():
        u = torch.rand(x.shape, generator=g)
        return torch.where(u < 0.6, x, -x)

    rows = [("bare torch rand+where (reference)", best_time(reference, args.repeats))]
    for name, variant in [
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
    ]:
        m = make_local_mechanism(name, epsilon=1.5, variant=variant)
        rows.append(
            (
                f"{name} ({variant})" if name == "spm" else name,
                best_time(lambda m=m: m.privatize(x, generator=g), args.repeats),
            )
        )
    ref = rows[0][1]
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
        f"n = {args.n:,}, best of {args.repeats}"
    )
    print("| mechanism | time (ms) | Mcoords/s/core | vs reference |")
    print("|---|---|---|---|")
    for label, t in rows:
        print(f"| {label} | {t * 1e3:.1f} | {args.n / t / 1e6:.0f} | {ref / t:.2f}x |")


if __name__ == "__main__":
    main()
