"""The DDP tests' runs, launched once per session in three batches (tests/server/ddp_batch.py).

A CLI process spends seconds of CPU importing torch, Lightning and fl_lightning, more than each
tiny run here; the DDP tests used to start 20 such processes, now 4 (side by side), and run the
1-process references in the test worker itself, which has imported all of it already:

* ``lightning``: two processes launched by Lightning's own DDP launcher (its first run
  re-executes the batch as rank 1; later runs find the ranks there): LIGHTNING_LAUNCHED runs;
* ``torchrun``: two processes started torchrun-style (``RANK``/``WORLD_SIZE`` set, every rank
  runs every step): the raw collectives of test_distributed.py, the refused run of
  test_ddp_client_state.py, then the other 2-process runs of RUNS;
* ``one``: the 1-process references, run in this (test worker) process while the others run,
  in the reverse order of RUNS, so that state leaking from one run into the next in a process
  would show as a difference.

Every test asserts on its own steps: a failing step fails only the tests that read it. Under
pytest-xdist the first worker to need the runs launches them, any other waits for them
(``ddp_runs``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, REPO, TINY
from tests.server.ddp_batch import run as run_steps
from tests.server.ddp_batch import split

TIMEOUT_S = 480
COMMON = [
    "--data", str(REPO / "configs" / "data" / "digits.yaml"),
    "--data.num_clients", "8",
    "--model.clients_per_round", "5",
    "--model.eval_every", "1",
    "--trainer.logger", "false",
    "--trainer.enable_progress_bar", "false",
    "--client.local_epochs", "1",
    "--client.batch_size", "16",
]  # fmt: skip
DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
ONE = ["--trainer.devices", "1", "--trainer.accelerator", "cpu"]

SUM_BASED = ["--client.dp_sgd.noise_multiplier", "1.0", "--client.dp_sgd.max_grad_norm", "1.0"]
# DP-FedExP's server step size reads every update's norm (reduction "stream"): under DDP every
# update is gathered to every rank. Client-level DP-SGD keeps the run private.
ALL_UPDATES = ["--strategy", "fl_lightning.strategies.dp_fedexp.DPFedExP", *SUM_BASED]
CLIENT_STATE_ROUNDS = 3
LOCAL = ["--client.local_steps", "3", "--client.dp_sgd.noise_multiplier", "1.0",
         "--client.dp_sgd.max_grad_norm", "1.0"]  # fmt: skip
SCAFFOLD = ["--strategy", "fl_lightning.strategies.dp_scaffold.DPScaffold", *LOCAL]
AGN = [
    "--strategy",
    '{"class_path": "fl_lightning.strategies.dpfl_agn.DPFLAGN", "init_args": '
    '{"adam_state": "persist", "anr": true, "mu": 10.0, "rho": 0.5}}',
    "--client.optimizer", "adam", "--client.lr", "0.01", "--data.val_fraction", "0.1",
    "--privacy.accountant", "rdp",  # ANR picks σ_t adaptively: only RDP composes it
    *LOCAL,
]  # fmt: skip
# A budget horizon of 30 rounds keeps every upload affordable in this 3-round run (with E = 3,
# N·ε/(n·E) times Eq. 6's factor exceeds ε: no client could upload, now refused).
ADP = ["--strategy", str(REPO / "configs" / "strategy" / "adp_fl.yaml"),
       "--strategy.init_args.epsilon", "50.0", "--strategy.init_args.rounds", "30",
       "--client.local_steps", "3"]  # fmt: skip

# name: (rounds, arguments); each runs on 1 and on 2 processes (and ``sum_3`` on 1 only,
# ``sum_resumed`` on 2 only: it resumes ``sum``'s 2-process checkpoint).
# FedAvg holding budgeted local DP, record reading: budgets charged and the sound ε summed on
# the server (every rank), uploads noised on the rank that trained the client.
UPLOADS = {
    "class_path": "fl_lightning.strategies.budgeted_uploads.BudgetedUploads",
    "init_args": {"epsilon": 50.0, "mechanism": "laplace", "sensitivity": "record"},
}
LOCAL_DP = [
    "--strategy",
    json.dumps({"class_path": "fl_lightning.strategies.fedavg.FedAvg",
                "init_args": {"local_dp": UPLOADS}}),
]  # fmt: skip

# DP-FTRL: correlated noise from generators keyed by (seed, level/round), cyclic cohorts.
FTRL = ["--strategy", json.dumps({"class_path": "fl_lightning.strategies.dp_ftrl.DPFTRL",
        "init_args": {"factorization": "bsr", "bands": 2}}), "--model.sampling", "cyclic",
        "--data.num_clients", "10"]  # fmt: skip
# DP-FTRL's factorisations of issue 50: optimised for the run on every rank (deterministic).
FTRL_NEW = {
    name: ["--strategy", json.dumps({"class_path": "fl_lightning.strategies.dp_ftrl.DPFTRL",
           "init_args": args}), "--model.sampling", "cyclic", "--data.num_clients", "10"]
    for name, args in (("ftrl_blt", {"factorization": "blt", "buffers": 2}),
                       ("ftrl_banded", {"factorization": "banded"}),
                       ("ftrl_honaker", {"factorization": "tree"}))
}  # fmt: skip
# Amplified banded DP-FTRL: cyclic Poisson cohorts (blocks of 5 of 10, each client with q = 0.6).
FTRL_NEW["ftrl_amplified"] = [
    "--strategy", json.dumps({"class_path": "fl_lightning.strategies.dp_ftrl.DPFTRL",
                              "init_args": {"factorization": "banded"}}),
    "--model.sampling", "cyclic_poisson", "--model.client_rate", "0.6",
    "--model.clients_per_round", "5", "--data.num_clients", "10",
]  # fmt: skip
# FedAvg holding adaptive clipping (Andrew et al. 2021): the clip moves every round from the
# all-reduced noisy count, so both processes must end with the same clip and model.
ADAPTIVE = [
    "--strategy",
    json.dumps({"class_path": "fl_lightning.strategies.fedavg.FedAvg",
                "init_args": {"weighting": "uniform", "central_dp": {
                    "class_path": "fl_lightning.strategies.adaptive_clipping.AdaptiveClipping",
                    "init_args": {"clip_norm": 0.05, "noise_multiplier": 1.0,
                                  "count_noise_std": 1.0}}}}),
]  # fmt: skip

# Distributed DP behind SecAgg (DDG, SecAgg+ graph, 20 % dropouts): each rank's modular partial
# sum of masked uploads is all-reduced, so 1 and 2 processes decode the same integers.
SECAGG = [
    "--strategy",
    json.dumps({"class_path": "fl_lightning.strategies.ddp_fedavg.DDPFedAvg",
                "init_args": {"mechanism": "ddg", "bits": 16, "noise_multiplier": 1.0,
                              "dropout_rate": 0.2, "neighbours": 2}}),
]  # fmt: skip

RUNS: dict[str, tuple[int, list[str]]] = {
    "sum": (2, SUM_BASED),
    "all_updates": (2, ALL_UPDATES),
    "scaffold": (CLIENT_STATE_ROUNDS, SCAFFOLD),
    "agn": (CLIENT_STATE_ROUNDS, AGN),
    "adp": (CLIENT_STATE_ROUNDS, ADP),
    "local_dp": (2, LOCAL_DP),
    "ftrl": (3, FTRL),
    **{name: (3, args) for name, args in FTRL_NEW.items()},
    "adaptive": (2, ADAPTIVE),
    "secagg": (2, SECAGG),
}
# Launched by Lightning, with "sum_resumed" (the rest of RUNS: torchrun-style, after
# "collectives" and "refused").
LIGHTNING_LAUNCHED = ("sum", "all_updates", "sum_resumed")
# A strategy that persists per-client optimizer state without syncing it (test double).
UNSYNCED = ('{"class_path": "tests.server.test_ddp_client_state.UnsyncedAdam", '
            '"init_args": {"adam_state": "persist"}}')  # fmt: skip
LAUNCH_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
              "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fit_args(root: Path, rounds: int, *extra: str, ddp: bool = False) -> list[str]:
    return ["fit", "--config", str(QUICKSTART), *COMMON, "--trainer.max_steps", str(rounds),
            "--trainer.default_root_dir", str(root), *(DDP if ddp else ONE), *extra]  # fmt: skip


@dataclass
class Batch:
    """One launched batch: per waited-for rank, ``{step: (return code or None, output)}`` and
    the process's exit status (negative: killed by that signal)."""

    spec: Path
    ranks: list[dict[str, tuple[int | None, str]]] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)

    def step(self, name: str) -> None:
        """Asserts that ``name`` ran to the end with exit 0 on every rank."""
        for rank, steps in enumerate(self.ranks):
            rc, out = steps.get(name, (None, "step never started"))
            assert rc == 0, f"rank {rank}, {name}: exit {rc}\n{out[-3000:]}"

    def exited_cleanly(self) -> None:
        """No rank died at exit after its last step (a SIGABRT there once went unnoticed:
        fl_lightning/cli.py _close_process_group)."""
        assert all(code >= 0 for code in self.exits), (self.spec, self.exits)


@dataclass
class DDPRuns:
    root: Path
    one: Batch
    lightning: Batch
    torchrun: Batch

    def run(self, name: str, processes: int) -> Path:
        """The run directory of ``name`` on 1 or 2 processes, asserting it exited 0."""
        if processes == 1:
            self.one.step(name)
        else:
            (self.lightning if name in LIGHTNING_LAUNCHED else self.torchrun).step(name)
        return self.root / f"{name}_{processes}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    return {**env, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", **extra}


def _start(spec: Path, steps: list[dict], env: dict[str, str]) -> subprocess.Popen:
    spec.write_text(json.dumps(steps))
    cmd = [sys.executable, "-m", "tests.server.ddp_batch", str(spec)]
    # Its own session: a hung batch is killed with the ranks Lightning launched for it.
    return subprocess.Popen(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


def _run_here(spec: Path, steps: list[dict]) -> tuple[str, int]:
    """``steps`` run in this process as ``python -m tests.server.ddp_batch`` would run them:
    (its stderr, its exit status). The environment variables a step sets are restored."""
    spec.write_text(json.dumps(steps))
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")}
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = run_steps(steps)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return err.getvalue(), status


def _finish(procs: list[subprocess.Popen], timeout_s: float) -> list[str]:
    """Each process's stderr (ranks above 0 write theirs to their log); kills the ones still
    running ``timeout_s`` after the start (a hang: their unfinished steps read as None)."""
    deadline = time.monotonic() + timeout_s
    outs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
        outs.append(err)
    return outs


def _two_process_steps(root: Path) -> tuple[list[dict], list[dict]]:
    """The 2-process runs: (Lightning-launched, torchrun-style)."""
    lightning, torchrun = [], []
    for name, (rounds, extra) in RUNS.items():
        step = {"name": name, "port": free_port(),
                "cli": fit_args(root / f"{name}_2", rounds, *extra, ddp=True)}  # fmt: skip
        (lightning if name in LIGHTNING_LAUNCHED else torchrun).append(step)
    # Resume the 2-round DDP checkpoint for a 3rd round under DDP (== 3 rounds on 1 process).
    resume = ["--ckpt_path", str(root / "sum_2" / "checkpoints" / "last.ckpt")]
    lightning.append({"name": "sum_resumed", "port": free_port(),
                      "cli": fit_args(root / "sum_resumed_2", 3, *SUM_BASED, *resume,
                                      ddp=True)})  # fmt: skip
    torchrun[:0] = [
        {"name": "collectives", "port": free_port(), "out": str(root / "collectives"),
         "call": "tests.server.test_distributed:collectives"},
        {"name": "refused", "port": free_port(), "expect": [2],
         "cli": ["fit", "--config", str(QUICKSTART), *TINY, "--strategy", UNSYNCED,
                 "--client.optimizer", "adam", "--trainer.strategy", "ddp",
                 "--trainer.accelerator", "cpu", "--trainer.devices", "2",
                 "--trainer.default_root_dir", str(root / "refused")]},
    ]  # fmt: skip
    return lightning, torchrun


def _launch(root: Path) -> DDPRuns:
    one_steps = [
        {"name": name, "port": free_port(), "cli": fit_args(root / f"{name}_1", rounds, *extra)}
        for name, (rounds, extra) in [*RUNS.items(), ("sum_3", (3, SUM_BASED))]
    ][::-1]  # fmt: skip
    lightning_steps, torchrun_steps = _two_process_steps(root)
    runs = DDPRuns(root, Batch(root / "one.json"), Batch(root / "lightning.json"),
                   Batch(root / "torchrun.json"))  # fmt: skip
    elastic = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
               "TORCHELASTIC_RUN_ID": "ddp-batch", "MASTER_ADDR": "127.0.0.1"}  # fmt: skip
    procs = [
        _start(runs.lightning.spec, lightning_steps, _env()),
        *[_start(runs.torchrun.spec, torchrun_steps,
                 _env(**elastic, RANK=str(r), LOCAL_RANK=str(r))) for r in (0, 1)],
    ]  # fmt: skip
    try:
        one_out, one_exit = _run_here(runs.one.spec, one_steps)
    except BaseException:  # e.g. Ctrl-C: the launched batches go too (their own sessions)
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        raise
    outs = [one_out, *_finish(procs, TIMEOUT_S)]
    for batch, out in zip([runs.one, runs.lightning, runs.torchrun], outs):
        Path(f"{batch.spec}.rank0.log").write_text(out)  # to read after a failure
        batch.ranks.append(split(out))
    # Rank 1 of the Lightning launch is rank 0's child, not waited for here (as for a lone
    # CLI command): its log is for reading only. Both torchrun ranks are waited for.
    log = Path(f"{runs.torchrun.spec}.rank1.log")
    runs.torchrun.ranks.append(split(log.read_text() if log.exists() else ""))
    runs.one.exits, runs.lightning.exits = [one_exit], [procs[0].returncode]
    runs.torchrun.exits = [procs[1].returncode, procs[2].returncode]
    return runs


def _save(runs: DDPRuns, path: Path) -> None:
    batches = {k: {"ranks": b.ranks, "exits": b.exits}
               for k, b in (("one", runs.one), ("lightning", runs.lightning),
                            ("torchrun", runs.torchrun))}  # fmt: skip
    path.write_text(json.dumps(batches))


def _load(root: Path, path: Path) -> DDPRuns:
    saved = json.loads(path.read_text())

    def batch(name: str) -> Batch:
        ranks = [{k: (rc, out) for k, (rc, out) in r.items()} for r in saved[name]["ranks"]]
        return Batch(root / f"{name}.json", ranks, saved[name]["exits"])

    return DDPRuns(root, batch("one"), batch("lightning"), batch("torchrun"))


@pytest.fixture(scope="session")
def ddp_runs(tmp_path_factory) -> DDPRuns:
    """Launched once per test run: under pytest-xdist the workers share one folder, the first
    one to get here launches the batches while holding a lock, any other waits and reads what
    it saved (xdist's ``--dist loadgroup`` would do this, but cannot name groups under
    pytest 9)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _launch(tmp_path_factory.mktemp("ddp_runs"))
    shared = tmp_path_factory.getbasetemp().parent  # this run's, common to its workers
    root, saved = shared / "ddp_runs", shared / "ddp_runs.json"
    with open(shared / "ddp_runs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.exists():
            if root.exists():
                pytest.fail("the DDP runs failed to launch on another worker (its error)")
            root.mkdir()
            _save(_launch(root), saved)
    return _load(root, saved)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the session's DDP batch (``ddp_runs``: about 100 s of launches on 2
    cores, paid once) is ``heavy``: .ci/run runs it after the fast suite."""
    for item in items:
        if "ddp_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.heavy)
