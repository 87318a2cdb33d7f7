"""DLG / iDLG (Zhu et al. 2019; Zhao et al. 2020) against single-example gradients and
against a client's deployed upload."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fl_lightning.attacks.dlg import (
    example_gradient,
    infer_label,
    invert_gradient,
    privatize_gradient,
)
from fl_lightning.attacks.images import image_metrics, save_grid
from fl_lightning.data.datasets import DATASETS
from fl_lightning.models import MLP
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism


@pytest.fixture(scope="module")
def digits():
    train, _ = DATASETS["digits"].load(root="", download=False, seed=0)
    return train


def _net(seed: int) -> MLP:
    torch.manual_seed(seed)
    return MLP(input_dim=64, hidden=(32,), num_classes=10)


@pytest.mark.parametrize("index", [0, 1])
def test_dlg_reconstructs_a_nonprivate_single_example_gradient(digits, index: int) -> None:
    x, y = digits.x[index : index + 1], digits.y[index : index + 1]
    net = _net(index)
    res = invert_gradient(
        net,
        example_gradient(net, x, y),
        input_shape=(1, 8, 8),
        num_classes=10,
        method="dlg",
        iterations=60,
        seed=index,
    )
    m = image_metrics(x, res.reconstruction)
    assert m["ssim"] >= 0.6, m
    assert res.snapshot_iterations == [20, 40, 60] and len(res.snapshots) == 3
    assert int(res.label) == int(y)


def test_gaussian_noise_sigma_1_defeats_dlg(digits) -> None:
    x, y = digits.x[:1], digits.y[:1]
    net = _net(0)
    noisy = privatize_gradient(
        example_gradient(net, x, y),
        GaussianMechanism(noise_multiplier=1.0, sensitivity=1.0),
        generator=torch.Generator().manual_seed(0),
    )
    res = invert_gradient(net, noisy, input_shape=(1, 8, 8), num_classes=10, iterations=60)
    m = image_metrics(x, res.reconstruction)
    assert m["ssim"] < 0.2, m


def test_idlg_reads_the_label_and_reconstructs(digits) -> None:
    net = _net(3)
    for i in range(10):
        x, y = digits.x[i : i + 1], digits.y[i : i + 1]
        assert infer_label(example_gradient(net, x, y), 10) == int(y)
    res = invert_gradient(
        net,
        example_gradient(net, x, y),
        input_shape=(1, 8, 8),
        num_classes=10,
        method="idlg",
        iterations=30,
    )
    assert image_metrics(x, res.reconstruction)["ssim"] >= 0.6
    with pytest.raises(ValueError, match="batch size 1"):
        invert_gradient(net, [], input_shape=(1, 8, 8), num_classes=10, method="idlg", batch_size=2)


def test_image_metrics_and_grid(digits, tmp_path: Path) -> None:
    x = digits.x[:2]
    same = image_metrics(x, x.clone())
    assert same["mse"] == 0.0 and same["ssim"] == pytest.approx(1.0, abs=1e-4)
    noise = image_metrics(x, torch.randn_like(x))
    assert noise["ssim"] < 0.2 and noise["psnr"] < 10
    path = save_grid(tmp_path / "g.png", x, [x, x, x])
    from PIL import Image

    w, h = Image.open(path).size
    assert (w, h) == (4 * 32 + 5 * 2, 2 * 32 + 3 * 2)  # 4 columns of 8×8 upscaled ×4


def test_upload_gradient_is_the_deployed_upload(digits) -> None:
    """The attacker's view of a FedAvg upload is the exact gradient; DP-FedAvg's clipped
    upload (process_update) is the clipped gradient; an extra mechanism changes it."""
    from fl_lightning.attacks.dlg import upload_gradient
    from fl_lightning.attacks.pipeline import Pipeline
    from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism
    from fl_lightning.strategies.dp_fedavg import DPFedAvg

    cli = Pipeline(["--config", str(Path(__file__).parent / "configs" / "overfit.yaml")]).build(
        quiet=True
    )
    module = cli.model
    x, y = digits.x[:1], digits.y[:1]
    exact = torch.cat([g.flatten() for g in example_gradient(module.global_net, x, y)])
    seen = torch.cat([g.flatten() for g in upload_gradient(module, x, y)])
    torch.testing.assert_close(seen, exact, rtol=1e-4, atol=1e-5)

    module.strategy = DPFedAvg(clip_norm=0.01, noise_multiplier=1.0)
    lr = module.client.training_config.lr
    clipped = torch.cat([g.flatten() for g in upload_gradient(module, x, y)])
    assert float(clipped.norm()) == pytest.approx(0.01 / lr, rel=1e-4)
    torch.testing.assert_close(clipped / clipped.norm(), exact / exact.norm(), rtol=1e-3, atol=1e-5)
    noisy = torch.cat(
        [
            g.flatten()
            for g in upload_gradient(module, x, y, mechanism=LaplaceMechanism(epsilon=1.0))
        ]
    )
    assert float((noisy - clipped).abs().mean()) > 1.0  # Laplace(1/ε)/η on every coordinate
