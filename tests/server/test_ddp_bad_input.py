"""Bad distributed input: one line naming the field, exit 2, before any process is launched."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import QUICKSTART, TINY


def test_more_cpu_processes_than_cores(run_cli, capsys, tmp_path):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.strategy", "ddp",
                  "--trainer.accelerator", "cpu", "--trainer.devices", "4096"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("error: trainer.devices"), err[-1]
    assert not list(Path(tmp_path).rglob("*.ckpt"))


def test_strategy_with_per_client_state_refuses_several_processes(run_cli, capsys, tmp_path):
    # DPFLAGN itself syncs its per-client Adam state; this subclass does not (test double).
    strategy = ('{"class_path": "tests.server.test_ddp_client_state.UnsyncedAdam", '
                '"init_args": {"adam_state": "persist"}}')  # fmt: skip
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--strategy", strategy,
                  "--client.optimizer", "adam", "--trainer.strategy", "ddp",
                  "--trainer.accelerator", "cpu", "--trainer.devices", "2"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("error: strategy:"), err[-1]
    assert "UnsyncedAdam" in err[-1]
    assert not list(Path(tmp_path).rglob("*.ckpt"))
