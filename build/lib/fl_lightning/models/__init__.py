"""The model zoo: small, DP-compatible models (GroupNorm, never BatchNorm)."""

from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.models.mlp import MLP, LogisticRegression

__all__ = ["MLP", "CifarCNN", "LogisticRegression", "MnistCNN"]
