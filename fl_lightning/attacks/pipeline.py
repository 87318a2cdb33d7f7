"""Target and shadow runs through the same machinery as ``fl-lightning fit``.

Nothing is re-implemented for the attacks: a shadow model is the experiment's own
``FederatedModule`` (same client, strategy, privacy, rounds) built by the LightningCLI from the
same config, trained by a Lightning ``Trainer`` on a shadow split of the attacker's data
(Shokri et al. 2017, Sec. IV-B: shadow models mimic the target's training procedure).

The audit split (``audit_split``): *members* are drawn from the clients' training data,
*non-members* (same number) from the held-out test split; the attacker's *shadow pool* is
everything else (the rest of the test split and the training examples not drawn as members),
disjoint from both target sets. Shadow models are trained on random halves of the pool, so on a
small dataset (digits: 360 test images) they still get about as much data as the target did.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fl_lightning.data.datasets import TensorDataset
from fl_lightning.data.partitioners import PARTITIONERS


@dataclass
class Examples:
    """Labelled examples (on the CPU)."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, idx: np.ndarray | torch.Tensor) -> Examples:
        idx = torch.as_tensor(idx, dtype=torch.long)
        return Examples(self.x[idx], self.y[idx])


@dataclass
class AuditSplit:
    """Equal-size member / non-member target sets and the attacker's disjoint shadow pool."""

    members: Examples
    nonmembers: Examples
    shadow_pool: Examples
    num_classes: int
    target_train_size: int

    @property
    def targets(self) -> Examples:
        return Examples(
            torch.cat([self.members.x, self.nonmembers.x]),
            torch.cat([self.members.y, self.nonmembers.y]),
        )


def audit_split(datamodule: Any, *, num_targets: int, seed: int) -> AuditSplit:
    """Draws members from the clients' data, non-members and the shadow pool from the test set.

    ``num_targets`` is capped at half the test split so that both target sets have the same
    size and the shadow pool is at least as large as each.
    """
    datamodule.setup("fit")
    if getattr(datamodule, "clients", None) is not None:
        raise ValueError(
            f"data.dataset: the audit draws members from an in-memory training set; "
            f"{datamodule.dataset_name!r} is read client by client from its files"
        )
    train, test = datamodule.train, datamodule.test
    if test is None or len(test) < 4:
        raise ValueError(
            "data.test_fraction: the audit needs a held-out test split (>= 4 examples)"
        )
    rng = np.random.default_rng([seed, 7919])
    in_clients = torch.cat([ix.cpu() for ix in datamodule.client_indices]).unique().numpy()
    n = min(num_targets, len(test) // 2, len(in_clients))
    if n < 2:
        raise ValueError(f"audit: need at least 2 members and non-members, got {n}")
    members = rng.choice(in_clients, size=n, replace=False)
    order = rng.permutation(len(test))
    tx, ty = test.x.cpu(), test.y.cpu()
    rest = np.setdiff1d(np.arange(len(train)), members)
    train_ex = Examples(train.x.cpu(), train.y.cpu())
    test_rest = Examples(tx, ty).subset(order[n:])
    train_rest = train_ex.subset(rest)
    return AuditSplit(
        members=train_ex.subset(members),
        nonmembers=Examples(tx, ty).subset(order[:n]),
        shadow_pool=Examples(
            torch.cat([test_rest.x, train_rest.x]), torch.cat([test_rest.y, train_rest.y])
        ),
        num_classes=int(train.num_classes),
        target_train_size=len(in_clients),
    )


@torch.no_grad()
def logits_of(net: torch.nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """The network's logits on ``x`` (eval mode, on the network's device), on the CPU."""
    device = next(net.parameters()).device
    was_training = net.training
    net.eval()
    out = torch.cat(
        [net(x[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
    )
    net.train(was_training)
    # A diverged model (e.g. heavy noise without tuning) outputs NaN: read it as uninformative.
    return torch.nan_to_num(out, nan=0.0, posinf=1e4, neginf=-1e4)


def per_example_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


def true_class_confidence(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return logits.softmax(dim=1).gather(1, y[:, None]).squeeze(1)


def restrict_datamodule(datamodule: Any, train: Examples, test: Examples) -> None:
    """Replaces a set-up datamodule's data by ``train`` / ``test``, re-partitioned among the
    same number of clients with the configured partitioner (the shadow run's population)."""
    hp = datamodule.hparams
    num_classes = datamodule.train.num_classes
    datamodule.train = TensorDataset(train.x.clone(), train.y.clone(), num_classes)
    datamodule.test = TensorDataset(test.x.clone(), test.y.clone(), num_classes)
    datamodule.val = None
    partitioner = hp.partitioner if hp.partitioner in PARTITIONERS else "iid"
    try:
        datamodule.client_indices = datamodule.partition(
            train.y, datamodule.num_clients, partitioner
        )
    except ValueError as err:
        raise ValueError(
            f"audit.shadow_models: a shadow run trains on {len(train)} examples, which the "
            f"experiment's partition cannot split among {datamodule.num_clients} clients ({err}); "
            "use fewer --num-targets or a larger dataset"
        ) from err


_EXPERIMENT_KEYS = ("seed_everything", "trainer", "model", "data", "client", "strategy", "privacy")


class Pipeline:
    """Builds fresh runs of one experiment with the ``fl-lightning`` LightningCLI.

    Args:
        args: the CLI arguments of the experiment (``--config <file>`` plus overrides), without
            the subcommand.
    """

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self._tmp: list[tempfile.TemporaryDirectory] = []

    @classmethod
    def from_trainer(cls, trainer: Any) -> Pipeline:
        """The pipeline of a running ``fit``: its resolved config, from the CLI's
        SaveConfigCallback (so the shadows use exactly the target's settings)."""
        from lightning.pytorch.cli import SaveConfigCallback

        for cb in trainer.callbacks:
            if isinstance(cb, SaveConfigCallback):
                tmp = tempfile.TemporaryDirectory(prefix="fl-audit-config-")
                path = Path(tmp.name) / "config.yaml"
                import yaml

                config = yaml.safe_load(cb.parser.dump(cb.config, skip_none=False, format="yaml"))
                # Keep the experiment's groups; drop fit-subcommand options (ckpt_path, ...).
                config = {k: v for k, v in config.items() if k in _EXPERIMENT_KEYS}
                path.write_text(yaml.safe_dump(config))
                pipe = cls(["--config", str(path)])
                pipe._tmp.append(tmp)
                return pipe
        raise ValueError(
            "trainer.callbacks: the audit callback needs a run started by fl-lightning "
            "(its config), to train shadow models with the same pipeline"
        )

    def build(self, *extra: str, root_dir: str | None = None, quiet: bool = False) -> Any:
        """A LightningCLI with ``.model``, ``.datamodule``, ``.trainer``, not run."""
        from fl_lightning.runs.cli_class import build_cli_class

        args = [*self.args, *extra]
        if root_dir is not None:
            args += ["--trainer.default_root_dir", root_dir]
        if quiet:
            args += ["--trainer.logger=false", "--trainer.enable_model_summary=false"]
        cli = build_cli_class()(args, run=False)
        if quiet:  # shadows never audit themselves, show progress or write checkpoints
            from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

            drop = (ModelCheckpoint, ProgressBar)
            cli.trainer.callbacks[:] = [
                cb
                for cb in cli.trainer.callbacks
                if not isinstance(cb, drop) and not getattr(cb, "skip_in_shadow_runs", False)
            ]
        return cli

    def train_shadow(
        self,
        train: Examples,
        test: Examples,
        *,
        seed: int,
        callbacks: Sequence[Any] = (),
        label: str = "shadow run",
    ) -> Any:
        """Trains the experiment on (``train``, ``test``) with ``seed``; returns the module.
        Its summary line on the console starts with ``label`` and says it is the attacker's
        model, so it is not read as the audited run's."""
        tmp = tempfile.TemporaryDirectory(prefix="fl-audit-shadow-")
        self._tmp.append(tmp)
        cli = self.build(f"--seed_everything={seed}", root_dir=tmp.name, quiet=True)
        cli.model.console_label = f"audit: {label} (the attacker's model, not the audited one): "
        cli.datamodule.setup("fit")
        restrict_datamodule(cli.datamodule, train, test)
        cli.trainer.callbacks.extend(callbacks)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        return cli.model

    def cleanup(self) -> None:
        for tmp in self._tmp:
            tmp.cleanup()
        self._tmp.clear()
