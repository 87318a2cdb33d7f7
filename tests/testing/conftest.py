"""The contract tests' one federation, loaded once."""

from __future__ import annotations

import pytest

from fl_lightning.data.datamodule import FederatedDataModule
from tests.testing.cases import federation


@pytest.fixture(scope="session")
def data() -> FederatedDataModule:
    return federation()
