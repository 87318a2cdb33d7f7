"""The pre-flight forward pass (``fl_lightning/first_contact.py``) leaves the run untouched: no
random draw consumed, the network's weights and mode as they were, whether it passes or not."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from fl_lightning.data.datasets import TensorDataset
from fl_lightning.first_contact import model_data_problem
from fl_lightning.models import CharLSTM, LogisticRegression, MnistCNN, MnistLSTM


def _data(shape: tuple[int, ...], classes: int = 10) -> TensorDataset:
    return TensorDataset(torch.randn(3, *shape), torch.zeros(3, dtype=torch.int64), classes)


class Noisy(nn.Module):
    """Draws from every generator in its forward pass (dropout, NumPy, Python)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        np.random.rand()  # noqa: NPY002 - the legacy global state, on purpose
        random.random()
        torch.rand(1)
        return self.drop(self.fc(x.flatten(1)))


def _states() -> tuple:
    legacy = np.random.get_state()[1].copy()  # noqa: NPY002 - the global state, on purpose
    return torch.get_rng_state(), legacy, random.getstate()


@pytest.mark.parametrize(
    ("net", "shape"),
    [(Noisy(), (1, 8, 8)), (MnistCNN(), (1, 8, 8)), (MnistCNN(), (1, 28, 28))],
)
def test_no_random_draw_and_the_network_untouched(net, shape) -> None:
    data = _data(shape)
    net.train()
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    before = _states()
    model_data_problem(net, {"training": data, "test": data}, dataset="data.dataset d",
                       num_classes=10, client_num_classes=10)  # fmt: skip
    after = _states()
    assert torch.equal(before[0], after[0])
    assert np.array_equal(before[1], after[1])
    assert before[2] == after[2]
    assert net.training
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in weights.items())


def test_lazy_modules_stay_unmaterialised() -> None:
    from torch.nn.modules.lazy import LazyModuleMixin

    net = nn.Sequential(nn.Flatten(), nn.LazyLinear(10))
    data = _data((1, 8, 8))
    assert model_data_problem(net, {"training": data}, dataset="data.dataset d",
                              num_classes=10, client_num_classes=10) is None  # fmt: skip
    assert isinstance(net[1], LazyModuleMixin) and net[1].has_uninitialized_params()


def test_what_fits_is_named() -> None:
    def problem(net: nn.Module, shape: tuple[int, ...], classes: int = 10) -> str | None:
        data = _data(shape, classes)
        return model_data_problem(net, {"training": data}, dataset="data.dataset d",
                                  num_classes=classes, client_num_classes=classes)  # fmt: skip

    assert problem(MnistCNN(), (1, 28, 28)) is None
    assert problem(LogisticRegression(64), (1, 8, 8)) is None
    line = problem(MnistLSTM(), (1, 8, 8))
    assert line is not None and line.startswith(
        "client.net: MnistLSTM expects 1×28×28 inputs, data.dataset d gives 1×8×8; use a "
        "network for 8×8 inputs (client: configs/client/digits_logreg.yaml)"
    ), line
    # An embedding takes token ids of any length: no shape is claimed, the error is quoted.
    line = problem(CharLSTM(), (1, 8, 8))
    assert line is not None and line.startswith(
        "client.net: CharLSTM cannot take the inputs data.dataset d gives, 1×8×8 ("
    ), line
    line = problem(LogisticRegression(784, num_classes=10), (1, 28, 28), classes=47)
    assert line is not None and line.startswith(
        "client.net: LogisticRegression gives 10 outputs (classes), data.dataset d has 47 classes"
    ), line


def test_a_problem_in_the_evaluation_split_names_it() -> None:
    train, test = _data((1, 8, 8)), _data((1, 28, 28))
    line = model_data_problem(LogisticRegression(64), {"training": train, "test": test},
                              dataset="data.dataset d", num_classes=10,
                              client_num_classes=10)  # fmt: skip
    assert line is not None, "a 28×28 test split under a 64-feature network"
    assert "data.dataset d gives 1×28×28 (784 features) in its test split" in line, line
