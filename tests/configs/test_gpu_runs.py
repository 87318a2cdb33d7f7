"""A run on the GPU reports the CPU run's ε (issue 22, GPU readiness); skipped without CUDA.

Beside tests/server/test_gpu.py; here for the config tests' ``run_experiment`` (the same
offline, shrunk run as every config test).
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import REPO

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize(
    "config",
    [
        "quickstart.yaml",  # DP-FedAvg: clip, Gaussian noise on the aggregate, Poisson cohorts
        "gcfl/table2_mnist.yaml",  # clients run DP-SGD (record level), GCFL projects
        "adp_fl/table2_mnist_adp_fl.yaml",  # local DP on every upload, budgeted per client
    ],
)
def test_a_gpu_run_accounts_as_the_cpu_run(config: str, run_experiment) -> None:
    """A run on the GPU trains (the mechanisms draw their noise there, from generators on the
    device) and reports the ε of the same config on the CPU: the events depend on the
    configuration, never on the device."""
    path = REPO / "configs" / "experiment" / config
    on = ("--trainer.devices", "1", "--trainer.accelerator")
    gpu = run_experiment(path, *on, "gpu").summary
    cpu = run_experiment(path, *on, "cpu").summary
    assert gpu["rounds"] == cpu["rounds"]
    assert gpu["privacy/epsilon"] == pytest.approx(cpu["privacy/epsilon"], rel=1e-9)
    assert gpu["privacy/guarantee"] == cpu["privacy/guarantee"]
    assert 0.0 <= gpu["test/accuracy"] <= 1.0
