"""DLG / iDLG (Zhu et al. 2019; Zhao et al. 2020) against single-example gradients and
against a client's deployed upload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fl_lightning.attacks.dlg import (
    example_gradient,
    infer_label,
    invert_gradient,
    privatize_gradient,
)
from fl_lightning.attacks.images import PSNR_CAP, image_metrics, save_grid, summarize
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
    assert same["psnr"] == PSNR_CAP  # exact: capped, not infinite
    noise = image_metrics(x, torch.randn_like(x))
    assert noise["ssim"] < 0.2 and noise["psnr"] < 10
    path = save_grid(tmp_path / "g.png", x, [x, x, x], snapshot_iterations=[1, 2, 3])
    from PIL import Image

    w, h = Image.open(path).size
    # 2 example columns, 4 rows (original + 3 snapshots), each tile ~120 px: readable
    assert w >= 2 * 100 and h >= 4 * 100, (w, h)


def test_grid_rows_are_labelled_with_iterations_and_ssim(digits, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = digits.x[:3]
    saved: list = []
    real_close = plt.close
    plt.close = lambda fig=None: saved.append(fig)  # keep the figure to read its labels
    try:
        save_grid(tmp_path / "g.png", x, [torch.zeros_like(x), x], snapshot_iterations=[5, 10])
    finally:
        plt.close = real_close
    fig = saved[0]
    axes = fig.axes
    assert len(axes) == 3 * 3
    labels = [ax.get_ylabel() for ax in axes if ax.get_ylabel()]
    assert labels == ["original", "reconstruction\n@ iteration 5", "reconstruction\n@ iteration 10"]
    titles = [ax.get_title() for ax in axes]
    assert titles[:3] == ["example 0", "example 1", "example 2"]
    assert all(t == "SSIM 1.00" for t in titles[6:])  # the exact row
    assert all(t.startswith("SSIM ") and t != "SSIM 1.00" for t in titles[3:6])
    real_close(fig)


def test_metrics_of_a_diverged_reconstruction_agree() -> None:
    """A reconstruction with a few huge pixels (the "MSE 5e34" case) is scored on the clipped
    image for every metric: MSE stays within the value range, PSNR and SSIM agree with it."""
    x = torch.linspace(-1, 1, 64).reshape(1, 1, 8, 8)
    r = x.clone()
    r[0, 0, 0, :2] = torch.tensor([1e30, float("nan")])
    m = image_metrics(x, r)
    assert m["mse"] <= 4.0 * 2 / 64 + 1e-6  # two pixels, each off by at most the range
    assert m["psnr"] > 10 and m["ssim"] > 0.8, m


def test_summary_median_mean_and_recovered_fraction() -> None:
    perfect = {"mse": 0.0, "psnr": PSNR_CAP, "ssim": 1.0}
    failed = {"mse": 1.5, "psnr": 4.3, "ssim": 0.05}
    ok = {"mse": 0.1, "psnr": 16.0, "ssim": 0.82}
    s = summarize([perfect, perfect, failed, ok], ssim_threshold=0.8)
    assert s["recovered_fraction"] == 0.75 and s["ssim_threshold"] == 0.8
    assert s["ssim_median"] == pytest.approx(0.91) and s["ssim_mean"] == pytest.approx(0.7175)
    assert s["mse_median"] == pytest.approx(0.05) and s["mse_mean"] == pytest.approx(0.4)
    # the medians describe the same typical batch: high SSIM with low MSE and high PSNR
    assert s["psnr_median"] == pytest.approx((16.0 + PSNR_CAP) / 2)
    with pytest.raises(ValueError, match="no reconstructed batch"):
        summarize([], ssim_threshold=0.8)


def test_idlg_label_from_the_bias_when_inputs_are_negative(digits) -> None:
    """Digits are scaled to [-1, 1] (mostly -1): the weight-row rule of iDLG picks the wrong
    class for logistic regression; the last bias gradient p - e_y gives the label exactly."""
    from fl_lightning.models import LogisticRegression

    torch.manual_seed(0)
    net = LogisticRegression(input_dim=64, num_classes=10)
    for i in range(20):
        x, y = digits.x[i : i + 1], digits.y[i : i + 1]
        assert infer_label(example_gradient(net, x, y), 10) == int(y)


def test_dlg_on_a_saturated_logistic_regression_stays_finite(digits) -> None:
    """Large weights saturate the softmax; L-BFGS without a line search then overflows. The
    attack keeps the lowest-loss iterate and never returns non-finite or exploded pixels."""
    from fl_lightning.models import LogisticRegression

    torch.manual_seed(1)
    net = LogisticRegression(input_dim=64, num_classes=10)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(40.0)
    x, y = digits.x[3:4], digits.y[3:4]
    target = example_gradient(net, x, y)
    res = invert_gradient(net, target, input_shape=(1, 8, 8), num_classes=10, iterations=60)
    assert torch.isfinite(res.reconstruction).all()
    assert math.isfinite(res.final_loss)
    start = invert_gradient(net, target, input_shape=(1, 8, 8), num_classes=10, iterations=3)
    assert res.final_loss <= start.final_loss
    assert float(res.reconstruction.abs().max()) < 1e3


def test_restarts_keep_the_lowest_matching_loss(digits) -> None:
    net = _net(5)
    x, y = digits.x[5:6], digits.y[5:6]
    g = example_gradient(net, x, y)
    one = invert_gradient(net, g, input_shape=(1, 8, 8), num_classes=10, iterations=9, seed=0)
    three = invert_gradient(
        net, g, input_shape=(1, 8, 8), num_classes=10, iterations=9, seed=0, restarts=3
    )
    assert three.final_loss <= one.final_loss
    with pytest.raises(ValueError, match="dlg_restarts"):
        invert_gradient(net, g, input_shape=(1, 8, 8), num_classes=10, restarts=0)


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
