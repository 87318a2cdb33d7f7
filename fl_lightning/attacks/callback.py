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
        dlg_examples: how many single batches to invert (metrics are averaged).
        dlg_client: the attacked client's id.
        mechanism: an extra mechanism applied to the upload before inversion (e.g. a
            ``GaussianMechanism``), on top of the strategy's own ``process_update``.
        output_dir: where ``audit.json`` goes (default: the trainer's log directory).
        seed: seed of the audit split, the shadows and the attacks.
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
        mechanism: Mechanism | None = None,
        output_dir: str | None = None,
        seed: int = 0,
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
        self.num_targets = num_targets
        self.shadow_models = shadow_models
        self.threshold_score: Literal["loss", "confidence"] = (
            "loss" if threshold_score == "loss" else "confidence"
        )
        self.dlg_iterations = dlg_iterations
        self.dlg_batch_size = dlg_batch_size
        self.dlg_examples = dlg_examples
        self.dlg_client = dlg_client
        self.mechanism = mechanism
        self.output_dir = output_dir
        self.seed = seed
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
        if not trainer.is_global_zero:
            return
        pipeline = self.pipeline or Pipeline.from_trainer(trainer)
        out_dir = Path(self.output_dir or trainer.log_dir or trainer.default_root_dir)
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
        from fl_lightning.attacks.dlg import invert_gradient, upload_gradient
        from fl_lightning.attacks.images import image_metrics, save_grid

        x_all, y_all = datamodule.client_data(self.dlg_client)
        x_all, y_all = x_all.cpu(), y_all.cpu()
        b = self.dlg_batch_size
        n_batches = min(self.dlg_examples, len(y_all) // b)
        if n_batches < 1:
            raise ValueError(f"audit.dlg_client: client {self.dlg_client} has too few examples")
        metrics: list[dict[str, float]] = []
        originals: list[torch.Tensor] = []
        snaps: list[list[torch.Tensor]] = [[], [], []]
        labels_ok: list[float] = []
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
            )
            metrics.append(image_metrics(x, res.reconstruction))
            labels_ok.append(float((res.label == y).float().mean()))
            originals.append(x)
            for k, s in enumerate(res.snapshots[:3]):
                snaps[k].append(s)
        grid = save_grid(
            out_dir / f"audit_{name}.png",
            torch.cat(originals),
            [torch.cat(s) for s in snaps if s],
        )
        entry: dict[str, Any] = {
            k: sum(m[k] for m in metrics) / len(metrics) for k in ("mse", "psnr", "ssim")
        }
        entry.update(
            {
                "label_accuracy": sum(labels_ok) / len(labels_ok),
                "batches": n_batches,
                "batch_size": b,
                "iterations": self.dlg_iterations,
                "snapshot_iterations": res.snapshot_iterations,
                "ssim_per_batch": [m["ssim"] for m in metrics],
                "mechanism": type(self.mechanism).__name__ if self.mechanism else None,
                "strategy": type(module.strategy).__name__,
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
                            caption=["rows: examples; columns: original, 1/3, 2/3, 3/3"],
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
                f"  {name:<10} SSIM {e['ssim']:.3f}  PSNR {e['psnr']:.2f} dB  MSE {e['mse']:.4f}  "
                f"label acc {e['label_accuracy']:.2f}  grid {e['grid']}"
            )
    return "\n".join(lines)
