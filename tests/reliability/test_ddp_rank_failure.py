"""Issue 23, item 3: a DDP rank dies (or hangs) mid-run.

Two CPU processes (gloo) launched by Lightning run DP-FedAvg with a checkpoint after every
round; rank 1 is then SIGKILLed (a crashed node) or SIGSTOPped (a hung one). The job must end
on its own, non-zero, saying what happened (one ``error: distributed:`` line naming the last
checkpoint; if rank 0 is busy outside a collective when rank 1 dies, Lightning's process
observer may end it first with its own ``terminated with code`` line), leave no process behind,
and its last checkpoint must resume on 1 or 2 processes to the result of an uninterrupted run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.reliability.runs import assert_same_result, env, fit_args, global_weights, load

pytestmark = [pytest.mark.ddp, pytest.mark.slow, pytest.mark.fault]

LONG = 12
# --distributed_timeout: also bounds the start-up rendezvous, which on a loaded 2-core box can
# take a minute; the resumed and reference runs keep the default (1800 s).
TIMEOUT_S = 150


def ddp(args: list[str], processes: int = 2, timeout: bool = False) -> list[str]:
    args = list(args)
    args[args.index("--trainer.devices") + 1] = str(processes)
    extra = ["--distributed_timeout", str(TIMEOUT_S)] if timeout else []
    return [*args, "--trainer.strategy", "ddp", *extra]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead
        return f.read().split(")")[-1].split()[0] != "Z"


def _fit(root: Path, processes: int, *extra: str) -> Path:
    args = fit_args(root, LONG, *extra)
    if processes > 1:
        args = ddp(args, processes)
    cmd = [sys.executable, "-m", "fl_lightning.cli", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[int, Path]:
    """Uninterrupted runs on 1 and on 2 processes."""
    return {n: _fit(tmp_path_factory.mktemp(f"uninterrupted_{n}"), n) for n in (1, 2)}


def _max_difference(a: Path, b: Path) -> float:
    wa = global_weights(load(a / "checkpoints" / "last.ckpt"))
    wb = global_weights(load(b / "checkpoints" / "last.ckpt"))
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


@pytest.mark.parametrize("how", ["kill", "hang"])
def test_a_lost_rank_ends_the_job_and_its_checkpoint_resumes_on_any_world_size(
    references, tmp_path, how
):
    killed = tmp_path / "ddp"
    last = killed / "checkpoints" / "last.ckpt"
    cmd = [sys.executable, "-m", "fl_lightning.cli", *ddp(fit_args(killed, LONG), timeout=True)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    victim = None
    try:
        deadline = time.monotonic() + 300
        while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert last.exists(), "the DDP run wrote no checkpoint"
        time.sleep(random.Random(how).uniform(0.0, 1.0))
        (victim,) = _children(proc.pid)  # rank 1 (Lightning re-executes the command)
        os.kill(victim, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        # The bound below is the hang detector, not a timing assertion: a job that does not
        # end within the collective timeout plus slack is the failure this test looks for.
        out, _ = proc.communicate(timeout=TIMEOUT_S + 240)
    finally:
        if proc.poll() is None:
            proc.kill()
        if victim and _alive(victim):
            os.kill(victim, signal.SIGKILL)
    assert proc.returncode != 0
    ours = [ln for ln in out.splitlines() if ln.startswith("error: distributed:")]
    lightning_observer = [ln for ln in out.splitlines() if "terminated with code" in ln]
    assert len(ours) == 1 or lightning_observer, out[-3000:]
    if ours:
        assert ours[0].startswith("error: distributed: rank 0 of 2 lost rank 1 in round ")
        assert f"--ckpt_path {last}" in ours[0]
        if how == "hang":
            assert f"Timed out waiting {TIMEOUT_S * 1000}ms" in ours[0]
    assert "Traceback" not in out or lightning_observer
    time.sleep(1)
    assert not _alive(victim), "the lost rank was left behind"
    done = load(last)["global_step"]
    assert 1 <= done < LONG
    # Resume on the same world size: the uninterrupted 2-process result (same summation
    # order). On 1 process: the 1-process result up to float summation order (DDP adds
    # per-rank partial sums): a run that switches world size at round k differs from both
    # uninterrupted runs by float32 rounding grown over the rounds (1.2e-5 measured at 12
    # rounds, while the two uninterrupted runs differed by 1.4e-6); ε and rounds are exact.
    _fit(tmp_path / "resumed_2", 2, "--ckpt_path", str(last))
    assert_same_result(references[2], tmp_path / "resumed_2", rounds=LONG, atol=1e-6)
    _fit(tmp_path / "resumed_1", 1, "--ckpt_path", str(last))
    order = _max_difference(references[1], references[2])
    print(f"max |w(1 process) - w(2 processes)| uninterrupted: {order:.3g}")
    assert_same_result(references[1], tmp_path / "resumed_1", rounds=LONG,
                       atol=max(5e-5, 2 * order))  # fmt: skip
