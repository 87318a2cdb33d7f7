"""Reconstruction quality (MSE, PSNR, SSIM), their aggregates, and the reconstruction grid.

Every metric is computed on the same image: the reconstruction clipped to the original's value
range (the attacker knows the valid pixel range, and that is also what the grid shows), so MSE,
PSNR and SSIM of one image never contradict each other. PSNR is capped at ``PSNR_CAP`` dB (an
exact reconstruction has MSE 0, and an infinite PSNR would make every mean infinite).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torchmetrics.functional.image import structural_similarity_index_measure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PSNR_CAP = 100.0
METRICS = ("mse", "psnr", "ssim")


def image_metrics(original: torch.Tensor, reconstruction: torch.Tensor) -> dict[str, float]:
    """MSE, PSNR (dB, peak = the original's value range, capped at ``PSNR_CAP``) and SSIM
    (Wang et al. 2004, Eq. 13) of (B, C, H, W) batches, all on the reconstruction clipped to
    the original's range; SSIM through torchmetrics with a Gaussian window no larger than the
    image (7×7 for 28×28 MNIST, 3×3 for 8×8 digits)."""
    x = original.detach().float().cpu()
    r = reconstruction.detach().float().cpu()
    if x.dim() == 3:
        x, r = x[None], r[None]
    lo, hi = float(x.min()), float(x.max())
    data_range = max(hi - lo, 1e-8)
    r = torch.nan_to_num(r, nan=lo, posinf=hi, neginf=lo).clamp(lo, hi)
    mse = float(((x - r) ** 2).mean())
    psnr = min(PSNR_CAP, 10.0 * math.log10(data_range**2 / mse)) if mse > 0 else PSNR_CAP
    side = min(x.shape[-1], x.shape[-2])
    kernel = max(3, min(11, side // 4 * 2 - 1))
    ssim = structural_similarity_index_measure(
        r, x, data_range=(lo, hi), kernel_size=kernel, sigma=kernel / 7.0 * 1.5
    )
    assert isinstance(ssim, torch.Tensor)  # one value: no per-image or full-map output asked
    return {"mse": mse, "psnr": psnr, "ssim": float(ssim)}


def summarize(per_batch: Sequence[dict[str, float]], *, ssim_threshold: float) -> dict[str, float]:
    """Median and mean of every metric over the attacked batches, and the fraction of batches
    recovered (SSIM ≥ ``ssim_threshold``). The median is the headline: one failed batch
    cannot make it contradict the others, and the mean beside it shows the spread."""
    if not per_batch:
        raise ValueError("audit: no reconstructed batch to summarise")
    out: dict[str, float] = {}
    for k in METRICS:
        values = [float(m[k]) for m in per_batch]
        out[f"{k}_median"] = float(statistics.median(values))
        out[f"{k}_mean"] = float(statistics.fmean(values))
        out[f"{k}_min"] = float(min(values))
        out[f"{k}_max"] = float(max(values))
    recovered = [float(m["ssim"]) >= ssim_threshold for m in per_batch]
    out["recovered_fraction"] = sum(recovered) / len(recovered)
    out["ssim_threshold"] = float(ssim_threshold)
    return out


def save_grid(
    path: Path,
    original: torch.Tensor,
    snapshots: list[torch.Tensor],
    *,
    snapshot_iterations: Sequence[int] | None = None,
    title: str | None = None,
    tile_inches: float = 1.2,
) -> Path:
    """A labelled PNG: one column per example; the first row the originals, then one row per
    snapshot ("reconstruction @ iteration k"), each reconstructed tile titled with its SSIM
    against the original. Tiles are drawn ``tile_inches`` wide at 100 dpi (an 8×8 digit
    becomes 120×120 pixels), nearest-neighbour, clipped to the originals' value range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = original.detach().float().cpu()
    lo, hi = float(x.min()), float(x.max())
    snaps = [s.detach().float().cpu() for s in snapshots]
    iters = list(snapshot_iterations or [])
    labels = ["original"] + [
        f"reconstruction\n@ iteration {iters[i]}" if i < len(iters) else f"snapshot {i + 1}"
        for i in range(len(snaps))
    ]
    n = x.shape[0]
    rows = 1 + len(snaps)
    fig, axes = plt.subplots(
        rows,
        n,
        figsize=(tile_inches * n + 1.4, tile_inches * rows + (0.5 if title else 0.1)),
        squeeze=False,
        dpi=100,
    )
    cmap = "gray" if x.shape[1] == 1 else None

    def show(ax: Axes, img: torch.Tensor) -> None:
        img = torch.nan_to_num(img, nan=lo, posinf=hi, neginf=lo).clamp(lo, hi)
        img = (img - lo) / max(hi - lo, 1e-8)
        arr = img[0].numpy() if img.shape[0] == 1 else img.permute(1, 2, 0).numpy()
        ax.imshow(arr, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])

    for j in range(n):
        show(axes[0][j], x[j])
        axes[0][j].set_title(f"example {j}", fontsize=8)
        for i, s in enumerate(snaps):
            show(axes[i + 1][j], s[j])
            ssim = image_metrics(x[j : j + 1], s[j : j + 1])["ssim"]
            axes[i + 1][j].set_title(f"SSIM {ssim:.2f}", fontsize=8)
    for i, label in enumerate(labels):
        axes[i][0].set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
