"""Operators of one stacked round (issue 59): how many tensor operations a round issues, by kind,
beside its time and the sequential path's.

A round on the CPU issues the same operators as on a GPU, where each is (at least) one kernel
launch; counting them needs no GPU. Every ATen operator that reaches the dispatcher inside one
round of the vectorised executor is counted by a ``TorchDispatchMode`` (metadata-only views
included, as in the outside count of the issue) and sorted by kind:

- ``product``: convolutions and matrix products (``convolution``, ``mm``, ``bmm``, ``addmm``,
  ``baddbmm``, their backward; the per-example gradients and norms of DP-SGD are these);
- ``layout``: copies and layout changes (``copy_``, ``clone``, ``_to_copy``, ``cat``, ``stack``,
  ``index``/``index_put_`` gathers, ``repeat``, ``contiguous`` copies);
- ``view``: metadata-only views (``view``, ``permute``, ``select``, ``slice``, ``unsqueeze``,
  ``expand``, ``as_strided``, ...): no kernel on any device;
- ``random``: draws from a generator (``normal_``, ``randn``, ``uniform_``, ``bernoulli``, ...);
- ``other``: everything else (element-wise arithmetic, reductions, ...).

Workload (the issue's): cohort 100, every client in the cohort with 80 MNIST-shaped examples
(1×28×28, 10 classes; synthetic, the counts do not depend on the values), batch 10, 2 local steps,
SGD lr 0.05, FedAvg, the vectorised executor with its default bucket policy; DP-SGD rows: C = 1,
σ = 1 (Poisson batches, q = 10/80). Models: ``mnist_cnn``, the ``MnistCNN`` of
``configs/experiment/sweep_demo_dpsgd.yaml`` (channels 8, 16; hidden 64), and ``user_cnn``,
``benchmarks/cohort_speed.py``'s user-written CNN (functional ReLU/pooling, ``view``; 1.66M
parameters).

Times (``--reps`` > 0): the stacked and the sequential round interleaved (S V V S ...), the median
of each and the median of the per-pair ratios sequential ÷ stacked; the load average is recorded
before and after (``os.getloadavg``).

    cd benchmarks && PYTHONPATH=..:. python round_operators.py --models mnist_cnn --reps 7 \
        --out results

The same script on the code of another commit (``--noise-rng torch``: the option is newer)::

    rm -rf /tmp/base && mkdir /tmp/base && git archive 851f91d fl_lightning benchmarks \
        | tar -x -C /tmp/base && cp benchmarks/round_operators.py /tmp/base/benchmarks/ \
        && cd /tmp/base/benchmarks && PYTHONPATH=/tmp/base:. python round_operators.py \
        --models mnist_cnn --noise-rng torch --label 851f91d
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from types import SimpleNamespace

import torch
from _record import commit, out_dir, record_run
from cohort_speed import UserCNN
from torch.utils._python_dispatch import TorchDispatchMode

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.cnn import MnistCNN
from fl_lightning.records import RoundContext
from fl_lightning.server.executor import SequentialExecutor
from fl_lightning.server.round import train_cohort
from fl_lightning.server.vectorized_executor import VectorizedExecutor
from fl_lightning.strategies.fedavg import FedAvg

COHORT, EXAMPLES, BATCH, STEPS, LR = 100, 80, 10, 2, 0.05

PRODUCT = ("convolution", "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "einsum",
           "linear", "_convolution", "mkldnn_convolution", "addmv", "mv", "dot")  # fmt: skip
LAYOUT = ("copy_", "clone", "_to_copy", "cat", "stack", "index", "index_put_", "index_put",
          "_index_put_impl_", "repeat", "contiguous", "gather", "scatter", "scatter_add",
          "index_select", "index_add_", "index_add", "_unsafe_index", "im2col", "col2im",
          "unfold_backward", "constant_pad_nd", "pad", "flip", "roll",
          "_reshape_copy", "expand_copy", "permute_copy", "empty_like")  # fmt: skip
VIEW = ("view", "_unsafe_view", "permute", "select", "slice", "unsqueeze", "squeeze",
        "expand", "as_strided", "t", "transpose", "alias", "_reshape_alias", "reshape",
        "unfold", "narrow", "detach", "split", "split_with_sizes", "unbind", "chunk",
        "view_as", "flatten", "movedim", "diagonal", "lift_fresh", "unflatten",
        "_unsafe_split")  # fmt: skip
RANDOM = ("normal", "normal_", "randn", "rand", "uniform_", "bernoulli", "bernoulli_",
          "random_", "randint", "randperm", "exponential_", "multinomial")  # fmt: skip
KINDS = ("product", "layout", "view", "random", "other")


def kind(name: str) -> str:
    """The kind of an ATen operator, by its base name (``aten::convolution_backward`` is a
    product)."""
    base = name.split("::")[-1].split(".")[0]
    stem = base.removesuffix("_backward")
    if base in RANDOM:
        return "random"
    if base in PRODUCT or stem in PRODUCT:
        return "product"
    if base in VIEW:
        return "view"
    if base in LAYOUT or stem in LAYOUT:
        return "layout"
    return "other"


class OperatorCounter(TorchDispatchMode):
    """Counts every ATen operator dispatched while active (by name)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))

    def by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for name, n in self.ops.items():
            out[kind(name)] += n
        return {"total": sum(self.ops.values()), **out}


def sweep_demo_cnn() -> MnistCNN:
    """The model of configs/experiment/sweep_demo_dpsgd.yaml."""
    return MnistCNN(in_channels=1, num_classes=10, image_size=28, channels=(8, 16), hidden=64)


MODELS = {"mnist_cnn": sweep_demo_cnn, "user_cnn": UserCNN}


class Round:
    """One (model, DP) workload: data, the two executors and the round's context."""

    def __init__(
        self, model: str, dp: bool, cohort: int = COHORT, noise_rng: str = "torch"
    ) -> None:
        g = torch.Generator().manual_seed(0)
        n = cohort * EXAMPLES
        x, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
        idx = [torch.arange(i * EXAMPLES, (i + 1) * EXAMPLES) for i in range(cohort)]
        self.data = SimpleNamespace(
            client_sizes=lambda: [len(i) for i in idx],
            client_data=lambda c: (x[idx[c]], y[idx[c]]),
        )
        # noise_rng only where not the default, so that the script runs on code from before
        # the option (the before/after counts of issue 59: ``--noise-rng torch``)
        rng = {} if noise_rng == "torch" else {"noise_rng": noise_rng}
        dp_cfg = DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0, **rng) if dp else None

        def trainer() -> LocalTrainer:
            torch.manual_seed(0)
            net = MODELS[model]()
            client = ClientModule(net, num_classes=10, lr=LR, batch_size=BATCH,
                                  local_steps=STEPS, dp_sgd=dp_cfg)  # fmt: skip
            return LocalTrainer(client, torch.device("cpu"))

        seq = trainer()
        self.executors = {
            "sequential": SequentialExecutor(seq),
            "stacked": VectorizedExecutor(trainer()),
        }
        params = [p for p in seq.client.net.parameters() if p.requires_grad]
        self.global_flat = torch.cat([p.detach().reshape(-1) for p in params])
        self.clients = list(range(cohort))
        self.strategy = FedAvg()

    def run(self, path: str, r: int = 0) -> list:
        ctx = RoundContext(round_idx=r, total_rounds=1000, seed=0, num_clients=len(self.clients),
                           cohort=self.clients, expected_cohort_size=float(len(self.clients)),
                           sample_rate=1.0, global_params=self.global_flat)  # fmt: skip
        return list(train_cohort(self.executors[path], self.strategy, self.clients, ctx,
                                 self.data))  # fmt: skip


def count(rnd: Round) -> dict[str, int]:
    rnd.run("stacked")  # the first round builds and checks the stacked model (not counted)
    with OperatorCounter() as counter:
        rnd.run("stacked", 1)
    path = rnd.executors["stacked"].last_path  # type: ignore[attr-defined]
    assert path == "stacked", f"the vectorised executor fell back: {path}"
    return counter.by_kind()


def times(rnd: Round, reps: int) -> dict[str, float]:
    """Median seconds of each path and the median ratio sequential ÷ stacked, interleaved."""
    rnd.run("sequential")
    seq, vec, ratios = [], [], []
    for i in range(reps):
        order = ("sequential", "stacked") if i % 2 == 0 else ("stacked", "sequential")
        got = {}
        for path in order:
            t = time.perf_counter()
            rnd.run(path, 2 + i)
            got[path] = time.perf_counter() - t
        seq.append(got["sequential"])
        vec.append(got["stacked"])
        ratios.append(got["sequential"] / got["stacked"])
    return {"sequential_s": statistics.median(seq), "stacked_s": statistics.median(vec),
            "ratio": statistics.median(ratios), "ratios": ratios}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--reps", type=int, default=0, help="interleaved timed pairs (0: none)")
    parser.add_argument(
        "--time-models",
        nargs="+",
        default=["mnist_cnn"],
        choices=list(MODELS),
        help="models whose rounds are timed (with --reps > 0)",
    )
    parser.add_argument(
        "--noise-rng",
        nargs="+",
        default=["torch", "philox"],
        choices=["torch", "philox"],
        help="client.dp_sgd.noise_rng of the DP-SGD rows (each one a row)",
    )
    parser.add_argument("--out", help="directory: append round_operators.{md,json}")
    parser.add_argument("--note", help="free text recorded with the machine")
    parser.add_argument("--label", help="the code measured, recorded as its commit (default: "
                        "git rev-parse HEAD, +dirty with uncommitted changes)")  # fmt: skip
    args = parser.parse_args(argv)
    out = out_dir(parser, args.out, "round_operators")
    if args.reps < 0:
        parser.error(f"--reps: must be >= 0, got {args.reps}")
    label = args.label or commit()
    torch.manual_seed(0)
    load_before = os.getloadavg()
    rows = []
    lines = ["", "| model | DP-SGD noise | operators | product | layout | view | random | other "
             "| sequential s | stacked s | seq ÷ stacked (median of pairs) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    workloads = [(m, rng) for m in args.models for rng in (*args.noise_rng, None)]
    for model, rng in workloads:
        rnd = Round(model, rng is not None, noise_rng=rng or "torch")
        ops = count(rnd)
        timed = times(rnd, args.reps) if args.reps and model in args.time_models else None
        rows.append({"model": model, "dp_sgd": rng is not None, "noise_rng": rng,
                     "operators": ops, "times": timed})  # fmt: skip
        t = ("| {sequential_s:.3f} | {stacked_s:.3f} | {ratio:.2f}×".format(**timed)
             if timed else "| – | – | –")  # fmt: skip
        lines.append(f"| {model} | {rng or 'non-private'} | {ops['total']:,} | "
                     f"{ops['product']:,} | {ops['layout']:,} | {ops['view']:,} | "
                     f"{ops['random']:,} | {ops['other']:,} {t} |")  # fmt: skip
        print(lines[-1], flush=True)
    intro = ("# Operators of one stacked round\n\n"
             "Written by `benchmarks/round_operators.py` (see its docstring for the workload and "
             "the kinds); one section per run, newest last.\n")  # fmt: skip
    record_run(out, "round_operators", title=f"round operators at {label}", intro=intro,
               lines=lines, load_before=load_before, command=" ".join(sys.argv),
               note=args.note, commit=label, rows=rows, reps=args.reps)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
