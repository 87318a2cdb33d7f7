"""``fl-lightning audit --attack canaries`` (attacks/canaries.py): canary clients inserted while
training, Andrew et al.'s estimate and Steinke et al.'s lower bound written into audit.json
beside the accountant's ε; the lower bound never exceeds the accountant's ε on the shipped
private quickstarts (DP-FedAvg, and DP-FTRL)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_lightning.attacks.canaries import CanaryAudit
from fl_lightning.attacks.cli import main as audit_main
from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.records import RoundContext
from fl_lightning.testing import round_context

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", ["quickstart.yaml", "quickstart_ftrl.yaml"])
def test_lower_bound_stays_below_the_accountant_on_the_quickstarts(tmp_path, capsys, config):
    code = audit_main(
        [
            "--config", str(REPO / "configs" / "experiment" / config),
            "--attack", "canaries", "--num-canaries", "60",
            "--out", str(tmp_path),
            "--trainer.max_steps=6", f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    res = json.loads((tmp_path / "audit.json").read_text())
    entry = res["attacks"]["canaries"]
    assert 0.0 <= entry["epsilon_lower_bound"] <= res["accountant_epsilon"] < float("inf")
    assert (
        entry["epsilon_estimate_low"] <= entry["epsilon_estimate"] <= entry["epsilon_estimate_high"]
    )
    k = max(1, round(entry["guess_fraction"] * 60 / 2))
    assert entry["num_canaries"] == 60 and entry["guesses"] == 2 * k
    assert entry["observer"] == "all_models" and entry["epsilon_lower_bound"] <= (
        entry["lower_bound_ceiling"])  # fmt: skip
    assert "60 canary clients" in entry["sentence"] and "95% confidence" in entry["sentence"]
    assert "threat model" in entry["sentence"] and entry["mean_participations"] > 0
    assert "audit: accountant ε" in out


def test_checkpoint_with_canaries_is_refused(capsys):
    code = audit_main(["--config", "x.yaml", "--attack", "canaries", "--checkpoint", "c.ckpt"])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: audit.attack: canaries are inserted while")


def _ctx(round_idx: int, sampling: CohortSampling) -> RoundContext:
    return round_context(5, [], round_idx=round_idx, total_rounds=10, sampling=sampling)


def test_inserted_canaries_take_part_as_a_client_of_the_schedule_would():
    audit = CanaryAudit(40)
    audit.inserted = np.arange(40) % 3 == 0
    cyclic = CohortSampling("cyclic", 0.25, 20)  # every 4 rounds
    for t in range(8):
        got = audit.participants(_ctx(t, cyclic))
        assert got == [i for i in range(40) if i % 3 == 0 and i % 4 == t % 4]
    poisson = CohortSampling("poisson", 0.3, 100)
    counts = sum(len(audit.participants(_ctx(t, poisson))) for t in range(200))
    assert abs(counts / (200 * audit.inserted.sum()) - 0.3) < 0.05
    u = audit.direction(3, 1000)
    assert float(u.norm()) == pytest.approx(1.0) and torch.equal(u, audit.direction(3, 1000))


def test_the_adjacency_probed_is_the_guarantees():
    from fl_lightning.attacks.canaries import probed_adjacency

    assert probed_adjacency(CohortSampling("poisson", 0.3, 100)) == (
        "add/remove one client", "add/remove one client")  # fmt: skip
    assert probed_adjacency(CohortSampling("cyclic", 0.5, 20))[0] == "add/remove one client"
    assert probed_adjacency(CohortSampling("fixed", 1.0, 20))[1] == "add/remove one client"
    probed, claimed = probed_adjacency(CohortSampling("fixed", 0.3, 100))
    assert claimed == "replace-one client" and probed.startswith("replace-one client (")


def test_a_fixed_size_audit_substitutes_its_canaries(tmp_path, capsys):
    code = audit_main(
        [
            "--config", str(REPO / "configs" / "experiment" / "quickstart.yaml"),
            "--attack", "canaries", "--num-canaries", "20", "--model.sampling", "fixed",
            "--out", str(tmp_path), "--trainer.max_steps=2",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    entry = json.loads((tmp_path / "audit.json").read_text())["attacks"]["canaries"]
    assert entry["adjacency_claimed"] == "replace-one client"
    assert entry["adjacency_probed"].startswith("replace-one client (+C·u against −C·u)")
    assert "not the guarantee's" not in out


def test_canary_directions_are_orthonormal_and_projected_by_one_transform():
    from fl_lightning.attacks.canaries import CanaryFrame

    frame = CanaryFrame(300, 650, torch.Generator().manual_seed(3))  # p = 512 ≥ 300
    u = frame.vectors(range(300))
    assert torch.allclose(u @ u.T, torch.eye(300), atol=1e-5)
    x = torch.randn(650)
    assert np.allclose(frame.project(x), (u.double() @ x.double()).numpy(), atol=1e-5)
    many = CanaryFrame(600, 650, torch.Generator().manual_seed(3))  # more than 512: random
    assert torch.allclose(many.vectors([0, 599]).norm(dim=1), torch.ones(2))


def test_observers_compare_with_the_epsilon_of_what_they_see():
    from fl_lightning.attacks.observers import comparison_epsilon, insertion, observer
    from fl_lightning.strategies.ddp_fedavg import DDPFedAvg
    from fl_lightning.strategies.dp_fedavg import DPFedAvg

    report = {"privacy/epsilon": 3.0, "privacy/epsilon_server": 4.5}
    assert comparison_epsilon(observer("all_models"), report, DPFedAvg())[0] == 3.0
    eps, why = comparison_epsilon(observer("server"), report, DPFedAvg())
    assert eps == float("inf") and "each clipped upload" in why
    eps, why = comparison_epsilon(observer("server"), report, DDPFedAvg())
    assert eps == 4.5 and "no amplification" in why  # the guarantee's own ε against the server
    poisson = CohortSampling("poisson", 0.5, 40)
    assert insertion(observer("server"), poisson).out == "zero"
    assert insertion(observer("final"), poisson).out == "absent"
    with pytest.raises(ValueError, match="^audit.observer: one of final, all_models, server"):
        observer("client")


def test_the_ddg_audit_runs_and_names_the_server(tmp_path, capsys):
    """Issue 55 item 7: canaries join the SecAgg sum (no canary id in the masking graph)."""
    code = audit_main(
        [
            "--config", str(REPO / "configs" / "experiment" / "distributed_dp" / "ddg.yaml"),
            "--attack", "canaries", "--observer", "server", "--num-canaries", "20",
            "--out", str(tmp_path), "--trainer.max_steps=2",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    entry = json.loads((tmp_path / "audit.json").read_text())["attacks"]["canaries"]
    assert entry["observer"] == "server" and "observer server:" in out
    assert "no amplification" in entry["compared_with"]
    assert entry["mean_participations"] > 0  # "out" canaries take part too, uploading 0


def test_a_fedavg_canary_claims_the_largest_clients_weight(tmp_path, capsys):
    code = audit_main(
        [
            "--config", str(REPO / "configs" / "experiment" / "quickstart.yaml"),
            "--attack", "canaries", "--num-canaries", "40",
            "--strategy=fl_lightning.strategies.fedavg.FedAvg",
            "--out", str(tmp_path), "--trainer.max_steps=2",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    res = json.loads((tmp_path / "audit.json").read_text())
    entry = res["attacks"]["canaries"]
    assert entry["canary_weight"] > 1 and entry["guess_fraction"] == 1.0  # nothing claimed
    assert entry["correct_guesses"] >= 0.75 * entry["guesses"]  # not blind (chance: 0.5)
