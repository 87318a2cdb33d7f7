"""A custom model, dataset and strategy; from the repository root: fl-lightning fit
--import examples/custom/my_fl.py --config examples/custom/config.yaml (README, "Your own code")."""

import torch
from sklearn.datasets import make_moons
from torch import nn

from fl_lightning.data import datasets as ds
from fl_lightning.strategies.fedavg import FedAvg


class TinyNet(nn.Module):
    def __init__(self, hidden: int = 16, num_classes: int = 2) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def load_moons(root, download, seed, test_fraction=0.2, **_):
    """``(train, test)`` as in-memory tensors; ``data.dataset: moons`` in a config."""
    x, y = make_moons(n_samples=2000, noise=0.2, random_state=seed)
    tr, te = ds.stratified_split(y, test_fraction, seed)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    return ds.TensorDataset(x[tr], y[tr], 2), ds.TensorDataset(x[te], y[te], 2)


if "moons" not in ds.DATASETS:
    ds.register_dataset("moons", ds.DatasetSpec(load=load_moons))


class FedMedian(FedAvg):
    """Coordinate-wise median of the client deltas (Yin et al. 2018), robust to outliers."""

    reduction = "gather"  # it needs every update at once, not their sum

    def aggregate(self, updates, ctx, *, generator):
        return torch.stack([u.delta for u in updates]).median(dim=0).values, {}  # (delta, metrics)
