"""ClientModule: the model a client trains, as a LightningModule.

It owns the network, the loss, the evaluation metrics and the local optimizer's definition.
The FederatedModule never builds one per client: one ClientModule per process is reused for
every client (its weights are overwritten in place), see ``client/local_loop.py``.
"""

from __future__ import annotations

from typing import Literal

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.config import DPSGDConfig, LocalTrainingConfig
from fl_lightning.models.metrics import classification_metrics


def dp_incompatibility(net: nn.Module) -> str | None:
    """Why Opacus cannot run DP-SGD on ``net`` (None when it can)."""
    from opacus.validators import ModuleValidator

    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return (
                f"client.net: {type(module).__name__} mixes examples in a batch and breaks "
                "per-example DP-SGD; use GroupNorm"
            )
        if isinstance(module, nn.RNN):  # Opacus validates nn.LSTM and nn.GRU, not nn.RNN
            return (
                "client.net: nn.RNN keeps its weights in a fused kernel that per-example "
                "DP-SGD cannot see; use its drop-in replacement opacus.layers.DPRNN"
            )
    errors = ModuleValidator.validate(net, strict=False)
    return f"client.net: {errors[0]}" if errors else None


class ClientModule(pl.LightningModule):
    """A classifier trained by each client.

    Args:
        net: the network (any ``nn.Module`` mapping inputs to logits, e.g. your own
            ``my_module.MyNet`` with ``--import my_module``). The model zoo
            (``class_path: fl_lightning.models.<name>``): MLP, LogisticRegression, MnistCNN,
            CifarCNN, AbadiCNN, EmnistCNN, MnistLSTM, CharLSTM, SpmCifarCNN, VGG9, ResNet18GN,
            ResNet50GN.
        num_classes: number of classes (for the metrics).
        optimizer: local optimizer, ``sgd`` or ``adam``.
        lr: local learning rate.
        momentum: SGD momentum.
        weight_decay: L2 weight decay.
        local_epochs: passes over the local data per round (when ``local_steps`` is None).
        local_steps: local steps per round (overrides ``local_epochs``).
        batch_size: local batch size (expected Poisson batch size under DP-SGD).
        prox_mu: FedProx proximal coefficient.
        dp_sgd: sample-level DP-SGD settings (None: non-private local training).
        precision: ``"32"`` (default; YAML's ``32`` too) or ``"bf16-mixed"``: the local forward
            and loss under bfloat16 autocast, weights, gradients and optimizer state float32;
            refused under ``dp_sgd`` (``client/config.py: LocalTrainingConfig``). Evaluation
            stays float32.
    """

    def __init__(
        self,
        net: nn.Module,
        num_classes: int = 10,
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        local_epochs: int = 1,
        local_steps: int | None = None,
        batch_size: int = 32,
        prox_mu: float = 0.0,
        dp_sgd: DPSGDConfig | None = None,
        precision: str | int = "32",
    ) -> None:
        super().__init__()
        self.net = net
        self.num_classes = num_classes
        self.training_config = LocalTrainingConfig(
            optimizer=optimizer,
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            local_epochs=local_epochs,
            local_steps=local_steps,
            batch_size=batch_size,
            prox_mu=prox_mu,
            dp_sgd=dp_sgd,
            precision=str(precision),  # type: ignore[arg-type]  # checked in __post_init__
        )
        if dp_sgd is not None:
            problem = dp_incompatibility(net)
            if problem:
                raise ValueError(problem)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        cfg = self.training_config
        params = [p for p in self.net.parameters() if p.requires_grad]
        if cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )

    @torch.no_grad()
    def evaluate(
        self, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024
    ) -> dict[str, float]:
        """Loss, accuracy, macro recall and macro F1 of the current weights on (x, y)."""
        was_training = self.net.training
        self.net.eval()
        logits = torch.cat([self.net(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
        self.net.train(was_training)
        return classification_metrics(logits, y, self.num_classes)
