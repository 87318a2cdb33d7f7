"""``utils/heap.py``: the DP engines keep freed heap memory for reuse on glibc, once per process,
and leave the malloc policy alone when the user chose one or opted out."""

from __future__ import annotations

import platform
import resource

import pytest
import torch
import torch.nn.functional as F

from fl_lightning.client.dp_sgd import build_engine
from fl_lightning.models.cnn import MnistCNN
from fl_lightning.utils import heap

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize(
    "env",
    [
        {"FL_LIGHTNING_HEAP": "default"},
        {"MALLOC_TOP_PAD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"},
        {"LD_PRELOAD": "libjemalloc.so.2"},
    ],
)
def test_a_users_malloc_policy_or_opt_out_is_left_alone(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*heap.USER_SETTINGS, heap.OPT_OUT, "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert heap._apply() is False


def test_applied_once_per_process_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*heap.USER_SETTINGS, heap.OPT_OUT, "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(heap, "_applied", None)
    assert heap.retain_freed_heap() is GLIBC
    monkeypatch.setattr(heap, "_apply", lambda: pytest.fail("applied twice"))
    assert heap.retain_freed_heap() is GLIBC


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc policy")
def test_a_bk_step_does_not_page_fault_once_warm() -> None:
    """The point of the setting (issue 37): with freed heap kept, a warm ``bk`` step reuses
    its memory instead of touching fresh pages (thousands of minor faults a step before)."""
    if not heap.retain_freed_heap():
        pytest.skip("the environment sets the malloc policy (MALLOC_*, LD_PRELOAD, opt-out)")
    torch.manual_seed(0)
    net = MnistCNN()
    eng = build_engine(net, "bk")
    eng.configure_client(
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        expected_batch_size=32.0,
        generator=torch.Generator().manual_seed(1),
    )
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    for _ in range(3):
        eng.compute_gradients(x, y, F.cross_entropy)
    faults = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        eng.compute_gradients(x, y, F.cross_entropy)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    # A step touches ≈ 20 MB of buffers (≈ 5,000 pages); reused memory faults (almost) never.
    assert min(faults) < 100, faults
