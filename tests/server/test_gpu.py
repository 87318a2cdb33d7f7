"""GPU readiness (issue 22): what only a CUDA device can check; skipped without one.

CI has no GPU, so these run where one is lent (``pytest -m gpu``; docs/performance.md says
where they last ran and what they found). A GPU run's ε against the CPU run's:
tests/configs/test_gpu_runs.py. On such a machine the rest of the suite runs on the
GPU as well, since the trainer's ``accelerator`` defaults to ``auto``: the config tests
(tests/configs/test_experiments.py) then train every experiment config there.
"""

from __future__ import annotations

import pytest
import torch

from tests.server.test_vectorized_executor import CASES, _same_updates_as_sequential

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(autouse=True)
def _full_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TF32: the two paths use different kernels (grouped vs per-client convolutions), and
    TF32's 10-bit mantissa would make their float32 results differ by ~1e-3 for that reason
    alone. With it off they must agree as on the CPU."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


@pytest.mark.parametrize(
    "case",
    [
        "fedavg_user_cnn_fused_sgd",
        "fedavg_cnn_momentum_wd",
        "fedavg_residual",
        "dp_fedavg_cnn",
        "dp_sgd_clients",
        "fedavg_mnist_lstm_momentum_wd",
        "dp_sgd_mnist_dplstm",
        "dp_sgd_dprnn",
        "fedavg_user_gru_momentum",
        "dp_sgd_opacus_momentum",
    ],
)
def test_stacked_cohort_equals_sequential_on_cuda(case: str) -> None:
    """The vectorised executor gives the sequential executor's updates on the GPU too: the same
    batches, clip and per-client DP-SGD noise, now drawn from CUDA generators on the device."""
    assert case in CASES
    _same_updates_as_sequential(case, device="cuda")


def test_bf16_mixed_clients_train_on_cuda() -> None:
    """``client.precision: bf16-mixed`` on the GPU: float32 weights and delta, a loss that falls,
    a delta within bfloat16 rounding of the float32 one (TF32 off), and the forward's matmuls
    really in bfloat16."""
    from tests.client.test_precision import forward_runs_in_bf16, trains_close_to_float32

    trains_close_to_float32("cuda")
    forward_runs_in_bf16("cuda")
