"""DP-SGD step time and peak memory per engine, relative to a non-private step (issue #4).

One step = the engine's ``compute_gradients`` on one batch (per-example clip to C, sum, noise,
divide by the expected batch size; for the baseline the plain mean-loss backward) followed by
``torch.optim.SGD.step``: the same model, batch and optimizer for every variant. The baseline
``plain`` is the core's non-private ``GradientEngine``; ``bare`` is a loop of plain PyTorch
(``zero_grad``, forward, ``loss.backward()``, ``step``), timed in the same repetitions so that
the engine wrapper's own cost is a measured ratio too.

Time: median over ``--reps`` repetitions, variants interleaved within each repetition (the
machine is shared), after one warm-up step, with a fixed thread count (``--threads``). Each
step's wall time (``time.perf_counter``) and the CPU time of the timing thread
(``time.thread_time``; with ``--threads 1`` the step's compute, without the time the thread
waited for a core) are both recorded: on a loaded machine (load average above the core count)
the per-repetition CPU-time ratio to ``bare`` is the steadier number.

The machine's core count and load average (``os.getloadavg``, before and after) are measured
and recorded with the run, never typed in. ``--out DIR`` appends the run to
``DIR/dpsgd_step.json`` and a section to ``DIR/dpsgd_step.md``; nothing recorded is rewritten.

Memory: peak resident set size growth (``resource.getrusage().ru_maxrss``) of a fresh
subprocess per variant during two steps at batch 1024, minus the RSS just before them.
(tracemalloc does not see PyTorch's C++ CPU allocations and the torch profiler reports
allocations per op, not a peak, so the process's own high-water mark is used.)

``--profile`` adds, per model and batch, a torch.profiler breakdown of the bare loop against
``bk`` (profiled step by step in turn): ``bk``'s phases (``bk.forward``, ``bk.backward``,
``bk.norms`` = the per-example gradients and their norms, ``bk.clipped_sum``,
``dp_sgd.noise``) and the operators whose time differs most. The DP engines keep freed heap
memory for reuse (``fl_lightning/utils/heap.py``; each run says which policy it ran under);
``--default-heap`` runs under glibc's own policy instead, for comparison.

    PYTHONPATH=. python benchmarks/dpsgd_step.py --reps 5 --out benchmarks/results
    PYTHONPATH=. python benchmarks/dpsgd_step.py --reps 15 --engines bk --no-memory \
        --out benchmarks/results   # the bk ratio alone, more repeats
    # issue 37's check: bk ÷ bare ≤ 1.3x at batch 64 and 256 (read the CPU-time column when
    # the recorded load average is above the core count), with the breakdown
    PYTHONPATH=. python benchmarks/dpsgd_step.py --reps 21 --batches 64 256 --threads 1 \
        --engines bk --no-memory --profile --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _record import record_run

from fl_lightning.client.dp_sgd import build_engine
from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.utils.heap import retain_freed_heap

MODELS = {"MnistCNN": (MnistCNN, (1, 28, 28)), "CifarCNN": (CifarCNN, (3, 32, 32))}
ENGINES = ["plain", "opacus", "ghost", "functorch", "bk"]
TIMED = ["bare", *ENGINES]  # ``bare``: plain PyTorch, the reference of every ratio's baseline


def _bare_step(model: str, batch: int) -> Callable[[], None]:
    """The same model, batch and optimizer as ``_setup``, as a user writes the loop."""
    make, shape = MODELS[model]
    torch.manual_seed(0)
    net = make()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def _setup(model: str, engine: str, batch: int, physical: int | None) -> Callable[[], None]:
    make, shape = MODELS[model]
    torch.manual_seed(0)
    net = make()
    eng = build_engine(net, None if engine == "plain" else engine, max_physical_batch_size=physical)
    eng.configure_client(
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        expected_batch_size=float(batch),
        generator=torch.Generator().manual_seed(1),
    )
    opt = torch.optim.SGD(eng.params, lr=0.01)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    def step() -> None:
        eng.compute_gradients(x, y, F.cross_entropy)
        opt.step()

    return step


def time_steps(
    models: list[str], batches: list[int], engines: list[str], reps: int
) -> tuple[dict, dict]:
    """Every repetition's wall and thread-CPU seconds per (model, batch, variant), variants
    interleaved."""
    steps = {
        (m, b, e): _bare_step(m, b) if e == "bare" else _setup(m, e, b, None)
        for m in models
        for b in batches
        for e in engines
    }
    for fn in steps.values():
        fn()  # warm-up
    times: dict = {k: [] for k in steps}
    cpu: dict = {k: [] for k in steps}
    for _ in range(reps):
        for key, fn in steps.items():  # interleaved
            start, start_cpu = time.perf_counter(), time.thread_time()
            fn()
            cpu[key].append(time.thread_time() - start_cpu)
            times[key].append(time.perf_counter() - start)
    return times, cpu


#: The phases ``bk`` names for torch.profiler (``record_function`` in client/book_keeping.py and
#: client/dp_sgd.py); the rest of a step is the optimizer and the engine's own book-keeping.
PHASES = ["bk.forward", "bk.backward", "bk.norms", "bk.clipped_sum", "dp_sgd.noise"]


def profile_steps(model: str, batch: int, reps: int) -> list[str]:
    """Where ``bk``'s extra time goes: torch.profiler over ``reps`` steps of the bare loop and
    of ``bk``, one profiled step of each in turn (interleaved, after one warm-up step each),
    CPU time per step (the profiler's clock: wall time inside each operator, so a loaded
    machine inflates it; the timing table's CPU-time ratio is the measurement). Two tables:
    ``bk``'s phases, and the operators whose time differs most between the two."""
    from torch.profiler import ProfilerActivity, profile

    fns = {"bare": _bare_step(model, batch), "bk": _setup(model, "bk", batch, None)}
    totals = dict.fromkeys(fns, 0.0)
    ops: dict[str, dict[str, float]] = {name: {} for name in fns}
    phases: dict[str, dict[str, float]] = {name: {} for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(reps):
        for name, fn in fns.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            for e in prof.key_averages():
                ms = e.self_cpu_time_total / reps / 1e3
                totals[name] += ms
                if e.key in PHASES:
                    phases[name][e.key] = (
                        phases[name].get(e.key, 0.0) + e.cpu_time_total / reps / 1e3
                    )
                else:
                    ops[name][e.key] = ops[name].get(e.key, 0.0) + ms
    bare, bk = totals["bare"], totals["bk"]
    lines = [
        f"Profile, {model} batch {batch} (torch.profiler, time per step inside operators, mean "
        f"of {reps} steps, bare and bk in turn; a breakdown, not the measurement: the table "
        f"above is): bare {bare:.1f} ms, bk {bk:.1f} ms ({bk / bare:.2f}x).",
        "",
        "| bk phase | ms per step | share of bk |",
        "|---|---|---|",
    ]
    named = 0.0
    for phase in PHASES:
        ms = phases["bk"].get(phase, 0.0)
        named += ms
        lines.append(f"| {phase} | {ms:.1f} | {ms / bk:.0%} |")
    lines += [
        f"| rest (optimizer step, engine) | {bk - named:.1f} | {(bk - named) / bk:.0%} |",
        "",
        "| operator | bare ms | bk ms | bk − bare |",
        "|---|---|---|---|",
    ]
    names = set(ops["bare"]) | set(ops["bk"])
    diff = {n: ops["bk"].get(n, 0.0) - ops["bare"].get(n, 0.0) for n in names}
    for n in sorted(names, key=lambda n: -abs(diff[n]))[:12]:
        lines.append(
            f"| {n} | {ops['bare'].get(n, 0.0):.1f} | {ops['bk'].get(n, 0.0):.1f} "
            f"| {diff[n]:+.1f} |"
        )
    return [*lines, ""]


def _memory_child(model: str, engine: str, batch: int, physical: int | None, threads: int) -> None:
    torch.set_num_threads(threads)
    step = _setup(model, engine, batch, physical)
    with open("/proc/self/statm") as fh:  # current RSS (pages), not the earlier peak
        before = int(fh.read().split()[1]) * resource.getpagesize() / 1024
    step()
    step()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_growth_mib": (after - before) / 1024}))


def peak_memory(model: str, engine: str, batch: int, physical: int | None, threads: int) -> float:
    cmd = [sys.executable, __file__, "--threads", str(threads), "--child", model, engine]
    cmd += [str(batch), str(physical or 0)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    out = proc.stdout
    return json.loads(out.strip().splitlines()[-1])["peak_growth_mib"]


def _memory_variants(models: list[str]) -> list[tuple[str, str, int | None]]:
    """(model, engine, physical batch) of the memory table; the baseline first per model."""
    variants = []
    for m in models:
        variants.append((m, "plain", None))
        for e in ENGINES[1:]:
            # Unbounded per-example gradients of the MNIST CNN at 1024 would need 6.8 GB.
            full = e in ("ghost", "bk") or m == "CifarCNN"
            variants += [(m, e, p) for p in ((None, 32, 128) if full else (32, 128))]
    return variants


def _time_table(
    times: dict, cpu: dict, models: list[str], batches: list[int], engines: list[str]
) -> list:
    """Rows: median ms, ÷ the ``plain`` engine, ÷ ``bare`` PyTorch, the per-repetition ratio to
    ``plain`` (each repetition's own pair, so a slow moment hits both sides), and the
    per-repetition ratio of thread CPU time to ``bare`` (median, min–max)."""
    lines = [
        "| model | batch | variant | step ms | ÷ plain engine | ÷ bare PyTorch "
        "| ÷ plain per repetition (min–max) | CPU ms | CPU ÷ bare per repetition, median "
        "(min–max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        for b in batches:
            plain, bare = times[(m, b, "plain")], times[(m, b, "bare")]
            for e in engines:
                t = times[(m, b, e)]
                per_rep = [a / p for a, p in zip(t, plain, strict=True)]
                med = statistics.median(t)
                c = cpu[(m, b, e)]
                cpu_rep = [a / r for a, r in zip(c, cpu[(m, b, "bare")], strict=True)]
                lines.append(
                    f"| {m} | {b} | {e} | {med * 1e3:.1f} | "
                    f"{med / statistics.median(plain):.2f}x | "
                    f"{med / statistics.median(bare):.2f}x | "
                    f"{min(per_rep):.2f}–{max(per_rep):.2f}x | "
                    f"{statistics.median(c) * 1e3:.1f} | {statistics.median(cpu_rep):.2f}x "
                    f"({min(cpu_rep):.2f}–{max(cpu_rep):.2f}x) |"
                )
    return lines


def _memory_table(memory: dict, models: list[str], batch: int) -> list[str]:
    lines = [
        f"Peak memory, batch {batch}: growth of ru_maxrss (peak RSS) of a fresh "
        "process over two steps; `physical` = `max_physical_batch_size` (virtual batches).",
        "",
        "| model | engine | physical | peak MiB | ÷ non-private |",
        "|---|---|---|---|---|",
    ]
    for m in models:
        base = memory[(m, "plain", None)]
        for _, e, physical in _memory_variants([m]):
            mib = memory[(m, e, physical)]
            if e == "plain":
                lines.append(f"| {m} | plain | - | {mib:.0f} | 1.00x |")
                continue
            ratio = mib / max(base, 1e-9)
            lines.append(f"| {m} | {e} | {physical or 'all'} | {mib:.0f} | {ratio:.2f}x |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=ENGINES[1:],
        default=ENGINES[1:],
        help="DP engines to time (plain and bare are always timed)",
    )
    parser.add_argument("--memory-batch", type=int, default=1024)
    parser.add_argument("--out", default=None, help="directory: append the run there")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--default-heap",
        action="store_true",
        help="leave glibc's malloc policy as it is (FL_LIGHTNING_HEAP=default; by default the "
        "DP engines keep freed heap for reuse, fl_lightning/utils/heap.py)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile bare vs bk (torch.profiler, --reps steps each) per model and batch",
    )
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, engine, batch, physical = args.child
        _memory_child(model, engine, int(batch), int(physical) or None, args.threads)
        return
    if args.default_heap:
        os.environ["FL_LIGHTNING_HEAP"] = "default"  # read when the first engine is built
    if args.out is not None and not os.path.isdir(args.out):
        parser.error(f"--out: {args.out} is not a directory (the run is appended there)")
    torch.set_num_threads(args.threads)
    models = list(args.models)
    engines = ["bare", "plain", *args.engines]
    load_before = os.getloadavg()
    # Memory first: Linux keeps ru_maxrss across fork + exec, so children spawned after the
    # timing steps (GBs of per-example gradients in this process) would inherit its peak.
    memory = {}
    if not args.no_memory:
        memory = {
            (m, e, p): peak_memory(m, e, args.memory_batch, p, args.threads)
            for m, e, p in _memory_variants(models)
        }
    times, cpu = (
        ({}, {}) if args.memory_only else time_steps(models, args.batches, engines, args.reps)
    )
    command = "python benchmarks/dpsgd_step.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; variants interleaved in each of {args.reps} repetitions, "
        "median; goal (issue 37): DP-SGD step ÷ non-private step ≤ 1.3x on CPU.",
        "",
    ]
    heap = "glibc default" if args.default_heap else "kept for reuse (utils/heap.py)"
    if not args.default_heap and not retain_freed_heap():
        heap = "glibc default (retain_freed_heap declined: not glibc, or MALLOC_* set)"
    lines[0] += f" Freed heap: {heap}."
    if times:
        lines += [*_time_table(times, cpu, models, args.batches, engines), ""]
    if memory:
        lines += _memory_table(memory, models, args.memory_batch)
    if args.profile:
        for m in models:
            for b in args.batches:
                lines += ["", *profile_steps(m, b, args.reps)]
    record_run(
        args.out,
        "dpsgd_step",
        title=f"{args.reps} repetitions, {args.threads} torch thread(s)",
        intro="# DP-SGD step: time and peak memory relative to a non-private step (issue 4)\n\n"
        "`benchmarks/dpsgd_step.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        threads=args.threads,
        seconds={"/".join(map(str, k)): v for k, v in times.items()},
        cpu_seconds={"/".join(map(str, k)): v for k, v in cpu.items()},
        peak_growth_mib={"/".join(map(str, k)): v for k, v in memory.items()},
    )


if __name__ == "__main__":
    main()
