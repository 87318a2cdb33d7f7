"""Per-round overhead of fl-lightning against a bare PyTorch loop doing the same work.

Both sides run DP-FedAvg rounds on the same data, model, cohorts and batches: for each sampled
client, K local SGD steps from the global weights, the delta clipped to C, summed, one central
N(0, σ²C²) draw, divided by the cohort size, applied to the global model. The framework side
is the real `fl-lightning` stack (LightningCLI objects, Trainer, FederatedModule, strategy,
accountant); the bare side is a plain loop written below. Per-round times are medians over
rounds (first rounds dropped as warm-up), repeated and interleaved.

Second part: peak resident memory of a run with a population of 100 vs 10,000 clients (same
data, same cohort size), each in a fresh subprocess.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and recorded, never typed in. The run is appended to
``DIR/round_overhead.json`` and a section to ``DIR/round_overhead.md`` (``--out DIR``, default
benchmarks/results); nothing recorded is rewritten.

    python benchmarks/round_overhead.py [--rounds 30] [--repeats 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CLIENTS, COHORT, LOCAL_STEPS, BATCH, LR, CLIP, SIGMA, SEED = 100, 10, 5, 16, 0.05, 1.0, 1.0, 0

ARGS = [
    "--config", str(REPO / "configs/experiment/quickstart.yaml"),
    "--data.dataset", "mnist_offline", "--data.root", "../shared/data",  # the shared lookup
    "--data.num_clients", str(CLIENTS), "--data.partitioner", "iid",
    "--client", str(REPO / "configs/client/mnist_cnn_small.yaml"),
    "--client.local_steps", str(LOCAL_STEPS), "--client.batch_size", str(BATCH),
    "--client.lr", str(LR), "--client.momentum", "0.0",
    "--strategy.clip_norm", str(CLIP), "--strategy.noise_multiplier", str(SIGMA),
    "--model.clients_per_round", str(COHORT), "--model.eval_every", "0",
    "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip


def build(rounds: int, extra: list[str] | None = None, root: str | None = None):  # noqa: ANN201
    from fl_lightning.runs.cli_class import build_cli_class

    root = root or tempfile.mkdtemp()
    args = [*ARGS, *(extra or []), "--trainer.max_steps", str(rounds),
            "--trainer.default_root_dir", root]  # fmt: skip
    return build_cli_class()(args, run=False)


class RoundTimer:
    """Times from one round's start to the next (all Lightning per-step overhead included)."""

    def __init__(self) -> None:
        import lightning.pytorch as pl

        class _Timer(pl.Callback):
            def __init__(self) -> None:
                self.starts: list[float] = []

            def on_train_batch_start(self, *args) -> None:  # noqa: ANN002
                self.starts.append(time.perf_counter())

            def on_train_end(self, *args) -> None:  # noqa: ANN002
                self.starts.append(time.perf_counter())

        self.callback = _Timer()

    def per_round(self, warmup: int) -> float:
        s = self.callback.starts
        return statistics.median(b - a for a, b in zip(s[warmup:], s[warmup + 1 :]))


def framework_round_time(rounds: int, warmup: int) -> float:
    cli = build(rounds)
    timer = RoundTimer()
    cli.trainer.callbacks.append(timer.callback)
    cli.trainer.fit(cli.model, cli.datamodule)
    return timer.per_round(warmup)


def bare_round_time(rounds: int, warmup: int) -> float:
    """The same DP-FedAvg rounds in plain PyTorch (same data, split, model, cohorts, batches)."""
    from fl_lightning.utils.rng import generator_for

    cli = build(rounds)  # only to get identical data, partition and initial model
    data = cli.datamodule
    data.setup("fit")
    net = copy.deepcopy(cli.model.global_net)
    glob = copy.deepcopy(net)
    params, gparams = list(net.parameters()), list(glob.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        g = generator_for(SEED, r, "cohort")
        cohort = sorted(torch.randperm(CLIENTS, generator=g)[:COHORT].tolist())
        total = [torch.zeros_like(p) for p in gparams]
        for cid in cohort:
            x, y = data.client_data(cid)
            with torch.no_grad():
                for p, q in zip(params, gparams):
                    p.copy_(q)
            bg = generator_for(SEED, r, cid, "batches")
            order, cursor = torch.randperm(len(y), generator=bg), 0
            for _ in range(LOCAL_STEPS):
                if cursor >= len(order):
                    order, cursor = torch.randperm(len(y), generator=bg), 0
                idx = order[cursor : cursor + BATCH]
                cursor += BATCH
                opt.zero_grad()
                F.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
            with torch.no_grad():
                deltas = [p - q for p, q in zip(params, gparams)]
                norm = torch.sqrt(sum((d**2).sum() for d in deltas))
                scale = min(1.0, CLIP / float(norm))
                for t, d in zip(total, deltas):
                    t.add_(d, alpha=scale)
        noise_gen = generator_for(SEED, r, "central")
        with torch.no_grad():
            for q, t in zip(gparams, total):
                noise = torch.randn(t.shape, generator=noise_gen) * SIGMA * CLIP
                q.add_((t + noise) / COHORT)
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


def peak_memory_mb(num_clients: int) -> tuple[float, float]:
    """(peak RSS, RSS after training) in MB of a fresh process running 3 rounds."""
    code = f"""
import resource, sys, tempfile
sys.path.insert(0, {str(REPO)!r})
sys.argv = ['x']
import benchmarks.round_overhead as b
b.CLIENTS = {num_clients}
cli = b.build(3, ["--data.dataset", "synthetic", "--data.partitioner", "iid",
                  "--data.num_clients", "{num_clients}",
                  "--data.dataset_options", '{{"shape": [1, 28, 28], "num_examples": 25000}}'])
cli.trainer.fit(cli.model, cli.datamodule)
import os
current = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, current)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak, current = out.stdout.strip().splitlines()[-1].split()
    return float(peak), float(current)


def main() -> None:
    from _record import out_dir, record_run  # beside this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out",
        default=str(REPO / "benchmarks" / "results"),
        help="directory: append the run there",
    )
    args = parser.parse_args()
    if args.rounds <= args.warmup + 1:
        parser.error(f"--rounds: {args.rounds} must exceed --warmup + 1 ({args.warmup + 1})")
    out = out_dir(parser, args.out, "round_overhead")
    os.environ.setdefault("WANDB_MODE", "offline")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    fw, bare = [], []
    for _ in range(args.repeats):  # interleaved
        fw.append(framework_round_time(args.rounds, args.warmup))
        bare.append(bare_round_time(args.rounds, args.warmup))
    ratio = statistics.median(fw) / statistics.median(bare)
    (mem_small, end_small), (mem_large, end_large) = peak_memory_mb(100), peak_memory_mb(10_000)
    growth = mem_large / mem_small - 1
    command = "python benchmarks/round_overhead.py " + " ".join(sys.argv[1:])
    setting = (
        f"DP-FedAvg, MNIST CNN (8/16/64), {CLIENTS} clients, cohort {COHORT}, "
        f"{LOCAL_STEPS} local steps of batch {BATCH}, clip {CLIP}, σ {SIGMA}"
    )
    md = [
        f"- command: `{command}`; {setting}.",
        f"- {args.rounds} rounds a run ({args.warmup} warm-up dropped), {args.repeats} "
        "interleaved repeats; per-round medians.",
        "",
        "| | framework s/round | bare PyTorch s/round | ratio |",
        "|---|---|---|---|",
        *[
            f"| repeat {i + 1} | {a:.4f} | {b:.4f} | {a / b:.3f} |"
            for i, (a, b) in enumerate(zip(fw, bare))
        ],  # fmt: skip
        f"| **median** | {statistics.median(fw):.4f} | {statistics.median(bare):.4f} | "
        f"**{ratio:.3f}** (goal ≤ 1.10) |",
        "",
        "| population (cohort 10, 25,000 synthetic 28×28 examples) | peak RSS MB | RSS after "
        "training MB |",
        "|---|---|---|",
        f"| 100 clients | {mem_small:.0f} | {end_small:.0f} |",
        f"| 10,000 clients | {mem_large:.0f} | {end_large:.0f} |",
        f"| growth | **{growth * 100:.1f}%** (goal < 10%) | "
        f"{(end_large / end_small - 1) * 100:.1f}% |",
    ]
    record_run(
        out,
        "round_overhead",
        title=f"{args.repeats} repeats, {args.threads} torch thread(s)",
        intro="# Round overhead: fl-lightning vs bare PyTorch\n\n"
        "`benchmarks/round_overhead.py`; each run appended as measured.\n",
        lines=["", *md],
        load_before=load_before,
        command=command,
        threads=args.threads,
        setting=setting,
        framework_round_s=fw,
        bare_round_s=bare,
        ratio_median=ratio,
        peak_rss_mb_100_clients=mem_small,
        peak_rss_mb_10000_clients=mem_large,
        memory_growth=growth,
        end_rss_mb_100_clients=end_small,
        end_rss_mb_10000_clients=end_large,
    )


if __name__ == "__main__":
    main()
