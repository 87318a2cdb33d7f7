"""DLG / iDLG SSIM on the digits MLP (where DLG converges) for each deployed privatisation.

Builds the ``tests/attacks/configs/overfit.yaml`` experiment (untrained global model), attacks
one client's one-step upload of a single example as deployed (FedAvg; DP-FedAvg's clipping;
DP-FedAvg + Gaussian σ = 1 on the upload; Laplace ε = 1 on the upload) and prints the mean SSIM
over 4 examples.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and printed, never typed in. ``--out DIR`` appends the run to
``DIR/audit_dlg_digits.json`` and a section to ``DIR/audit_dlg_digits.md``; nothing recorded
is rewritten.

    PYTHONPATH=. python benchmarks/audit_dlg_digits.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from _record import out_dir, record_run

from fl_lightning.attacks.dlg import invert_gradient, upload_gradient
from fl_lightning.attacks.images import image_metrics
from fl_lightning.attacks.pipeline import Pipeline
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.fedavg import FedAvg

CASES = {
    "FedAvg (upload as sent)": (FedAvg(), None),
    "DP-FedAvg, clipped upload (C=1; central noise is added by the server)": (
        DPFedAvg(clip_norm=1.0, noise_multiplier=1.0),
        None,
    ),
    "DP-FedAvg clip + Gaussian σ=1 on the upload (local DP)": (
        DPFedAvg(clip_norm=1.0, noise_multiplier=1.0),
        GaussianMechanism(noise_multiplier=1.0, sensitivity=1.0),
    ),
    "DP-FedAvg clip + Laplace ε=1 on the upload (local DP)": (
        DPFedAvg(clip_norm=1.0, noise_multiplier=1.0),
        LaplaceMechanism(epsilon=1.0, sensitivity=1.0),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "audit_dlg_digits")
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    cli = Pipeline(["--config", "tests/attacks/configs/overfit.yaml"]).build(quiet=True)
    module, dm = cli.model, cli.datamodule
    dm.setup("fit")
    x_all, y_all = dm.client_data(0)
    lines = ["| upload attacked | DLG SSIM | iDLG SSIM | iDLG label acc. |", "|---|---|---|---|"]
    print("\n".join(lines))
    means = {}
    for name, (strategy, mechanism) in CASES.items():
        module.strategy = strategy
        row = {"dlg": [], "idlg": [], "label": []}
        for i in range(4):
            x, y = x_all[i : i + 1], y_all[i : i + 1]
            g = upload_gradient(module, x, y, mechanism=mechanism, seed=i)
            for method in ("dlg", "idlg"):
                r = invert_gradient(
                    module.global_net,
                    g,
                    input_shape=(1, 8, 8),
                    num_classes=10,
                    method=method,
                    iterations=60,
                    seed=i,
                )
                row[method].append(image_metrics(x, r.reconstruction)["ssim"])
                if method == "idlg":
                    row["label"].append(float(r.label == y))
        mean = means[name] = {k: sum(v) / len(v) for k, v in row.items()}
        lines.append(f"| {name} | {mean['dlg']:.3f} | {mean['idlg']:.3f} | {mean['label']:.2f} |")
        print(lines[-1], flush=True)
    command = "python benchmarks/audit_dlg_digits.py " + " ".join(sys.argv[1:])
    print()
    record_run(
        out,
        "audit_dlg_digits",
        title="4 examples, 60 iterations, 1 torch thread",
        intro="# DLG / iDLG SSIM on the digits MLP per deployed privatisation\n\n"
        "`benchmarks/audit_dlg_digits.py`; each run appended as measured.\n",
        lines=[f"- command: `{command}`", "", *lines],
        load_before=load_before,
        command=command,
        threads=1,
        mean_ssim=means,
    )


if __name__ == "__main__":
    main()
