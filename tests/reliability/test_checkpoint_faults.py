"""Item 1 and 4 of issue 23: a run killed or failing inside a write loses nothing.

Fast (default run): ``atomic_write`` itself under injected faults, and a disk-full /
read-only failure in the middle of a real run: one ``error:`` line, exit 1, the last complete
checkpoint intact, and resuming it gives the uninterrupted result.

Slow (``-m slow``; ``scripts/test.sh`` leaves them out): the real CLI as a subprocess killed
with SIGKILL inside a checkpoint write (three instants of the write) and at random instants,
then resumed; every resumed run must end where the uninterrupted one does (weights within
1e-6, ε equal, each round counted once).
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fl_lightning.utils import atomic
from fl_lightning.utils.atomic import OutputWriteError, atomic_write
from tests.conftest import REPO
from tests.reliability import faults
from tests.reliability.runs import ROUNDS, assert_same_result, env, fit_args, load, run

pytestmark = pytest.mark.fault


# -- atomic_write ----------------------------------------------------------------------------
def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


@pytest.mark.parametrize("kind", ["enospc", "erofs", "eacces"])
def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch, kind):
    target = tmp_path / "x.ckpt"
    atomic_write(target, b"old contents")
    faults.install(kind, 1, ".ckpt", setattr_=monkeypatch.setattr)
    with pytest.raises(OutputWriteError) as info:
        atomic_write(target, b"new contents, never complete")
    assert info.value.errno == faults.ERRNO[kind]
    assert str(info.value) == f"cannot write {target}: {os.strerror(faults.ERRNO[kind])}"
    assert target.read_bytes() == b"old contents"
    assert _leftovers(tmp_path) == []


def test_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write(target, "{}")

    def refuse(src, dst):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(atomic, "_replace", refuse)
    with pytest.raises(OutputWriteError, match="cannot write .*summary.json: Invalid cross"):
        atomic_write(target, '{"new": 1}')
    assert target.read_text() == "{}" and _leftovers(tmp_path) == []


def test_write_into_a_path_that_is_not_a_folder_is_one_clear_error(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the output folder should be")
    with pytest.raises(OutputWriteError, match=r"cannot write .*runs/checkpoints/last.ckpt: "):
        atomic_write(blocker / "checkpoints" / "last.ckpt", b"x")
    assert blocker.read_text().startswith("a file")


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    target = tmp_path / "last.ckpt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = tmp_path / f".last.ckpt.tmp-{int(dead.stdout)}-abcd1234"
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f".last.ckpt.tmp-{os.getpid()}-live0000"  # a writer still running
    live.write_bytes(b"in progress")
    other = tmp_path / f".other.ckpt.tmp-{int(dead.stdout)}-abcd1234"  # another file's: kept
    other.write_bytes(b"x")
    atomic_write(target, b"complete")
    assert target.read_bytes() == b"complete"
    assert not stale.exists() and live.exists() and other.exists()


# -- a real run that cannot write ------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted 6-round run every resumed run must reproduce."""
    from fl_lightning.cli import main

    root = tmp_path_factory.mktemp("reference")
    assert main(fit_args(root)) == 0
    return root


def _error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


@pytest.mark.parametrize("kind", ["enospc", "erofs"])
def test_disk_full_mid_run_is_one_error_and_the_last_checkpoint_resumes(
    reference, tmp_path, monkeypatch, capsys, kind
):
    from fl_lightning.cli import main

    broken = tmp_path / "broken"
    seen = faults.install(kind, 3, ".ckpt", setattr_=monkeypatch.setattr)
    assert main(fit_args(broken)) == 1
    assert seen["writes"] == 3  # it stopped at the failed write, no later round ran
    err = capsys.readouterr().err
    lines = _error_lines(err)
    assert len(lines) == 1, err[-2000:]
    reason = os.strerror(faults.ERRNO[kind])
    assert lines[0] == (
        f"error: trainer.default_root_dir: checkpoint not saved, cannot write "
        f"{broken / 'checkpoints' / 'last.ckpt'}: {reason} (the previous last.ckpt is intact)"
    )
    assert "Traceback" not in err
    last = broken / "checkpoints" / "last.ckpt"
    assert load(last)["global_step"] == 2  # the last complete checkpoint: round 2
    assert _leftovers(last.parent) == []
    assert not (broken / "summary.json").exists()
    monkeypatch.undo()
    resumed = tmp_path / "resumed"
    assert main(fit_args(resumed, ROUNDS, "--ckpt_path", str(last))) == 0
    assert_same_result(reference, resumed)


def test_unwritable_summary_is_one_error_and_checkpoints_stay(tmp_path, monkeypatch, capsys):
    from fl_lightning.cli import main

    root = tmp_path / "run"
    faults.install("enospc", 1, "summary.json", setattr_=monkeypatch.setattr)
    assert main(fit_args(root, 2)) == 1
    lines = _error_lines(capsys.readouterr().err)
    assert lines == [f"error: cannot write {root / 'summary.json'}: No space left on device"]
    assert load(root / "checkpoints" / "last.ckpt")["global_step"] == 2
    assert not (root / "summary.json").exists() and _leftovers(root) == []


# -- SIGKILL inside the write and at random instants (slow) ---------------------------------
KILL_POINTS = ["kill-mid-write", "kill-before-rename", "kill-after-rename"]


@pytest.mark.slow
@pytest.mark.parametrize("nth", [2, 4])
@pytest.mark.parametrize("fault", KILL_POINTS)
def test_kill_inside_a_checkpoint_write_resumes_to_the_uninterrupted_run(
    reference, tmp_path, fault, nth
):
    killed = tmp_path / "killed"
    proc = run(fit_args(killed), fault=(fault, nth))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    last = killed / "checkpoints" / "last.ckpt"
    # Before the rename the previous checkpoint is the last complete one; after it, the new one.
    expected = nth if fault == "kill-after-rename" else nth - 1
    assert load(last)["global_step"] == expected
    resumed = tmp_path / "resumed"
    proc = run(fit_args(resumed, ROUNDS, "--ckpt_path", str(last)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_same_result(reference, resumed)


RANDOM_KILLS = int(os.environ.get("FL_FAULT_TRIALS", "4"))
LONG = 30


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long_reference")
    proc = run(fit_args(root, LONG))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(RANDOM_KILLS))
def test_kill_at_a_random_instant_resumes_to_the_uninterrupted_run(long_reference, tmp_path, trial):
    """SIGKILL at a random instant once the first checkpoint exists (in a round, inside a
    checkpoint write or between them), then resume from whatever is on disk."""
    rng = random.Random(f"kill-{trial}")
    killed = tmp_path / "killed"
    last = killed / "checkpoints" / "last.ckpt"
    cmd = [sys.executable, "-m", "fl_lightning.cli", *fit_args(killed, LONG)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert last.exists(), "no checkpoint was written"
        time.sleep(rng.uniform(0.0, 2.0))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before the kill; lower the delay"
    done = load(last)["global_step"]  # whatever the instant, the file is a whole checkpoint
    assert 1 <= done < LONG
    resumed = tmp_path / "resumed"
    result = run(fit_args(resumed, LONG, "--ckpt_path", str(last)))
    assert result.returncode == 0, result.stderr[-2000:]
    assert_same_result(long_reference, resumed, rounds=LONG)
