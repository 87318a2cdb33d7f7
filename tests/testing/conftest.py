"""The contract tests' one federation, loaded once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fl_lightning.data.datamodule import FederatedDataModule


@pytest.fixture(scope="session")
def data() -> FederatedDataModule:
    # Imported here: pytest-xdist's controller loads this conftest (a ``test*`` folder of the
    # test path) without running a test; importing Lightning there delayed every worker's start.
    from tests.testing.cases import federation

    return federation()
