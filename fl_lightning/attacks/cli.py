"""``fl-lightning audit``: attack an experiment's global model.

    fl-lightning audit --config configs/experiment/<name>.yaml --attack threshold \\
        [--attack lira ...] [--checkpoint runs/.../last.ckpt] [--shadow-models 4] \\
        [--num-targets 500] [--mechanism gaussian --noise 1.0] [CLI overrides ...]

Without ``--checkpoint`` the experiment is trained first (``fit``, with the ``AuditCallback``
attached, so the per-round series for CS-MIA are recorded). With ``--checkpoint`` the run is
restored by Lightning (global model, strategy state, the accountant's ledger) and no round is
run. The objects are built by the same LightningCLI as ``fl-lightning fit``; every unknown
argument is passed to it as an override (``--trainer.max_steps=5``). Results go to the run's
log directory (``audit.json``, ``audit_<attack>.png``) and to its loggers (W&B).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fl_lightning.utils.argparse_lines import OneLineParser

if TYPE_CHECKING:
    from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
    from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fl-lightning audit", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="experiment YAML")
    p.add_argument(
        "--attack",
        action="append",
        required=True,
        help="threshold | ml_leaks | lira | cs_mia | dlg | idlg | mia | inversion | all | "
        "canaries (repeatable; canaries: a one-run empirical ε from canary clients inserted "
        "while training)",
    )
    p.add_argument("--checkpoint", help="a Lightning checkpoint of the run (skips training)")
    p.add_argument("--num-targets", type=int, default=500)
    p.add_argument("--shadow-models", type=int, default=4)
    p.add_argument("--threshold-score", default="loss", choices=["loss", "confidence"])
    p.add_argument("--dlg-iterations", type=int, default=300)
    p.add_argument("--dlg-batch-size", type=int, default=1)
    p.add_argument("--dlg-examples", type=int, default=4)
    p.add_argument("--dlg-client", type=int, default=0)
    p.add_argument(
        "--dlg-restarts",
        type=int,
        default=1,
        help="random initialisations per batch; the lowest gradient-matching loss is kept",
    )
    p.add_argument(
        "--dlg-ssim-threshold",
        type=float,
        default=0.8,
        help="a batch counts as recovered when its SSIM is at least this (default 0.8)",
    )
    p.add_argument(
        "--mechanism",
        choices=["none", "gaussian", "laplace"],
        default="none",
        help="extra mechanism on the attacked upload (on top of the strategy's own)",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=1.0,
        help="gaussian: noise multiplier; laplace: ε of one release",
    )
    p.add_argument("--sensitivity", type=float, default=1.0)
    p.add_argument("--num-canaries", type=int, default=200, help="canaries: how many")
    p.add_argument(
        "--confidence", type=float, default=0.95, help="canaries: of the lower bound (1 - β)"
    )
    p.add_argument(
        "--guess-fraction",
        type=float,
        default=None,
        help="canaries: share of canaries the lower bound's auditor guesses on (default: "
        "planned from the claimed ε before the scores are read)",
    )
    p.add_argument(
        "--observer",
        default="all_models",
        choices=["final", "all_models", "server"],
        help="canaries: who the audit attacks: a third party with the final model, one with "
        "every released model (default), or the server (docs/audit.md)",
    )
    p.add_argument("--out", help="output directory (default: the run's log directory)")
    p.add_argument("--seed", type=int, default=0)
    return p


def _mechanism(args: argparse.Namespace) -> GaussianMechanism | LaplaceMechanism | None:
    if args.mechanism == "gaussian":
        from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism

        return GaussianMechanism(noise_multiplier=args.noise, sensitivity=args.sensitivity)
    if args.mechanism == "laplace":
        from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism

        return LaplaceMechanism(epsilon=args.noise, sensitivity=args.sensitivity)
    return None


def _read_checkpoint(path: str) -> dict[str, Any]:
    """``--checkpoint``, read before anything is built (``weights_only``: an untrusted
    checkpoint cannot run code, docs/reliability.md); one line naming the flag if it cannot."""
    from fl_lightning.utils.atomic import checkpoint_error

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to read it means the same thing
        raise checkpoint_error(path, err, field="--checkpoint") from err
    if not isinstance(ckpt, dict) or "global_step" not in ckpt:
        raise ValueError(
            f"--checkpoint: {path} is not a Lightning checkpoint (no global_step); give a .ckpt "
            "written by fl-lightning fit (<run>/checkpoints/last.ckpt)"
        )
    return ckpt


def audit(argv: list[str]) -> dict:
    """Parses ``argv``, trains or restores the run, attacks it; returns the results."""
    from fl_lightning.attacks.callback import AuditCallback
    from fl_lightning.attacks.pipeline import Pipeline

    args, overrides = _parser().parse_known_args(argv)
    attacks = [a for a in args.attack if a != "canaries"]
    canaries = None
    if "canaries" in args.attack:
        if args.checkpoint:
            raise ValueError(
                "audit.attack: canaries are inserted while training; drop --checkpoint to "
                "train and audit in one go"
            )
        from fl_lightning.attacks.canaries import CanaryAudit

        canaries = CanaryAudit(
            args.num_canaries,
            observer=args.observer,
            confidence=args.confidence,
            guess_fraction=args.guess_fraction,
            seed=args.seed,
            output_dir=args.out,
        )
    if (
        args.checkpoint and "cs_mia" not in attacks and any(a in ("mia", "all") for a in attacks)
    ):  # a group asked for it, not the user: run the others, say why cs_mia is left out
        from fl_lightning.attacks.callback import expand_attacks

        attacks = [a for a in expand_attacks(attacks) if a != "cs_mia"]
        print(
            "note: cs_mia left out: it needs the per-round series recorded while training "
            "(drop --checkpoint to include it)"
        )
    callback = (
        None
        if not attacks
        else AuditCallback(
            attacks,
            num_targets=args.num_targets,
            shadow_models=args.shadow_models,
            threshold_score=args.threshold_score,
            dlg_iterations=args.dlg_iterations,
            dlg_batch_size=args.dlg_batch_size,
            dlg_examples=args.dlg_examples,
            dlg_client=args.dlg_client,
            dlg_restarts=args.dlg_restarts,
            dlg_ssim_threshold=args.dlg_ssim_threshold,
            mechanism=_mechanism(args),
            output_dir=args.out,
            seed=args.seed,
        )
    )
    if callback is not None and args.checkpoint and "cs_mia" in callback.attacks:
        raise ValueError(
            "audit.attack: cs_mia needs the per-round series recorded while training; "
            "drop --checkpoint to train and attack in one go"
        )
    ckpt = _read_checkpoint(args.checkpoint) if args.checkpoint else None
    pipeline = Pipeline(["--config", args.config, *overrides])
    if callback is not None:
        callback.pipeline = pipeline
    extra: list[str] = []
    if ckpt is not None and callback is not None:
        # Resume to exactly the checkpoint's round: Lightning restores everything, runs nothing.
        extra.append(f"--trainer.max_steps={int(ckpt['global_step'])}")
        if args.out is None:
            callback.output_dir = str(Path(args.checkpoint).resolve().parent.parent)
    cli = pipeline.build(*extra)
    if callback is not None:
        cli.trainer.callbacks.append(callback)
    if canaries is not None:  # after the MIA callback: it merges into that audit.json
        cli.trainer.callbacks.append(canaries)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=args.checkpoint)
    results = dict(callback.results) if callback is not None else {}
    if canaries is not None:
        attacks_out = {**results.get("attacks", {}), **canaries.results["attacks"]}
        results = {**canaries.results, **results, "attacks": attacks_out}
    return results


def main(argv: list[str]) -> int:
    from jsonargparse import ArgumentError

    from fl_lightning.runs.error_lines import one_line

    try:
        audit(list(argv))
    except (ArgumentError, ValueError, FileNotFoundError, TypeError, KeyError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
