"""Redraws Figure 2 of SPM-FL (Chen & Zheng 2024): variance vs weight at ε = 0.6 and 1.5.

Curves (closed forms of the mechanism classes): SPM as the paper claims (Eq. A18, under its
unnormalised density), SPM as Algorithm 2 really behaves (published and debiased), PNPM
(reconstruction), Duchi, PM, HM and Laplace. Weights on [0, 1] (the paper's axis is not stated;
its "maximum ≈ 1" at ε = 1.5 matches |w| ≤ 1).

Usage: ``python -m fl_lightning.privacy.mechanisms.plots --out docs/figures/spm_fig2.png``
"""

from __future__ import annotations

import argparse

import torch

from fl_lightning.privacy.mechanisms.registry import make_local_mechanism
from fl_lightning.privacy.mechanisms.spm import paper_claimed_variance

CURVES = [
    ("SPM (paper's Eq. A18)", None, None),
    ("SPM Alg. 2 (published, biased)", "spm", "published"),
    ("SPM debiased", "spm", "debiased"),
    ("PNPM (reconstructed)", "pnpm", "published"),
    ("Duchi et al.", "duchi", "published"),
    ("PM", "pm", "published"),
    ("HM", "hm", "published"),
    ("Laplace", "laplace", "published"),
]


def variance_curves(epsilon: float, w: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {}
    for label, name, variant in CURVES:
        if name is None:
            out[label] = paper_claimed_variance(w, epsilon=epsilon)
        else:
            mechanism = make_local_mechanism(name, epsilon=epsilon, variant=variant or "published")
            out[label] = mechanism.variance(w)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/figures/spm_fig2.png")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = torch.linspace(0.0, 1.0, 201, dtype=torch.float64)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, eps in zip(axes, (1.5, 0.6), strict=True):
        for label, var in variance_curves(eps, w).items():
            style = "--" if "paper" in label else "-"
            ax.plot(w.numpy(), var.numpy(), style, label=label)
        ax.set_title(f"ε = {eps}")
        ax.set_xlabel("model weight w")
        ax.set_ylabel("variance of the perturbed weight")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("SPM-FL Figure 2 redrawn: variance vs weight (closed forms)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
