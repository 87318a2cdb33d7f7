"""DP-SGD step time and peak memory per engine, relative to a non-private step (issue #4).

One step = the engine's ``compute_gradients`` on one batch (per-example clip to C, sum, noise,
divide by the expected batch size; for the baseline the plain mean-loss backward) followed by
``torch.optim.SGD.step``: the same model, batch and optimizer for every variant. The baseline
is the core's ``GradientEngine`` (a bare ``loss.backward()``), i.e. plain PyTorch.

Time: median over ``--reps`` repetitions, variants interleaved within each repetition (the
machine is shared), after one warm-up step, with a fixed thread count (``--threads``).

Memory: peak resident set size growth (``resource.getrusage().ru_maxrss``) of a fresh
subprocess per variant during two steps at batch 1024, minus the RSS just before them.
(tracemalloc does not see PyTorch's C++ CPU allocations and the torch profiler reports
allocations per op, not a peak, so the process's own high-water mark is used.)

    python benchmarks/dpsgd_step.py --reps 5 --out benchmarks/results/dpsgd_step.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from fl_lightning.client.dp_sgd import build_engine
from fl_lightning.models.cnn import CifarCNN, MnistCNN

MODELS = {"MnistCNN": (MnistCNN, (1, 28, 28)), "CifarCNN": (CifarCNN, (3, 32, 32))}
ENGINES = ["plain", "opacus", "ghost", "functorch", "bk"]


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


def time_steps(models: list[str], batches: list[int], engines: list[str], reps: int) -> dict:
    steps = {(m, b, e): _setup(m, e, b, None) for m in models for b in batches for e in engines}
    for fn in steps.values():
        fn()  # warm-up
    times: dict = {k: [] for k in steps}
    for _ in range(reps):
        for key, fn in steps.items():  # interleaved
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--memory-batch", type=int, default=1024)
    parser.add_argument("--out", default=None)
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--machine-note", default="2 cores, idle", help="recorded as is")
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, engine, batch, physical = args.child
        _memory_child(model, engine, int(batch), int(physical) or None, args.threads)
        return
    torch.set_num_threads(args.threads)
    models = list(MODELS)
    # Memory first: Linux keeps ru_maxrss across fork + exec, so children spawned after the
    # timing steps (GBs of per-example gradients in this process) would inherit its peak.
    memory = {
        (m, e, p): peak_memory(m, e, args.memory_batch, p, args.threads)
        for m, e, p in _memory_variants(models)
    }
    medians = {} if args.memory_only else time_steps(models, args.batches, ENGINES, args.reps)
    lines = [
        "# DP-SGD step: time and peak memory relative to a non-private step",
        "",
        f"- date: {datetime.date.today()}; machine: {platform.machine()}, "
        f"{platform.processor() or 'cpu'}, {torch.get_num_threads()} torch thread(s) "
        f"({args.machine_note}); torch {torch.__version__}",
        f"- `python benchmarks/dpsgd_step.py --reps {args.reps} --threads {args.threads}`; "
        "median of the repetitions, variants interleaved; goal: ratio <= 1.5x on CPU.",
        "",
        "| model | batch | engine | step ms | ÷ non-private |",
        "|---|---|---|---|---|",
    ]
    for m in models if medians else []:
        for b in args.batches:
            base = medians[(m, b, "plain")]
            for e in ENGINES:
                t = medians[(m, b, e)]
                lines.append(f"| {m} | {b} | {e} | {t * 1e3:.1f} | {t / base:.2f}x |")
    print("\n".join(lines), flush=True)
    lines += [
        "",
        f"Peak memory, batch {args.memory_batch}: growth of ru_maxrss (peak RSS) of a fresh "
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
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
