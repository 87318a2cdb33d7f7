"""Client side: the ClientModule (a LightningModule) and the local training loop that runs it."""

from fl_lightning.client.config import DPSGDConfig, LocalTrainingConfig
from fl_lightning.client.module import ClientModule

__all__ = ["ClientModule", "DPSGDConfig", "LocalTrainingConfig"]
