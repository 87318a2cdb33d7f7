"""Tutorial: a strategy's rounds run in this process by ``fl_lightning.testing.simulate``
(docs/tutorials/custom_strategy.md). From the repository root:
``python docs/tutorials/scripts/simulate_strategies.py``."""

import sys

import torch

sys.path.insert(0, "examples/custom")  # my_fl.py: TinyNet, the moons dataset, FedMedian

from my_fl import FedMedian, TinyNet

from fl_lightning.client.module import ClientModule
from fl_lightning.data import FederatedDataModule
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.testing import simulate

data = FederatedDataModule("moons", num_clients=8)
strategies = {
    "FedMedian": FedMedian(),
    "DPFedAvg σ=1": DPFedAvg(clip_norm=1.0, noise_multiplier=1.0),
}
for name, strategy in strategies.items():
    torch.manual_seed(0)  # the network's initial weights
    client = ClientModule(TinyNet(), num_classes=2, lr=0.2, local_steps=10)
    rounds = simulate(
        strategy, data, 5, client=client, privacy=PrivacyAccountant(), clients_per_round=4, seed=0
    )
    for r in rounds:
        loss = r.metrics["train/loss"]
        print(
            f"{name:13s} round {r.round_idx}: cohort {len(r.cohort)}, train/loss {loss:.4f}, "
            f"ε planned {r.planned_epsilon:.3f}, spent {r.epsilon:.3f}"
        )
