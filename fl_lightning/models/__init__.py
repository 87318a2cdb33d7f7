"""The model zoo: small, DP-compatible models (GroupNorm, never BatchNorm).

Every model is importable as ``fl_lightning.models.<Name>`` (``class_path`` in a config).
"""

from fl_lightning.models.abadi_cnn import AbadiCNN
from fl_lightning.models.char_lstm import CharLSTM
from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.models.emnist_cnn import EmnistCNN
from fl_lightning.models.lstm import MnistLSTM
from fl_lightning.models.mlp import MLP, LogisticRegression
from fl_lightning.models.resnet import ResNet50GN
from fl_lightning.models.resnet_gn import ResNet18GN
from fl_lightning.models.spm_cnn import SpmCifarCNN
from fl_lightning.models.vgg import VGG9

__all__ = [
    "MLP",
    "VGG9",
    "AbadiCNN",
    "CharLSTM",
    "CifarCNN",
    "EmnistCNN",
    "LogisticRegression",
    "MnistCNN",
    "MnistLSTM",
    "ResNet18GN",
    "ResNet50GN",
    "SpmCifarCNN",
]
