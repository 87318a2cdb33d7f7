"""Builds tiny real runs (synthetic data, an MLP, the real Opacus DP-SGD) for the DPFL-AGN and
NbAFL tests."""

from __future__ import annotations

import lightning.pytorch as pl

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server.module import FederatedModule


def tiny_run(
    strategy,
    *,
    rounds: int = 3,
    optimizer: str = "adam",
    lr: float = 0.01,
    sigma: float | None = 1.0,
    batch_size: int = 8,
    local_steps: int = 1,
    val_fraction: float = 0.1,
    target_epsilon: float | None = None,
    dp: bool = True,
    num_clients: int = 4,
    num_examples: int = 400,
    clients_per_round: int | None = None,
    default_root_dir: str | None = None,
) -> tuple[FederatedModule, pl.Trainer]:
    pl.seed_everything(0, verbose=False)
    client = ClientModule(
        net=MLP(input_dim=8, hidden=(16,), num_classes=3),
        num_classes=3,
        optimizer=optimizer,
        lr=lr,
        local_steps=local_steps,
        batch_size=batch_size,
        dp_sgd=DPSGDConfig(noise_multiplier=sigma, max_grad_norm=1.0) if dp else None,
    )
    module = FederatedModule(
        client=client,
        strategy=strategy,
        privacy=PrivacyAccountant("rdp", 1e-5, target_epsilon),
        clients_per_round=clients_per_round or num_clients,
        eval_every=0,
        seed=0,
    )
    data = FederatedDataModule(
        dataset="synthetic",
        num_clients=num_clients,
        partitioner="iid",
        val_fraction=val_fraction,
        dataset_options={"num_examples": num_examples, "num_features": 8, "num_classes": 3},
    )
    trainer = pl.Trainer(
        max_steps=rounds,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        accelerator="cpu",
        default_root_dir=default_root_dir,
    )
    trainer.fit(module, datamodule=data)
    return module, trainer
