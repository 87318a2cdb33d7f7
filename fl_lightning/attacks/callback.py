"""``AuditCallback``: the attacks as an evaluation callback at the end of ``fit``.

Configure it in ``trainer.callbacks``::

    trainer:
      callbacks:
        - class_path: fl_lightning.attacks.callback.AuditCallback
          init_args: {attacks: [threshold, lira, dlg], shadow_models: 4}

At ``on_fit_start`` it fixes the audit split (members from the clients' data, as many
non-members from the test split, the rest of the test split as the attacker's shadow pool) and
starts recording the per-round confidence series of the targets (for CS-MIA). At
``on_fit_end`` it trains the shadow models with the same pipeline (``Pipeline.from_trainer``),
runs the attacks, logs ``audit/<attack>/<metric>`` (and the DLG grid as an image) to every
logger, and writes ``audit.json`` (and ``audit_<attack>.png``) into the run's log directory.
``fl-lightning audit`` uses the same callback.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch.callbacks import Callback

# The membership attacks register themselves at import (attacks/registry.py).
from fl_lightning.attacks import (
    ATTACKS,
    INVERSION_ATTACKS,
    MIA_ATTACKS,
    cs_mia,  # noqa: F401
    lira,  # noqa: F401
    ml_leaks,  # noqa: F401
    threshold,  # noqa: F401
)
from fl_lightning.attacks.metrics import MIAResult
from fl_lightning.attacks.pipeline import AuditSplit, Pipeline, audit_split
from fl_lightning.attacks.registry import AttackSettings, get_attack
from fl_lightning.attacks.shadows import SeriesRecorder, ShadowBank
from fl_lightning.privacy.mechanisms.base import Mechanism


def expand_attacks(attacks: Sequence[str]) -> list[str]:
    """Resolves ``all`` / ``mia`` / ``inversion`` and checks the names."""
    out: list[str] = []
    for name in attacks:
        group = {"all": ATTACKS, "mia": MIA_ATTACKS, "inversion": INVERSION_ATTACKS}.get(name)
        for a in group or (name,):
            if a not in ATTACKS:
                raise ValueError(
                    f"audit.attacks: unknown attack {a!r}; choose from {list(ATTACKS)}"
                )
            if a not in out:
                out.append(a)
    return out


class AuditCallback(Callback):
    """Runs privacy attacks against the trained global model at the end of ``fit``.

    Args:
        attacks: attack names (``threshold``, ``ml_leaks``, ``lira``, ``cs_mia``, ``dlg``,
            ``idlg``) or groups ``mia`` / ``inversion`` / ``all``.
        num_targets: members and non-members each (capped at half the test split).
        shadow_models: k, shadow runs for LiRA (the other shadow attacks use the first).
        threshold_score: ``loss`` (Yeom) or ``confidence`` for the threshold attack.
        dlg_iterations: L-BFGS iterations of DLG / iDLG.
        dlg_batch_size: examples in the attacked client's batch.
        dlg_examples: how many batches to invert (per-batch metrics, their median and mean,
            and the fraction recovered are reported).
        dlg_client: the attacked client's id.
        dlg_restarts: random initialisations per batch; the lowest matching loss is kept.
        dlg_ssim_threshold: a batch counts as recovered when its SSIM is at least this.
        mechanism: an extra mechanism applied to the upload before inversion (e.g. a
            ``GaussianMechanism``), on top of the strategy's own ``process_update``.
        output_dir: where ``audit.json`` goes (default: the trainer's log directory).
        seed: seed of the audit split, the shadows and the attacks.
        shadow_rounds: rounds of each shadow run (``None``: the target's ``trainer.max_steps``).
            Fewer rounds make the audit cheaper, but a shadow that trained less fits its
            members less than the target did, so attacks calibrated on it are weaker (their
            accuracy is a lower bound); CS-MIA then compares the last ``shadow_rounds`` rounds.
    """

    # Shadow runs built from this run's config leave this callback out (Pipeline.build).
    skip_in_shadow_runs: ClassVar[bool] = True

    def __init__(
        self,
        attacks: Sequence[str] = ("threshold", "lira", "dlg"),
        *,
        num_targets: int = 500,
        shadow_models: int = 4,
        threshold_score: str = "loss",
        dlg_iterations: int = 300,
        dlg_batch_size: int = 1,
        dlg_examples: int = 4,
        dlg_client: int = 0,
        dlg_restarts: int = 1,
        dlg_ssim_threshold: float = 0.8,
        mechanism: Mechanism | None = None,
        output_dir: str | None = None,
        seed: int = 0,
        shadow_rounds: int | None = None,
    ) -> None:
        super().__init__()
        self.attacks = expand_attacks(attacks)
        if num_targets < 2:
            raise ValueError(f"audit.num_targets: must be >= 2, got {num_targets}")
        if shadow_models < 1:
            raise ValueError(f"audit.shadow_models: must be >= 1, got {shadow_models}")
        if "lira" in self.attacks and shadow_models < 2:
            raise ValueError("audit.shadow_models: LiRA needs at least 2 shadow models")
        if threshold_score not in ("loss", "confidence"):
            raise ValueError(
                f"audit.threshold_score: expected 'loss' or 'confidence', got {threshold_score!r}"
            )
        if dlg_iterations < 3:
            raise ValueError(f"audit.dlg_iterations: must be >= 3, got {dlg_iterations}")
        if dlg_batch_size < 1 or dlg_examples < 1:
            raise ValueError("audit.dlg_batch_size, audit.dlg_examples: must be >= 1")
        if dlg_restarts < 1:
            raise ValueError(f"audit.dlg_restarts: must be >= 1, got {dlg_restarts}")
        if not -1.0 <= dlg_ssim_threshold <= 1.0:
            raise ValueError(
                f"audit.dlg_ssim_threshold: SSIM lies in [-1, 1], got {dlg_ssim_threshold}"
            )
        self.num_targets = num_targets
        self.shadow_models = shadow_models
        self.threshold_score: Literal["loss", "confidence"] = (
            "loss" if threshold_score == "loss" else "confidence"
        )
        self.dlg_iterations = dlg_iterations
        self.dlg_batch_size = dlg_batch_size
        self.dlg_examples = dlg_examples
        self.dlg_client = dlg_client
        self.dlg_restarts = dlg_restarts
        self.dlg_ssim_threshold = dlg_ssim_threshold
        self.mechanism = mechanism
        self.output_dir = output_dir
        self.seed = seed
        if shadow_rounds is not None and shadow_rounds < 2:
            raise ValueError(f"audit.shadow_rounds: must be >= 2, got {shadow_rounds}")
        self.shadow_rounds = shadow_rounds
        self.pipeline: Pipeline | None = None
        self.split: AuditSplit | None = None
        self.recorder: SeriesRecorder | None = None
        self.results: dict[str, Any] = {}

    # -- Lightning hooks ---------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.split = audit_split(trainer.datamodule, num_targets=self.num_targets, seed=self.seed)
        self.recorder = SeriesRecorder(self.split.targets)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        if self.recorder is not None and "cs_mia" in self.attacks:
            self.recorder.on_train_batch_end(trainer, pl_module)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        log_dir = trainer.log_dir  # a collective under DDP: every rank asks
        if not trainer.is_global_zero:
            return
        pipeline = self.pipeline or Pipeline.from_trainer(trainer)
        out_dir = Path(self.output_dir or log_dir or trainer.default_root_dir)
        self.run(pl_module, trainer.datamodule, pipeline, out_dir=out_dir, loggers=trainer.loggers)

    # -- the audit ---------------------------------------------------------------------------
    def run(
        self,
        module: Any,
        datamodule: Any,
        pipeline: Pipeline,
        *,
        out_dir: Path,
        loggers: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """Runs every configured attack against ``module``; logs and writes ``audit.json``."""
        if self.split is None:
            self.split = audit_split(datamodule, num_targets=self.num_targets, seed=self.seed)
        split = self.split
        target = module.global_net
        report = module.accountant.report() if module.accountant is not None else {}
        acc_eps = float(report.get("privacy/epsilon", math.inf))
        delta = float(report.get("privacy/delta", 1e-5))
        if self.shadow_rounds is not None:
            flag = f"--trainer.max_steps={self.shadow_rounds}"
            if flag not in pipeline.args:
                pipeline.args.append(flag)  # the shadows' rounds; the rest is the target's
        bank = ShadowBank(pipeline, split, seed=self.seed)
        results: dict[str, Any] = {
            "accountant_epsilon": acc_eps,
            "accountant_delta": delta,
            "guarantee": report.get("privacy/guarantee", "none: no accountant"),
            # a restored run has global_step but no rounds_completed (not checkpointed)
            "rounds": int(module.rounds_completed) or int(module.global_step),
            "num_members": len(split.members),
            "num_nonmembers": len(split.nonmembers),
            "shadow_pool": len(split.shadow_pool),
            "attacks": {},
        }
        was_training = target.training
        try:
            for name in self.attacks:
                start = time.perf_counter()
                if name in MIA_ATTACKS:
                    res = self._mia(name, target, split, bank, delta=delta)
                    res.accountant_epsilon, res.accountant_delta = acc_eps, delta
                    entry = res.to_dict()
                else:
                    entry = self._inversion(name, module, datamodule, out_dir, loggers)
                entry["seconds"] = time.perf_counter() - start
                results["attacks"][name] = entry
        finally:
            target.train(was_training)
            pipeline.cleanup()
        self.results = results
        self._publish(results, out_dir, loggers)
        return results

    def _mia(
        self,
        name: str,
        target: torch.nn.Module,
        split: AuditSplit,
        bank: ShadowBank,
        *,
        delta: float,
    ) -> MIAResult:
        settings = AttackSettings(
            threshold_score=self.threshold_score,
            shadow_models=self.shadow_models,
            series=self.recorder.as_array() if self.recorder is not None else None,
        )
        attack = get_attack(name)
        return attack(target, split, bank, delta=delta, seed=self.seed, settings=settings)

    def _inversion(
        self, name: str, module: Any, datamodule: Any, out_dir: Path, loggers: Sequence[Any]
    ) -> dict[str, Any]:
        from fl_lightning.attacks.dlg import THREAT_MODEL, invert_gradient, upload_gradient
        from fl_lightning.attacks.images import image_metrics, save_grid, summarize

        x_all, y_all = datamodule.client_data(self.dlg_client)
        x_all, y_all = x_all.cpu(), y_all.cpu()
        b = self.dlg_batch_size
        n_batches = min(self.dlg_examples, len(y_all) // b)
        if n_batches < 1:
            raise ValueError(f"audit.dlg_client: client {self.dlg_client} has too few examples")
        per_batch: list[dict[str, Any]] = []
        originals: list[torch.Tensor] = []
        snaps: list[list[torch.Tensor]] = [[], [], []]
        iterations: list[int] = []
        for i in range(n_batches):
            x, y = x_all[i * b : (i + 1) * b], y_all[i * b : (i + 1) * b]
            grads = upload_gradient(
                module,
                x,
                y,
                client_id=self.dlg_client,
                mechanism=self.mechanism,
                seed=self.seed + i,
            )
            net = module.global_net.cpu()
            res = invert_gradient(
                net,
                grads,
                input_shape=tuple(x.shape[1:]),
                num_classes=module.num_classes,
                batch_size=b,
                method=name,
                iterations=self.dlg_iterations,
                seed=self.seed + i,
                restarts=self.dlg_restarts,
            )
            m: dict[str, Any] = image_metrics(x, res.reconstruction)
            m["label_accuracy"] = float((res.label == y).float().mean())
            m["matching_loss"] = res.final_loss
            per_batch.append(m)
            originals.append(x)
            iterations = res.snapshot_iterations
            for k, s in enumerate(res.snapshots[:3]):
                snaps[k].append(s)
        label = type(module.strategy).__name__ + (
            f" + {type(self.mechanism).__name__} on the upload" if self.mechanism else ""
        )
        grid = save_grid(
            out_dir / f"audit_{name}.png",
            torch.cat(originals),
            [torch.cat(s) for s in snaps if s],
            snapshot_iterations=iterations,
            title=f"{name.upper()} against client {self.dlg_client}'s upload ({label}), "
            f"round {int(module.rounds_completed) or int(module.global_step)}",
        )
        entry: dict[str, Any] = summarize(per_batch, ssim_threshold=self.dlg_ssim_threshold)
        entry.update(
            {
                "label_accuracy": sum(m["label_accuracy"] for m in per_batch) / len(per_batch),
                "batches": n_batches,
                "batch_size": b,
                "iterations": self.dlg_iterations,
                "restarts": self.dlg_restarts,
                "snapshot_iterations": iterations,
                "per_batch": per_batch,
                "mechanism": type(self.mechanism).__name__ if self.mechanism else None,
                "strategy": type(module.strategy).__name__,
                "threat_model": THREAT_MODEL,
                "grid": str(grid),
            }
        )
        return entry

    def _publish(self, results: dict[str, Any], out_dir: Path, loggers: Sequence[Any]) -> None:
        from lightning.pytorch.loggers import WandbLogger

        flat: dict[str, float] = {}
        for attack, entry in results["attacks"].items():
            for k, v in entry.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    flat[f"audit/{attack}/{k}"] = float(v)
        for logger in loggers:
            logger.log_metrics(flat, step=int(results["rounds"]))
            if isinstance(logger, WandbLogger):
                for k, v in flat.items():
                    logger.experiment.summary[k] = v
                for attack, entry in results["attacks"].items():
                    if "grid" in entry:
                        logger.log_image(
                            key=f"audit/{attack}/reconstruction",
                            images=[entry["grid"]],
                            caption=[
                                "columns: examples; rows: original, then the reconstruction "
                                "at 1/3, 2/3 and 3/3 of the iterations (SSIM per tile)"
                            ],
                        )
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "audit.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(format_table(results))


def format_table(results: dict[str, Any]) -> str:
    """A plain-text summary: one line per attack, the accountant's ε beside the bound."""
    eps = results["accountant_epsilon"]
    lines = [f"audit: accountant ε = {eps:.3g} (δ = {results['accountant_delta']:g})"]
    for name, e in results["attacks"].items():
        if "auc" in e:
            lines.append(
                f"  {name:<10} AUC {e['auc']:.3f}  bal.acc {e['balanced_accuracy']:.3f}  "
                f"TPR@0.1%FPR {e['tpr_at_0_1pct_fpr']:.3f}  TPR@1%FPR {e['tpr_at_1pct_fpr']:.3f}  "
                f"ε_lb {e['epsilon_lower_bound']:.3f} (≤ ε {eps:.3g})"
            )
        else:
            lines.append(
                f"  {name:<10} recovered {e['recovered_fraction']:.0%} of {e['batches']} "
                f"batches (SSIM ≥ {e['ssim_threshold']:g})  median / mean: "
                f"SSIM {e['ssim_median']:.3f} / {e['ssim_mean']:.3f}  "
                f"PSNR {e['psnr_median']:.1f} / {e['psnr_mean']:.1f} dB  "
                f"MSE {e['mse_median']:.4f} / {e['mse_mean']:.4f}  "
                f"label acc {e['label_accuracy']:.2f}"
            )
            per = ", ".join(f"{m['ssim']:.2f}" for m in e["per_batch"])
            lines.append(f"  {'':<10} per-batch SSIM [{per}]; grid {e['grid']}")
    if any("threat_model" in e for e in results["attacks"].values()):
        from fl_lightning.attacks.dlg import THREAT_MODEL

        lines.append("  note: " + THREAT_MODEL)
    return "\n".join(lines)
