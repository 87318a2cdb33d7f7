"""The README's audit command on the quickstart (digits, 40 Dirichlet clients): it used to stop
with a shadow-model partition error; its DLG numbers are per batch, with aggregates that agree,
a labelled grid, and the threat model stated."""

from __future__ import annotations

import json
from pathlib import Path

from fl_lightning.attacks.cli import main as audit_main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "configs" / "experiment" / "quickstart.yaml"


def test_quickstart_audit_runs_and_reports_consistent_dlg_numbers(tmp_path: Path, capsys) -> None:
    code = audit_main(
        [
            "--config", str(QUICKSTART),
            "--attack", "threshold", "--attack", "dlg",
            "--dlg-iterations", "9", "--dlg-examples", "3",
            "--out", str(tmp_path),
            "--trainer.max_steps=2", f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    res = json.loads((tmp_path / "audit.json").read_text())
    # the shadow pool holds the non-member training data too: enough for 40 shadow clients
    assert res["shadow_pool"] > res["num_nonmembers"]
    assert res["attacks"]["threshold"]["auc"] >= 0.0
    dlg = res["attacks"]["dlg"]
    per = dlg["per_batch"]
    assert len(per) == dlg["batches"] == 3
    for m in per:
        assert set(m) >= {"mse", "psnr", "ssim", "label_accuracy", "matching_loss"}
        assert 0.0 <= m["mse"] <= 4.0  # clipped to the [-1, 1] pixel range: cannot explode
    for k in ("mse", "psnr", "ssim"):
        values = sorted(m[k] for m in per)
        assert dlg[f"{k}_median"] == values[1]
        assert abs(dlg[f"{k}_mean"] - sum(values) / 3) < 1e-9
    recovered = sum(m["ssim"] >= dlg["ssim_threshold"] for m in per) / 3
    assert dlg["recovered_fraction"] == recovered
    assert "central noise" in dlg["threat_model"] and "upload" in dlg["threat_model"]
    assert "threat model" in out and "recovered" in out and "per-batch SSIM" in out
    assert Path(dlg["grid"]).exists()
    # One summary line for the audited run; the shadow run's says it is the attacker's model.
    finished = [ln for ln in out.splitlines() if "Finished 2 rounds" in ln]
    assert len(finished) == 2 and finished[0].startswith("Finished 2 rounds"), finished
    assert finished[1].startswith(
        "audit: shadow run 1 (the attacker's model, not the audited one): Finished 2 rounds"
    ), finished
