"""Datasets (a registry of torchvision and offline sources), partitioners, the DataModule."""

from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.data.datasets import DATASETS, TensorDataset, register_dataset
from fl_lightning.data.partitioners import PARTITIONERS

__all__ = ["DATASETS", "PARTITIONERS", "FederatedDataModule", "TensorDataset", "register_dataset"]
