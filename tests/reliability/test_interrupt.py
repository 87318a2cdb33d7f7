"""An interrupt loses nothing (issue 58 item 2): SIGINT sent to a running ``fl-lightning fit``
in the middle of a round stops it at the end of that round with exit 130, ``last.ckpt`` of that
round boundary, and ``summary.json``, ``privacy_ledger.json`` and ``privacy_statement.md`` for
the rounds released (status "interrupted after N rounds"); resumed from that checkpoint it ends
with the uninterrupted run's weights and ε, to the last digit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import QUICKSTART, REPO, TINY
from tests.reliability.runs import accountant_state, assert_same_result, env, load

ROUNDS = 5
PAUSE = REPO / "tests" / "reliability" / "pause_round.py"


def _args(root: Path, *extra: str) -> list[str]:
    # The default checkpointing (every 10 rounds): the checkpoint to resume from is the one the
    # interrupt saves. Momentum on both sides: state that must come back exactly.
    return ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", str(ROUNDS),
            "--trainer.default_root_dir", str(root), "--model.server_momentum", "0.5",
            "--client.momentum", "0.9", "--trainer.accelerator", "cpu",
            "--trainer.devices", "1", *extra]  # fmt: skip


def test_sigint_mid_round_leaves_the_run_files_and_resumes_to_the_last_digit(tmp_path):
    from fl_lightning.cli import main

    marker, cut = tmp_path / "in_round_2", tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fl_lightning.cli", "--import", str(PAUSE), *_args(cut)],
        cwd=REPO, env={**env(), "FL_PAUSE_ROUND": "2", "FL_PAUSE_MARKER": str(marker)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # round 2 is in progress: trained, not yet applied
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "SIGINT: stopping after the round in progress" in err
    assert "Interrupted after 3 of 5 rounds" in out, out[-2000:]
    ckpt = cut / "checkpoints" / "last.ckpt"
    saved = load(ckpt)
    assert saved["global_step"] == 3 and accountant_state(saved)["rounds"] == 3
    status = "interrupted after 3 rounds (SIGINT)"
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["status"] == status and summary["rounds"] == 3, summary
    assert summary["resume_from"] == str(ckpt) and f"--ckpt_path {ckpt}" in out
    assert json.loads((cut / "privacy_ledger.json").read_text())["status"] == status
    statement = (cut / "privacy_statement.md").read_text()
    assert statement.startswith(f"**Status: {status}.**")

    assert main(_args(tmp_path / "uninterrupted")) == 0
    assert main(_args(tmp_path / "resumed", "--ckpt_path", str(ckpt))) == 0
    assert_same_result(tmp_path / "uninterrupted", tmp_path / "resumed", ROUNDS, atol=0.0)
