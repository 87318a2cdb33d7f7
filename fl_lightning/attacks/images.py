"""Reconstruction quality (MSE, PSNR, SSIM) and the original-vs-reconstruction PNG grid."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torchmetrics.functional.image import structural_similarity_index_measure


def image_metrics(original: torch.Tensor, reconstruction: torch.Tensor) -> dict[str, float]:
    """MSE, PSNR (dB, peak = the original's value range) and SSIM (Wang et al. 2004) of
    (B, C, H, W) batches; SSIM through torchmetrics with a Gaussian window no larger than the
    image (7×7 for 28×28 MNIST, 3×3 for 8×8 digits)."""
    x = original.detach().float().cpu()
    r = reconstruction.detach().float().cpu()
    if x.dim() == 3:
        x, r = x[None], r[None]
    lo, hi = float(x.min()), float(x.max())
    data_range = max(hi - lo, 1e-8)
    mse = float(((x - r) ** 2).mean())
    psnr = 10.0 * math.log10(data_range**2 / mse) if mse > 0 else math.inf
    side = min(x.shape[-1], x.shape[-2])
    kernel = max(3, min(11, side // 4 * 2 - 1))
    ssim = structural_similarity_index_measure(
        r.clamp(lo, hi), x, data_range=(lo, hi), kernel_size=kernel, sigma=kernel / 7.0 * 1.5
    )
    assert isinstance(ssim, torch.Tensor)  # one value: no per-image or full-map output asked
    return {"mse": mse, "psnr": psnr, "ssim": float(ssim)}


def save_grid(path: Path, original: torch.Tensor, snapshots: list[torch.Tensor]) -> Path:
    """One row per example: the original, then each snapshot (1/3, 2/3, 3/3 of the attack)."""
    from torchvision.utils import save_image

    x = original.detach().float().cpu()
    lo, hi = float(x.min()), float(x.max())
    cols = [x, *[s.detach().float().cpu().clamp(lo, hi) for s in snapshots]]
    tiles = torch.stack(cols, dim=1).flatten(0, 1)
    tiles = (tiles - lo) / max(hi - lo, 1e-8)
    if tiles.shape[-1] < 32:  # tiny images (8×8 digits): upscale so the PNG is readable
        tiles = torch.nn.functional.interpolate(tiles, scale_factor=4, mode="nearest")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image(tiles, path, nrow=len(cols), padding=2, pad_value=1.0)
    return path
