"""Per-round server (aggregation) time of GCFL vs FedAvg, with a bare-PyTorch reference.

GCFL's correction costs O(M·(N−M)·d) (M references, N clients a round, d parameters) on top of
FedAvg's O(N·d) weighted mean. For N in {2, 10, 100} clients a round this times
``FedAvg.aggregate``, ``GCFL.aggregate`` (M = 1, and M = N/2) and bare-torch equivalents
(``torch.stack(...).mean(0)``; a plain loop of the same projections) on random updates, median
of several repeats, single-threaded CPU by default.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and printed, never typed in. ``--out DIR`` appends the run to
``DIR/gcfl_server_time.json`` and a section to ``DIR/gcfl_server_time.md``; nothing recorded is
rewritten.

Usage: PYTHONPATH=. python benchmarks/gcfl_server_time.py [--dim 100000] [--repeats 5]
[--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _record import out_dir, record_run

from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.gcfl import GCFL


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _bare_pcgrad(grads: torch.Tensor, m: int, generator: torch.Generator) -> torch.Tensor:
    refs = torch.randperm(len(grads), generator=generator)[:m]
    is_ref = torch.zeros(len(grads), dtype=torch.bool)
    is_ref[refs] = True
    out = grads.clone()
    for i in range(len(grads)):
        if is_ref[i]:
            continue
        g = out[i]
        for j in refs[torch.randperm(m, generator=generator)]:
            r = grads[j]
            dot = torch.dot(g, r)
            if dot < 0:
                g -= (dot / torch.dot(r, r)) * r
    return out.mean(0)


def _time_round(n: int, d: int, repeats: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(n)
    deltas = torch.randn(n, d, generator=g)  # noise-dominated: about half the pairs conflict
    updates = [ClientUpdate(i, deltas[i], 100, 0.0, metrics={"local_steps": 1.0}) for i in range(n)]
    ctx = RoundContext(0, 1, 0, n, list(range(n)), float(n), 1.0, torch.zeros(d))
    fedavg = FedAvg(weighting="uniform")
    row = {
        "N": n,
        "fedavg": _median_time(lambda: fedavg.aggregate(updates, ctx, generator=g), repeats),
        "bare_mean": _median_time(lambda: deltas.mean(0), repeats),
    }
    for m in sorted({1, max(1, n // 2)}):
        gcfl = GCFL(reference_clients=m, weighting="uniform")
        row[f"gcfl_M{m}"] = _median_time(
            lambda gcfl=gcfl: gcfl.aggregate(updates, ctx, generator=g), repeats
        )
        row[f"bare_pcgrad_M{m}"] = _median_time(lambda m=m: _bare_pcgrad(deltas, m, g), repeats)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "gcfl_server_time")
    torch.set_num_threads(args.threads)
    d = args.dim
    load_before = os.getloadavg()
    rows = []
    for n in (2, 10, 100):
        rows.append(_time_round(n, d, args.repeats))
        print(rows[-1], flush=True)
    command = "python benchmarks/gcfl_server_time.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; d = {d:,}, median of {args.repeats}, CPU.",
        "",
        "| N clients | FedAvg.aggregate | bare torch mean | GCFL M=1 | bare PCGrad M=1 | "
        "GCFL M=N/2 | bare PCGrad M=N/2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        half = max(1, r["N"] // 2)
        lines.append(
            f"| {r['N']} | {1e3 * r['fedavg']:.2f} ms | {1e3 * r['bare_mean']:.2f} ms | "
            f"{1e3 * r['gcfl_M1']:.2f} ms | {1e3 * r['bare_pcgrad_M1']:.2f} ms | "
            f"{1e3 * r[f'gcfl_M{half}']:.2f} ms (M={half}) | "
            f"{1e3 * r[f'bare_pcgrad_M{half}']:.2f} ms |"
        )
    print()
    record_run(
        out,
        "gcfl_server_time",
        title=f"d = {d:,}, {args.threads} torch thread(s)",
        intro="# GCFL server time vs FedAvg\n\n"
        "`benchmarks/gcfl_server_time.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        threads=args.threads,
        rows_seconds=rows,
    )


if __name__ == "__main__":
    main()
