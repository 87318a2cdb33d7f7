"""Membership inference on an over-fitted model and on the same model under strong DP-SGD.

The over-fitted model (``configs/overfit.yaml``) is audited with ``fl-lightning audit``; the
DP-SGD one (``configs/overfit_dp.yaml``, ε = 1) by the ``AuditCallback`` at the end of ``fit``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_lightning.attacks.cli import main as audit_main
from fl_lightning.cli import main as cli_main

CONFIGS = Path(__file__).parent / "configs"


@pytest.fixture(scope="module")
def overfit(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("overfit")
    code = audit_main(
        [
            "--config",
            str(CONFIGS / "overfit.yaml"),
            "--attack",
            "threshold",
            "--attack",
            "lira",
            "--shadow-models",
            "6",
            "--num-targets",
            "200",
            "--out",
            str(out),
            f"--trainer.default_root_dir={out}",
        ]
    )
    assert code == 0
    return {**json.loads((out / "audit.json").read_text()), "_out": str(out)}


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("dp")
    code = cli_main(
        ["fit", "--config", str(CONFIGS / "overfit_dp.yaml"), f"--trainer.default_root_dir={out}"]
    )
    assert code == 0
    return json.loads((out / "audit.json").read_text())


@pytest.mark.parametrize("attack", ["threshold", "lira"])
def test_attacks_detect_membership_on_an_overfitted_model(overfit: dict, attack: str) -> None:
    res = overfit["attacks"][attack]
    assert res["auc"] >= 0.7, res
    assert res["num_members"] == res["num_nonmembers"] == overfit["num_members"]
    assert overfit["accountant_epsilon"] == float("inf")


@pytest.mark.parametrize("attack", ["threshold", "lira"])
def test_attacks_fail_under_strong_dp_sgd(private: dict, attack: str) -> None:
    assert private["accountant_epsilon"] <= 1.0 + 1e-6, private["guarantee"]
    res = private["attacks"][attack]
    assert res["auc"] < 0.6, res


def test_empirical_epsilon_never_exceeds_the_accountant(private: dict) -> None:
    eps = private["accountant_epsilon"]
    for name, res in private["attacks"].items():
        assert res["epsilon_lower_bound"] <= eps, (
            f"{name}: empirical ε lower bound {res['epsilon_lower_bound']:.4f} "
            f"(TPR {res['eps_tpr']:.4f}, FPR {res['eps_fpr']:.4f}, "
            f"{res['eps_confidence']:.0%} Clopper-Pearson) exceeds the accountant's ε {eps:.4f} "
            f"({private['guarantee']}): one of the two is wrong"
        )
        assert res["accountant_epsilon"] == eps


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack", "nope"], "unknown attack"),
        (["--attack", "cs_mia", "--checkpoint", "x.ckpt"], "cs_mia needs"),
        (["--attack", "lira", "--shadow-models", "1"], "LiRA needs"),
        (
            ["--attack", "threshold", "--checkpoint", "no/such.ckpt"],
            "error: --checkpoint: no/such.ckpt does not exist or is not a file; give a .ckpt",
        ),
        (  # a config given as the checkpoint: named as such, not a YAML or unpickling error
            ["--attack", "threshold", "--checkpoint", str(CONFIGS / "overfit.yaml")],
            f"error: --checkpoint: {CONFIGS / 'overfit.yaml'} is a text file (it begins ",
        ),
    ],
)
def test_bad_audit_arguments_exit_2(args: list[str], message: str, capsys, tmp_path) -> None:
    rc = audit_main(["--config", str(CONFIGS / "overfit.yaml"), *args,
                     f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not list(tmp_path.rglob("*")), "nothing may be written on bad input"


def test_audit_of_a_checkpoint_restores_the_run(overfit: dict, tmp_path: Path) -> None:
    """``--checkpoint`` restores the trained run (no round is run): the same model and the same
    shadow give exactly the numbers of the audit that trained it."""
    ckpt = Path(overfit["_out"]) / "checkpoints" / "last.ckpt"
    assert ckpt.exists()
    code = audit_main(
        [
            "--config",
            str(CONFIGS / "overfit.yaml"),
            "--attack",
            "threshold",
            "--shadow-models",
            "1",
            "--num-targets",
            "200",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(tmp_path),
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert code == 0
    res = json.loads((tmp_path / "audit.json").read_text())
    assert res["rounds"] == overfit["rounds"]
    assert res["attacks"]["threshold"]["auc"] == overfit["attacks"]["threshold"]["auc"]
