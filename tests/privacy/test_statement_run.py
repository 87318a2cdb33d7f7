"""The quickstart's ``privacy_statement.md`` and a canary audit, run end to end (issue 46): the
statement opens with the plain reading and the scale and names only files the run wrote; a
canary audit of a run that is not private says so instead of a client-level ε."""

from __future__ import annotations

import json
import re

from tests.conftest import QUICKSTART, TINY


def test_the_quickstart_statement_opens_plainly_and_names_only_written_files(tmp_path):
    from fl_lightning.cli import main

    args = ["fit", "--config", str(QUICKSTART), *TINY[:-4], "--trainer.max_steps", "2",
            "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir",
            str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    (statement,) = tmp_path.rglob("privacy_statement.md")
    text = statement.read_text()
    opening = text.split("\n\n")[1]
    assert opening.startswith("Someone who sees everything this run released")
    assert "How to DP-fy ML" in opening and "this ε is " in opening
    written = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    named = set(re.findall(r"`([\w.-]+\.(?:csv|json|png|md))`", text))
    assert named and "client_times.csv" not in named
    assert named <= written, named - written


def test_a_canary_audit_of_a_run_that_is_not_private_claims_nothing(tmp_path, capsys):
    from fl_lightning.attacks.cli import main as audit_main

    code = audit_main(
        [
            "--config", str(QUICKSTART), "--strategy", "fl_lightning.strategies.fedavg.FedAvg",
            "--attack", "canaries", "--num-canaries", "8", "--out", str(tmp_path),
            "--trainer.max_steps=2", f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["guarantee"].startswith("none: not private")
    assert result["attacks"]["canaries"]["adjacency_claimed"].startswith("none: not private")
    assert "client-level" not in json.dumps(result) and "client-level" not in out
    assert "audit: none: not private" in out
