"""Paper 003, SPM-FL: Tables 2-18 (accuracy by dataset, model and client count; budget for
comparable accuracy; DLG attack loss/SSIM; local epochs vs rounds)."""

from __future__ import annotations

import re
from typing import Any

from fl_lightning.reports.paper_tables.notes_markdown import md_table_after, num

P003_METHODS = {"Sun et al. [26]": "Sun et al.", 'Sun et al. ("Sup et al. [26]")': "Sun et al."}
P003_SETTINGS = {
    "2": ("MNIST", "MLP 784-256-10", 0.3, "few", 0.6, 3, 64, 50),
    "3": ("Fashion-MNIST", "MLP 784-256-10", 0.6, "few", 0.6, 3, 64, 50),
    "4": ("CIFAR-10", "Model 1 (CNN)", 1.9, "few", 1.0, 5, 64, 50),
    "5": ("CIFAR-10", "Model 2 (ResNet18)", 3.9, "few", 1.0, 7, 32, 50),
    "6": ("MNIST", "MLP 784-256-10", 0.3, "many", 0.6, 3, 64, 50),
    "7": ("Fashion-MNIST", "MLP 784-256-10", 0.9, "many", 0.6, 10, 64, 20),
    "8": ("CIFAR-10", "Model 1 (CNN)", 2.9, "many", 0.6, 15, 64, 50),
    "9": ("CIFAR-10", "Model 2 (ResNet18)", 3.9, "many", 0.6, 10, 32, 50),
}


def p003(text: str) -> dict[str, Any]:
    tables = []
    for tid, (ds, model, eps, scen, q, e, b, t) in P003_SETTINGS.items():
        rows = md_table_after(text, f"### Table {tid}:")
        header = rows[0]
        cells = []
        for r in rows[1:]:
            method = P003_METHODS.get(r[0], r[0])
            for col, v in zip(header[1:], r[1:]):
                clients = int(col.replace("C=", ""))
                cell = {"method": method, "clients": clients, "dataset": ds, "model": model,
                        "epsilon": eps, "value": num(v)}  # fmt: skip
                if cell["value"] is None:
                    cell["remark"] = "NaN: gradient explosion, no convergence"
                cells.append(cell)
        tables.append(
            {
                "id": tid,
                "caption": f"Test accuracy (%) on {ds} {model}, {scen} clients, epsilon = {eps}.",
                "metric": "test/accuracy",
                "unit": "%",
                "higher_is_better": True,
                "dims": ["method", "clients", "dataset", "model", "epsilon"],
                "settings": {"epsilon": eps, "dp": "local (epsilon-LDP per weight)",
                             "sample_rate": q, "local_epochs": e, "batch_size": b,
                             "rounds": t, "lr": "not given"},
                "cells": cells,
            }
        )  # fmt: skip
    for tid, clients, caption in (
        ("10", 30, "Budget needed to reach comparable accuracy, low-client scenario (30 "
         "clients): accuracy (%) at the stated epsilon."),
        ("11", 300, "Multi-client scenario (300 clients): accuracy (%) at the stated epsilon."),
    ):  # fmt: skip
        rows = md_table_after(text, f"### Table {tid}:")
        header = rows[0]
        cells = []
        for r in rows[1:]:
            method = P003_METHODS.get(r[0], r[0])
            for col, v in zip(header[1:], r[1:]):
                m = re.search(r"\(ε = ([\d.]+)\)", v)
                ds, model = (col.split(" ", 1) + [""])[:2]
                cell = {"method": method, "dataset": ds, "model": model.strip("()") or "MLP",
                        "clients": clients, "value": num(v),
                        "epsilon": float(m.group(1)) if m else None}  # fmt: skip
                cells.append(cell)
        tables.append(
            {
                "id": tid,
                "caption": caption,
                "metric": "test/accuracy",
                "unit": "%",
                "higher_is_better": True,
                "dims": ["method", "dataset", "model", "clients"],
                "settings": {"clients": clients},
                "cells": cells,
            }
        )
    for tid, ds in (("12", "MNIST"), ("13", "Fashion-MNIST"), ("14", "CIFAR-10 Model 1"),
                    ("15", "CIFAR-10 Model 2")):  # fmt: skip
        rows = md_table_after(text, f"### Table {tid}:")
        cells = []
        for r in rows[1:]:
            m = re.match(r"(Loss|SSIM) Value \(ε = ([\d.]+)\)", r[0])
            assert m, r[0]
            for frac, v in zip(("1/3", "2/3", "3/3"), r[1:]):
                cells.append({"quantity": m.group(1), "epsilon": float(m.group(2)),
                              "attack_progress": frac, "value": num(v)})  # fmt: skip
        tables.append(
            {
                "id": tid,
                "caption": f"DLG attack on {ds} under SPM: gradient-matching loss and SSIM at "
                "1/3, 2/3 and 3/3 of the attack's convergence count.",
                "metric": "attack/ssim",
                "unit": "",
                "higher_is_better": False,
                "dims": ["quantity", "epsilon", "attack_progress"],
                "settings": {"attack": "DLG"},
                "cells": cells,
            }
        )
    # Tables 16-18 (merged cells in the source; transcribed from the notes' lists).
    e_vs_t = {
        "16": ("MNIST", [(30, 0.3, 50, 3, 89.25), (30, 0.3, 20, 5, 90.02),
                         (30, 0.3, 20, 7, 89.77), (30, 0.3, 20, 9, 89.41),
                         (30, 0.3, 20, 11, 89.66), (300, 0.3, 50, 3, 85.88),
                         (300, 0.3, 20, 11, 87.83), (300, 0.3, 20, 13, 88.05),
                         (300, 0.3, 20, 15, 88.47), (300, 0.3, 20, 17, 87.74)]),
        "17": ("Fashion-MNIST", [(30, 0.6, 50, 3, 83.28), (30, 0.6, 30, 2, 82.80),
                                 (30, 0.6, 30, 5, 82.95), (30, 0.6, 30, 7, 83.35),
                                 (30, 0.6, 30, 9, 83.08), (300, 0.9, 20, 10, 80.40),
                                 (300, 0.9, 15, 12, 80.94), (300, 0.9, 15, 14, 81.00),
                                 (300, 0.9, 15, 16, 81.30), (300, 0.9, 15, 18, 81.24)]),
        "18": ("CIFAR-10 Model 2", [(30, 3.9, 50, 5, 85.08), (30, 3.9, 30, 6, 84.82),
                                    (30, 3.9, 30, 7, 84.78), (30, 3.9, 30, 8, 85.16),
                                    (30, 3.9, 30, 9, 84.37), (300, 3.9, 50, 10, 79.24),
                                    (300, 3.9, 30, 12, 79.51), (300, 3.9, 30, 14, 79.34),
                                    (300, 3.9, 30, 16, 79.06), (300, 3.9, 30, 18, 79.13)]),
    }  # fmt: skip
    for tid, (ds, entries) in e_vs_t.items():
        tables.append(
            {
                "id": tid,
                "caption": f"SPM on {ds}: local epochs E vs communication rounds T at fixed "
                "epsilon (test accuracy, %).",
                "metric": "test/accuracy",
                "unit": "%",
                "higher_is_better": True,
                "dims": ["method", "clients", "epsilon", "rounds", "local_epochs"],
                "settings": {"dataset": ds},
                "cells": [
                    {"method": "SPM", "clients": c, "epsilon": eps, "rounds": t,
                     "local_epochs": e, "value": v}
                    for c, eps, t, e, v in entries
                ],
            }
        )  # fmt: skip
    return {
        "paper": "003",
        "name": "SPM-FL",
        "title": "SPM-FL: A Federated Learning Privacy-Protection Mechanism Based on Local "
        "Differential Privacy",
        "citation": "Z. Chen, H. Zheng, Electronics 13(20):4091, 2024, "
        "doi:10.3390/electronics13204091",
        "notes": "shared/papers/003-spm-fl.notes.md",
        "methods": {
            "NoDP": ["fedavg", "nodp", "FedAvg", "none"],
            "SPM": ["spm", "SPM"],
            "PNPM": ["pnpm", "PNPM"],
            "Sun et al.": ["sun", "ldp_fl", "LDPFL", "sun_ldp"],
            "PM": ["pm", "piecewise", "PiecewiseMechanism"],
        },
        "tables": tables,
    }
