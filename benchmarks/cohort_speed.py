"""Cohort speed (issue 22): clients/s of the sequential and vectorised executors vs a bare loop.

Workload: ``--cohorts`` clients × 60 examples (MNIST-shaped, 1×28×28, 10 classes), one local
epoch at batch 10 (6 steps a client), SGD lr 0.05, FedAvg; with ``--dp-sgd`` every client runs
sample-level DP-SGD (C = 1, σ = 1, engine ``auto``; the vectorised executor's stacked
book-keeping clipping). Two models with the same shape (1.66M parameters):

- ``mnist_cnn``: the project's ``MnistCNN`` (``nn.Sequential`` blocks);
- ``user_cnn``: :class:`UserCNN`, written here the way a user writes one (functional ReLU and
  pooling, ``x.view(x.size(0), -1)``, in-place activations), which no part of the core knows;

and, not of that shape, recurrent models:

- ``mnist_lstm``: ADP-FL's ``MnistLSTM`` (LSTM(28, 64) over the 28 image rows + Linear(64, 10),
  24,714 parameters);
- ``user_gru``: ``UserGRU`` (:class:`UserRecurrent`), written here the way a user writes one:
  ``nn.GRU(28, 64)`` over the image rows, Linear(64, 10) on the last hidden state ``h_n``
  (18,698 parameters);
- ``user_rnn``: ``UserRNN``, the same with ``nn.RNN(28, 64)`` (tanh; 6,666 parameters);
- ``char_lstm``: the project's Shakespeare ``CharLSTM`` as configured in
  ``configs/experiment/dp_fedasgp/shakespeare_lstm.yaml`` (Embedding(90, 8), two LSTM(256)
  layers, Linear(256, 90) on the last position; 822,570 parameters) on its natural data shape:
  sequences of 80 token ids of a 90-character vocabulary and the next character as the label,
  here **synthetic** (uniform random ids, seed 0; the speed does not depend on the values).

Their DP-SGD clients use Opacus' drop-ins (``DPLSTM`` / ``DPGRU`` / ``DPRNN``, the same
parameters: ``ClientModule`` refuses ``nn.LSTM`` and ``nn.GRU`` under DP-SGD; it accepts
``nn.RNN``, but no sequential engine runs it: ``auto``/``functorch`` fail inside ``nn.RNN``
under ``vmap``, ``ghost``/``opacus`` get no input gradient; engine ``auto`` picks ``opacus`` for
the drop-ins); their bare loops keep ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (non-private, as
above) and their DP ceilings run the sequential path's engine (``opacus``) on the drop-ins.

Variants, run on the same global weights, interleaved (ABC CBA ...), median of ``--reps``:

- ``bare``: a plain PyTorch loop written here (one reused model and ``torch.optim.SGD``, clients
  one by one, shuffled batches; non-private even with ``--dp-sgd``: the cost of privacy shows);
- ``sequential``: ``SequentialExecutor`` (LocalTrainer, FedAvg ``process_update``);
- ``vectorized``: ``VectorizedExecutor`` (stacked clients, ``client/stacked.py``);
- ``vectorized_base`` (with ``--baseline-ref REF``): the vectorised executor with the stacked
  recurrent layers of git revision REF (``fl_lightning/client/stacked_recurrent.py`` as it was
  there, loaded from ``git show``): an A/B of a kernel change in the same run;
- ``ceiling``: not a federated round: ONE shared model trained on batches of cohort × 10
  examples for as many steps as one client takes (the same training FLOPs as the round, none of
  the cohort's separate weights). A perfect stacking of the clients does this work *plus* keeping
  their weights apart, so ``ceiling ÷ sequential`` bounds what any vectorisation can gain on this
  machine. In DP-SGD rows the shared model runs the sequential path's DP-SGD engine (``bk``:
  per-example clipping of all cohort × 10 examples, in physical chunks of at most 1000) and draws
  and adds the cohort's Gaussian noise (cohort × parameters normals a step, into one reused
  buffer), i.e. the privacy work every client must do too;
- ``ceiling_cl``: the same with the model and inputs in ``channels_last`` memory (faster oneDNN
  convolutions for some shapes);
- ``ceiling10`` / ``ceiling10_cl`` (cohorts above 10): the same shared model on batches of 10
  clients × 10 examples (100), cohort ÷ 10 times as many steps: the same FLOPs, in batches that
  stay in the caches (a batch of 1,000 or 10,000 examples does not, so one huge batch is not the
  fastest way to do the work). The honest bound is the fastest of the ceilings.

``--precision bf16-mixed`` runs the local forward and loss of ``sequential``, ``vectorized``
and ``bare`` under bfloat16 autocast (``client.precision``; the same context in all three); the
vectorised executor then falls back to the sequential loop (its stacked autograd Functions are
not autocast), recorded as ``vectorized_path``; the ceilings stay float32; DP-SGD refuses it.

Printed and recorded per (model, DP, cohort): seconds a round, clients/s, each variant ÷ bare,
vectorised ÷ sequential and ceiling ÷ sequential (the faster ceiling); achieved FLOP/s (the
non-private training FLOPs of the round, counted by ``torch.utils.flop_counter``, ÷ seconds) ÷
the FLOP/s of one large matmul measured in the same run, between the rounds (the hardware's
limit at this thread count); and, with ``--memory``, each path's peak RSS above the RSS after
setup, one round in a fresh subprocess per path (bare, sequential, vectorised). The machine's
core count and load average (``os.getloadavg``, before and after) are measured, never typed in.

    PYTHONPATH=. python benchmarks/cohort_speed.py --cohorts 10 100 --reps 5 --memory \\
        --out benchmarks/results/cohort_speed.json

``--device cuda`` runs every path on a GPU (data, models, executors, bare loop and ceilings;
each round timed after ``torch.cuda.synchronize``; the matmul limit is an 8192² float32 product
at PyTorch's default settings; ``--memory`` then reports the peak of PyTorch's allocated device
memory above setup instead of RSS; the machine record names the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from _proc_status import status_kib
from _record import machine as measured_machine
from torch import nn

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.dp_sgd import forward_precision
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.char_lstm import CharLSTM
from fl_lightning.models.cnn import MnistCNN
from fl_lightning.models.lstm import MnistLSTM
from fl_lightning.records import RoundContext
from fl_lightning.server.executor import SequentialExecutor
from fl_lightning.server.round import train_cohort
from fl_lightning.server.vectorized_executor import VectorizedExecutor
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.utils.flat import flatten, flatten_into, load_flat_, trainable_parameters

BATCH, LR = 10, 0.05
EXAMPLES = 60  # per client (``--examples``)
PRECISION = "32"  # client.precision of bare, sequential and vectorized (``--precision``)
DEVICE = torch.device("cpu")  # ``--device``: where the data, the models and every path run


def sync() -> None:
    """Waits for the device's queued work (a CUDA round is timed when it has finished)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


class UserCNN(nn.Module):
    """A user's MNIST CNN of MnistCNN's shape, written without ``nn.Sequential``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x), inplace=True), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(x.size(0), -1)
        return self.fc2(F.relu(self.fc1(x)))


class UserRecurrent(nn.Module):
    """A user's recurrent classifier of MnistLSTM's shape: ``nn.GRU(28, 64)`` (``UserGRU``) or
    a plain tanh ``nn.RNN(28, 64)`` (``UserRNN``) over the image rows and a Linear head on the
    last hidden state; ``dp=True`` builds Opacus' drop-in (``DPGRU`` / ``DPRNN``, same
    parameters), which ``ClientModule`` needs under DP-SGD."""

    def __init__(self, layer: str, dp: bool = False) -> None:
        super().__init__()
        from opacus.layers import DPGRU, DPRNN

        kinds = {"gru": (nn.GRU, DPGRU), "rnn": (nn.RNN, DPRNN)}
        self.rnn: nn.Module = kinds[layer][dp](28, 64, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x.squeeze(1))  # (B, 1, 28, 28) -> (B, 28, 28)
        return self.fc(h[-1])


def UserGRU(dp: bool = False) -> UserRecurrent:  # noqa: N802 - a model name, as in the tables
    return UserRecurrent("gru", dp)


def UserRNN(dp: bool = False) -> UserRecurrent:  # noqa: N802 - a model name, as in the tables
    return UserRecurrent("rnn", dp)


def char_lstm(dp: bool = False) -> nn.Module:
    """The Shakespeare configuration (configs/experiment/dp_fedasgp/shakespeare_lstm.yaml)."""
    return CharLSTM(vocab_size=VOCAB, embedding_dim=8, hidden_size=256, num_layers=2,
                    dp_lstm=dp, last_only=True)  # fmt: skip


VOCAB, SEQ_LEN = 90, 80  # CharLSTM: LEAF Shakespeare's characters and sequence length
MODELS = {"mnist_cnn": MnistCNN, "user_cnn": UserCNN, "mnist_lstm": MnistLSTM,
          "user_gru": UserGRU, "user_rnn": UserRNN, "char_lstm": char_lstm}  # fmt: skip
#: under DP-SGD, the clients' (and the ceiling's) model where it differs (Opacus' drop-ins)
DP_MODELS = {
    "mnist_lstm": lambda: MnistLSTM(impl="opacus"),
    "user_gru": lambda: UserGRU(dp=True),
    "user_rnn": lambda: UserRNN(dp=True),
    "char_lstm": lambda: char_lstm(dp=True),
}
#: models on token sequences (the others read MNIST-shaped images)
TOKEN_MODELS = {"char_lstm"}


def make_inputs(model: str, n: int, g: torch.Generator | None = None) -> tuple:
    """n inputs and labels of the model's data shape: 1×28×28 images and 10 classes, or
    (CharLSTM) SEQ_LEN synthetic token ids and the next one of VOCAB."""
    if model in TOKEN_MODELS:
        x = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=g)
        return x, torch.randint(0, VOCAB, (n,), generator=g)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def make_data(clients: int, model: str = "mnist_cnn") -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    n = clients * EXAMPLES
    x, y = (t.to(DEVICE) for t in make_inputs(model, n, g))
    indices = [
        torch.arange(i * EXAMPLES, (i + 1) * EXAMPLES, device=DEVICE) for i in range(clients)
    ]
    return SimpleNamespace(
        train=SimpleNamespace(x=x, y=y),  # the bare and ceiling loops read the whole split
        client_indices=indices,
        client_sizes=lambda: [len(i) for i in indices],  # the executors read these two
        client_data=lambda c: (x[indices[c]], y[indices[c]]),
    )


def bare_round(net: nn.Module, global_flat: torch.Tensor, data, clients) -> None:  # noqa: ANN001
    """The bare PyTorch reference: one reused model and optimizer, clients one by one."""
    params = trainable_parameters(net)
    opt = torch.optim.SGD(params, lr=LR)
    buf = torch.empty_like(global_flat)
    for cid in clients:
        x, y = data.client_data(cid)
        load_flat_(params, global_flat)
        order = torch.randperm(len(y), device=DEVICE)
        for i in range(0, len(y), BATCH):
            idx = order[i : i + BATCH]
            opt.zero_grad(set_to_none=True)
            with forward_precision(PRECISION, x.device):
                loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
        flatten_into(params, buf).clone().sub_(global_flat)


def ceiling_round(  # noqa: PLR0913
    net: nn.Module,
    global_flat: torch.Tensor,
    data,  # noqa: ANN001
    clients_per_step: int,
    engine=None,  # noqa: ANN001
    channels_last: bool = False,
) -> None:
    """One shared model, steps of clients_per_step × BATCH examples over the whole cohort's data:
    the FLOPs of a perfectly stacked round without its cohort of weights; with a DP-SGD
    ``engine`` (``bk``) its per-example clipping of every example and the noise of
    clients_per_step clients a step (as many normals in all as the clients draw)."""
    params = trainable_parameters(net)
    load_flat_(params, global_flat)
    x, y = data.train.x, data.train.y
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(params, lr=LR)
    big = BATCH * clients_per_step
    order = torch.randperm(len(y), device=DEVICE)
    noise = [torch.empty_like(p) for p in params] if engine is not None else []
    for i in range(0, len(y), big):
        idx = order[i : i + big]
        opt.zero_grad(set_to_none=True)
        if engine is None:
            F.cross_entropy(net(x[idx]), y[idx]).backward()
        else:
            sums = engine._sums
            for s in sums:
                s.zero_()
            for lo in range(0, len(idx), 1000):
                part = idx[lo : lo + 1000]
                engine._clipped_sum_(x[part], y[part], F.cross_entropy, sums)
            for s, buf in zip(sums, noise):
                for _ in range(clients_per_step):  # each client's own N(0, σ²C²I), added
                    s.add_(buf.normal_())
            for p, s in zip(params, sums):
                p.grad = s.div(len(idx))
        opt.step()


def train_flops(make_net, model: str) -> int:  # noqa: ANN001
    """FLOPs of one non-private training step (forward + backward) on a batch of BATCH."""
    from torch.utils.flop_counter import FlopCounterMode

    net = make_net()
    x, y = make_inputs(model, BATCH)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(net(x), y).backward()
    return counter.get_total_flops()


def matmul_flops_per_s(size: int = 2048, reps: int = 5) -> float:
    """FLOP/s of one large float32 matmul (the best of ``reps``): the machine's limit. On a GPU
    the product is 8192² (2048² does not fill one) at PyTorch's default float32 settings, the
    settings the models train with."""
    if DEVICE.type == "cuda":
        size = max(size, 8192)
    a, b = torch.randn(size, size, device=DEVICE), torch.randn(size, size, device=DEVICE)
    a @ b
    sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best


def baseline_recurrent(ref: str):  # noqa: ANN201
    """``StackedRecurrent`` of ``fl_lightning/client/stacked_recurrent.py`` at git revision
    ``ref`` (loaded as a separate module)."""
    import importlib.util
    import tempfile

    path = "fl_lightning/client/stacked_recurrent.py"
    src = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location("stacked_recurrent_baseline", fh.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StackedRecurrent


class Setup:
    """The executors and data of one (model, DP, cohort) row."""

    def __init__(
        self, model: str, dp: bool, cohort: int, baseline: str | None = None, wide: int = 0
    ) -> None:
        self.make_net = MODELS[model]
        private_net = DP_MODELS.get(model, self.make_net) if dp else self.make_net
        self.data = make_data(cohort, model)
        self.clients = list(range(cohort))
        dp_cfg = DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0) if dp else None
        classes = VOCAB if model in TOKEN_MODELS else 10

        def client() -> ClientModule:
            torch.manual_seed(0)
            return ClientModule(private_net(), num_classes=classes, lr=LR, batch_size=BATCH,
                                dp_sgd=dp_cfg, precision=PRECISION)  # fmt: skip

        seq_client = client()
        self.global_flat = flatten(trainable_parameters(seq_client.net)).to(DEVICE)
        self.bare_net = self.make_net().to(DEVICE)
        self.ceiling_nets = {"ceiling": private_net().to(DEVICE)}
        if model not in TOKEN_MODELS:  # channels_last: image inputs only
            cl_net = private_net().to(DEVICE, memory_format=torch.channels_last)
            probe = torch.zeros(2, 1, 28, 28, device=DEVICE)
            try:  # a user's ``x.view(x.size(0), -1)`` rejects channels_last activations
                cl_net(probe.contiguous(memory_format=torch.channels_last))
                self.ceiling_nets["ceiling_cl"] = cl_net
            except RuntimeError:
                pass
        self.ceiling_engines = dict.fromkeys(self.ceiling_nets)
        # variant -> (net, clients a step); the nets are reloaded from the global weights
        self.ceilings = {v: (v, cohort) for v in self.ceiling_nets}
        if cohort > 10:
            self.ceilings.update({v.replace("ceiling", "ceiling10"): (v, 10)
                                  for v in self.ceiling_nets})  # fmt: skip
        if dp:
            from fl_lightning.client.book_keeping import unsupported_layers
            from fl_lightning.client.dp_sgd import BookKeepingEngine, build_engine

            for v, net in self.ceiling_nets.items():
                if unsupported_layers(net):  # the sequential path's engine (DPLSTM: opacus)
                    self.ceiling_engines[v] = build_engine(net, "auto", batch_size=BATCH)
                else:
                    self.ceiling_engines[v] = BookKeepingEngine(net)
        self.executors = {
            "sequential": SequentialExecutor(LocalTrainer(seq_client, DEVICE)),
            "vectorized": VectorizedExecutor(LocalTrainer(client(), DEVICE)),  # default buckets
        }
        self.baseline = baseline_recurrent(baseline) if baseline else None
        if baseline:
            self.executors["vectorized_base"] = VectorizedExecutor(LocalTrainer(client(), DEVICE))
        if wide:  # ``--max-clients``: buckets of up to ``wide`` clients (default: 64)
            self.executors["vectorized_wide"] = VectorizedExecutor(
                LocalTrainer(client(), DEVICE), max_clients=wide
            )
        self.strategy = FedAvg()

    def ctx(self, r: int) -> RoundContext:
        return RoundContext(
            round_idx=r,
            total_rounds=1000,
            seed=0,
            num_clients=len(self.clients),
            cohort=self.clients,
            expected_cohort_size=float(len(self.clients)),
            sample_rate=1.0,
            global_params=self.global_flat,
        )

    def run(self, variant: str, r: int, keep: bool = False) -> list:
        """One round of ``variant``. An executor's updates are consumed one by one and
        dropped, as a FedAvg round streams them into its sum (holding a cohort of 1000 deltas
        of 1.66M floats is 6.6 GB, which made the earlier cohort-1000 runs page); ``keep``
        returns them (the untimed round that compares the paths)."""
        if variant == "bare":
            bare_round(self.bare_net, self.global_flat, self.data, self.clients)
            return []
        if variant in self.ceilings:
            net, per_step = self.ceilings[variant]
            ceiling_round(self.ceiling_nets[net], self.global_flat, self.data, per_step,
                          self.ceiling_engines[net], net == "ceiling_cl")  # fmt: skip
            return []
        import fl_lightning.client.stacked as stacked_module

        current = stacked_module.StackedRecurrent
        if variant == "vectorized_base":  # its model is stacked on its first round
            stacked_module.StackedRecurrent = self.baseline  # type: ignore[misc]
        try:
            updates = train_cohort(self.executors[variant], self.strategy, self.clients,
                                   self.ctx(r), self.data)  # fmt: skip
            if keep:
                return list(updates)
            for _ in updates:
                pass
        finally:
            stacked_module.StackedRecurrent = current  # type: ignore[misc]
        return []


VARIANTS = ("bare", "sequential", "vectorized", "ceiling", "ceiling_cl", "ceiling10",
            "ceiling10_cl")  # fmt: skip
MEMORY_VARIANTS = VARIANTS[:3]


def measure_row(  # noqa: PLR0913
    model: str,
    dp: bool,
    cohort: int,
    reps: int,
    skip: tuple[str, ...] = (),
    baseline: str | None = None,
    wide: int = 0,
) -> dict:
    s = Setup(model, dp, cohort, baseline, wide)
    variants = [v for v in VARIANTS if (not v.startswith("ceiling") or v in s.ceilings)
                and v not in skip]  # fmt: skip
    if baseline:
        variants.insert(3, "vectorized_base")
    if wide:
        variants.insert(3, "vectorized_wide")
    for v in variants:
        s.run(v, 0)  # warm-up (and the vectorised path's one-time stacking and check)
    times: dict[str, list[float]] = {v: [] for v in variants}
    peaks = []  # the matmul limit, measured between the rounds (the load changes)
    for r in range(reps):
        for v in variants if r % 2 == 0 else variants[::-1]:
            peaks.append(matmul_flops_per_s(reps=2))
            sync()
            t = time.perf_counter()
            s.run(v, r + 1)
            sync()
            times[v].append(time.perf_counter() - t)
    peak = statistics.median(peaks)
    med = {v: statistics.median(t) for v, t in times.items()}
    ceilings = [v for v in med if v.startswith("ceiling")]  # none when all are skipped
    fastest = min(ceilings, key=med.__getitem__) if ceilings else None
    vec_path = s.executors["vectorized"].last_path
    assert vec_path == "stacked" or PRECISION != "32", "vectorised fell back"
    # the same round on both paths, untimed: the sequential updates held, the vectorised ones
    # compared as they come
    seq = s.run("sequential", reps + 1, keep=True)
    vec = train_cohort(s.executors["vectorized"], s.strategy, s.clients, s.ctx(reps + 1), s.data)
    max_diff = max(float((a.delta - b.delta).abs().max()) for a, b in zip(seq, vec, strict=True))
    if baseline:
        base = s.run("vectorized_base", reps + 1, keep=True)
        max_diff = max(max_diff, *(float((a.delta - b.delta).abs().max())
                                   for a, b in zip(seq, base, strict=True)))  # fmt: skip
    del seq
    # counted on the DP drop-in where there is one: the counter does not see nn.LSTM's / nn.GRU's
    # fused kernels, but sees DPLSTM's / DPGRU's per-step Linear layers (the same products)
    flops = train_flops(DP_MODELS.get(model, s.make_net), model) * (EXAMPLES // BATCH) * cohort
    return {
        "model": model,
        "dp_sgd": dp,
        "cohort": cohort,
        "seconds": med,
        "all_seconds": times,
        "clients_per_s": {v: cohort / t for v, t in med.items()},
        "ratio_to_bare": {v: med["bare"] / t for v, t in med.items()},
        "vectorized_over_sequential": med["sequential"] / med["vectorized"],
        **(
            {
                "ceiling_over_sequential": med["sequential"] / med[fastest],
                "vectorized_over_ceiling": med[fastest] / med["vectorized"],
                "fastest_ceiling": fastest,
            }
            if fastest
            else {}
        ),
        "flops_per_round": flops,
        "matmul_flops_per_s": peak,
        "fraction_of_matmul_peak": {v: flops / t / peak for v, t in med.items()},
        "max_abs_delta_difference": max_diff,
        "precision": PRECISION,
        "vectorized_path": vec_path,
        **(
            {
                "max_clients_wide": wide,
                "wide_buckets": s.executors["vectorized_wide"].last_bucket_size,
                "vectorized_wide_over_vectorized": med["vectorized"] / med["vectorized_wide"],
            }
            if wide
            else {}
        ),
        **(
            {
                "baseline_ref": baseline,
                "vectorized_over_baseline": med["vectorized_base"] / med["vectorized"],
            }
            if baseline
            else {}
        ),  # fmt: skip
    }


def profile_round(model: str, dp: bool, cohort: int, variant: str, out: str | None) -> None:
    """One warm round of ``variant`` under ``torch.profiler``: the host's and the device's busy
    time and the top operators by device (or CPU) time, to tell a launch-bound path (host
    time ≫ device time) from a compute-bound one. ``out``: a Chrome trace file."""
    from torch.profiler import ProfilerActivity, profile

    s = Setup(model, dp, cohort)
    s.run(variant, 0)
    sync()
    activities = [ProfilerActivity.CPU]
    if DEVICE.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        s.run(variant, 1)
        sync()
        wall = time.perf_counter() - t
    events = prof.key_averages()
    # the kernels' own rows (an operator's row repeats its kernels' time)
    kernel_rows = [e for e in events if e.device_type.name == "CUDA"]
    device_us = sum(e.self_device_time_total for e in kernel_rows)
    kernels = sum(e.count for e in kernel_rows)
    key = "self_cuda_time_total" if DEVICE.type == "cuda" else "self_cpu_time_total"
    print(f"profile {model} dp={dp} cohort={cohort} {variant}: wall {wall * 1e3:.1f} ms, "
          f"device busy {device_us / 1e3:.1f} ms ({device_us / 1e6 / wall:.0%} of wall), "
          f"{kernels} device kernels")  # fmt: skip
    print(events.table(sort_by=key, row_limit=12, max_name_column_width=60))
    if out:
        prof.export_chrome_trace(out)


def memory_child(model: str, dp: bool, cohort: int, variant: str) -> None:
    """Peak RSS of one round above the RSS after setup (Linux: the peak is reset by writing 5
    to /proc/self/clear_refs, so the setup's own transient peak does not hide the round's); on
    a GPU, the peak of PyTorch's allocated device memory above what setup left allocated."""
    s = Setup(model, dp, cohort)
    if DEVICE.type == "cuda":
        sync()
        torch.cuda.reset_peak_memory_stats(DEVICE)
        base = torch.cuda.memory_allocated(DEVICE)
        s.run(variant, 0)
        sync()
        peak = torch.cuda.max_memory_allocated(DEVICE)
        print(json.dumps({"peak_mib_above_setup": (peak - base) / 2**20,
                          "peak_rss_mib": peak / 2**20}))  # fmt: skip
        return
    base = status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    s.run(variant, 0)
    peak = status_kib("VmHWM")
    print(json.dumps({"peak_mib_above_setup": (peak - base) / 1024, "peak_rss_mib": peak / 1024}))


def measure_memory(model: str, dp: bool, cohort: int, threads: int) -> dict:
    out = {}
    for v in MEMORY_VARIANTS:
        cmd = [sys.executable, __file__, "--memory-child", model, str(int(dp)), str(cohort), v,
               "--threads", str(threads), "--examples", str(EXAMPLES),
               "--device", str(DEVICE), "--precision", PRECISION]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[v] = json.loads(res.stdout.strip().splitlines()[-1])
    return {
        "above_setup": {v: m["peak_mib_above_setup"] for v, m in out.items()},
        "peak_rss": {v: m.get("peak_rss_mib") for v, m in out.items()},
    }


def machine(threads: int) -> dict:
    """``_record.machine`` plus the device, and the GPU's name where the run used one
    (measured, never typed in)."""
    gpu = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else None
    return {**measured_machine(threads), "device": str(DEVICE), "gpu": gpu}


def _cs(clients_per_s: dict, variant: str) -> str:
    return f"{clients_per_s[variant]:.1f}" if variant in clients_per_s else "n/a"


def table(rows: list[dict], memory: bool) -> str:
    head = "| model | DP-SGD | cohort | bare c/s | seq c/s | vec c/s | seq ÷ bare | vec ÷ bare "
    head += "| **vec ÷ seq** | ceiling c/s: cohort batch (cl) / 10-client batch (cl) "
    head += "| **best ceiling ÷ seq** "
    head += "| FLOP/s ÷ matmul (bare / seq / vec / ceil) |"
    if memory:
        where = "allocated on the GPU" if DEVICE.type == "cuda" else "RSS"
        head += f" peak MiB above setup (total peak {where}), bare / seq / vec |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        c, q, f = r["clients_per_s"], r["ratio_to_bare"], r["fraction_of_matmul_peak"]
        line = (
            f"| {r['model']} | {'yes' if r['dp_sgd'] else 'no'} | {r['cohort']} "
            f"| {c['bare']:.1f} | {c['sequential']:.1f} | {c['vectorized']:.1f} "
            f"| {q['sequential']:.2f}x | {q['vectorized']:.2f}x "
            f"| **{r['vectorized_over_sequential']:.2f}x** "
        )
        if "ceiling_over_sequential" in r:
            best = max(v for k, v in f.items() if k.startswith("ceiling"))
            line += (
                f"| {_cs(c, 'ceiling')} ({_cs(c, 'ceiling_cl')}) / {_cs(c, 'ceiling10')} "
                f"({_cs(c, 'ceiling10_cl')}) "
                f"| **{r['ceiling_over_sequential']:.2f}x** "
                f"| {f['bare']:.2f} / {f['sequential']:.2f} / {f['vectorized']:.2f} / {best:.2f} |"
            )
        else:  # runs before the ceiling was measured here
            line += f"| — | — | {f['bare']:.2f} / {f['sequential']:.2f} / {f['vectorized']:.2f} |"
        if memory and "peak_mib" in r:
            m = r["peak_mib"].get("above_setup", r["peak_mib"])  # older runs: growth only
            line += f" {m['bare']:.0f} / {m['sequential']:.0f} / {m['vectorized']:.0f}"
            t = r["peak_mib"].get("peak_rss")
            if t:
                line += f" ({t['bare']:.0f} / {t['sequential']:.0f} / {t['vectorized']:.0f})"
            line += " |"
        if "vectorized_wide_over_vectorized" in r:
            ab = r["vectorized_wide_over_vectorized"]
            line += (f" buckets of {r['wide_buckets']}: {c['vectorized_wide']:.1f} c/s, "
                     f"**÷ vec {ab:.2f}x**")  # fmt: skip
        if "vectorized_over_baseline" in r:
            ref, ab = r["baseline_ref"], r["vectorized_over_baseline"]
            line += f" A/B: vec@{ref} {c['vectorized_base']:.1f} c/s, **vec ÷ vec@{ref} {ab:.2f}x**"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    global EXAMPLES, DEVICE, PRECISION
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--dp", choices=["no", "yes", "both"], default="both")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--examples", type=int, default=60, help="per client")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu",
                        help="where the data, models and paths run: cpu, cuda, cuda:1")  # fmt: skip
    parser.add_argument("--memory", action="store_true", help="peak RSS per path (subprocesses)")
    parser.add_argument("--skip", nargs="*", default=[], choices=VARIANTS[3:],
                        help="ceiling variants left out (e.g. the cohort-wide batch)")  # fmt: skip
    parser.add_argument("--baseline-ref", default=None,
                        help="git revision whose stacked recurrent layers run as the extra "
                        "variant vectorized_base (A/B in the same run)")  # fmt: skip
    parser.add_argument("--precision", choices=["32", "bf16-mixed"], default="32",
                        help="client.precision of bare, sequential, vectorized (not the "
                        "ceilings); bf16-mixed needs --dp no")  # fmt: skip
    parser.add_argument("--max-clients", type=int, default=0,
                        help="also time vectorized_wide: buckets of up to this many clients "
                        "(the executor's max_clients; default buckets hold 64)")  # fmt: skip
    parser.add_argument("--out", default=None, help="JSON file (rows are appended)")
    parser.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=VARIANTS[:3], default=None,
                        help="instead of timing: one round of this path under torch.profiler, "
                        "for each model, DP setting and cohort")  # fmt: skip
    parser.add_argument("--trace", default=None, help="with --profile: Chrome trace file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    EXAMPLES = args.examples
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device: {args.device} asked for, but torch sees no CUDA device")
    PRECISION = args.precision
    if PRECISION != "32" and args.dp != "no" and not args.memory_child:
        parser.error(f"--precision {PRECISION}: DP-SGD clients refuse it (client.precision); "
                     "use --dp no")  # fmt: skip
    if args.memory_child:
        model, dp, cohort, variant = args.memory_child
        memory_child(model, bool(int(dp)), int(cohort), variant)
        return
    dps = {"no": [False], "yes": [True], "both": [False, True]}[args.dp]
    if args.profile:
        for model in args.models:
            for dp in dps:
                for cohort in args.cohorts:
                    profile_round(model, dp, cohort, args.profile, args.trace)
        return
    load_before = os.getloadavg()
    peak = matmul_flops_per_s()
    info = machine(args.threads)
    print(f"machine: {info}; load average before (1/5/15 min): {load_before}")
    print(f"one large float32 matmul: {peak / 1e9:.1f} GFLOP/s at {args.threads} thread(s) "
          "(now; each row uses the median of matmuls timed between its rounds)")  # fmt: skip
    result = {
        "benchmark": "benchmarks/cohort_speed.py",
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": info,
        "load_average_before": load_before,
        "load_average_after": None,
        "matmul_flops_per_s": peak,
        "workload": {
            "examples_per_client": EXAMPLES,
            "steps_per_client": EXAMPLES // BATCH,
            "batch": BATCH,
            "epochs": 1,
            "lr": LR,
            "precision": PRECISION,
            "reps": args.reps,
            "skipped_variants": args.skip,
            "baseline_ref": args.baseline_ref,
            "max_clients_wide": args.max_clients,
            "order": "interleaved, alternating",
        },  # fmt: skip
        "rows": [],
    }
    earlier = []
    if args.out and os.path.exists(args.out):
        with open(args.out) as fh:
            earlier = json.load(fh)
    for model in args.models:
        for dp in dps:
            for cohort in args.cohorts:
                row = measure_row(model, dp, cohort, args.reps, tuple(args.skip),
                                  args.baseline_ref, args.max_clients)  # fmt: skip
                if args.memory:
                    row["peak_mib"] = measure_memory(model, dp, cohort, args.threads)
                row["load_average_after"] = os.getloadavg()
                result["rows"].append(row)
                result["load_average_after"] = row["load_average_after"]
                print(table([row], args.memory).splitlines()[-1], flush=True)
                if row["vectorized_path"] != "stacked":
                    print(f"  (vectorized ran the sequential loop: client.precision {PRECISION})")
                if args.out:  # after every row: a run cut short keeps the rows it measured
                    with open(args.out, "w") as fh:
                        json.dump([*earlier, result], fh, indent=1)
    print(table(result["rows"], args.memory))


if __name__ == "__main__":
    main()
