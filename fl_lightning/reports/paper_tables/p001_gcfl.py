"""Paper 001, GCFL: Tables II-V (accuracy, recall and F1 by dataset and by budget, non-IID
baselines, speed) with their captions and settings."""

from __future__ import annotations

from typing import Any

from fl_lightning.reports.paper_tables.notes_markdown import md_table_after, num


def _three_metric_table(
    rows: list[list[str]], groups: list[tuple[str, Any]], key: str
) -> list[dict[str, Any]]:
    cells = []
    for r in rows[1:]:
        method = r[0]
        for g, (label, gval) in enumerate(groups):
            for k, metric in enumerate(("ACC", "REC", "F1")):
                cells.append({"method": method, key: gval, "metric": metric,
                              "value": num(r[1 + 3 * g + k])})  # fmt: skip
            del label
    return cells


def p001(text: str) -> dict[str, Any]:
    tables = []
    rows = md_table_after(text, "### Table II:")
    cells = _three_metric_table(
        rows, [("COVID-19", "COVID-19"), ("MNIST", "MNIST"), ("CIFAR-10", "CIFAR-10")], "dataset"
    )
    for c in cells:
        c["epsilon"] = 2.0
    tables.append(
        {
            "id": "II",
            "caption": "Accuracy, recall and F1 (%) on three image datasets (epsilon = 2, "
            "epoch = 60). Isolate = local-model training.",
            "metric": "test/accuracy",
            "metric_columns": {"ACC": "test/accuracy", "REC": "test/recall_macro",
                               "F1": "test/f1_macro"},
            "unit": "%",
            "higher_is_better": True,
            "dims": ["method", "dataset", "metric", "epsilon"],
            "settings": {"epsilon": 2, "delta": 1e-5, "clients": 2, "noise_multiplier": 0.8,
                         "clip": 1.5, "dp": "record-level DP-SGD",
                         "lr": [0.001, 0.002, 0.005], "batch_size": [32, 48],
                         "epochs": [30, 35, 80], "runs": 3},
            "cells": cells,
        }
    )  # fmt: skip
    rows = md_table_after(text, "### Table III:")
    cells = _three_metric_table(rows, [("2", 2.0), ("3", 3.0), ("4", 4.0)], "epsilon")
    for c in cells:
        c["dataset"] = "MNIST"
    tables.append(
        {
            "id": "III",
            "caption": "MNIST under different privacy budgets (epsilon in {2, 3, 4}): accuracy, "
            "recall, F1 (%).",
            "metric": "test/accuracy",
            "metric_columns": {"ACC": "test/accuracy", "REC": "test/recall_macro",
                               "F1": "test/f1_macro"},
            "unit": "%",
            "higher_is_better": True,
            "dims": ["method", "epsilon", "metric", "dataset"],
            "settings": {"epsilon": [2, 3, 4], "delta": 1e-5, "clients": 2,
                         "noise_multiplier": 0.8, "clip": 1.5, "dp": "record-level DP-SGD",
                         "partition": "iid (not described)", "runs": 3},
            "remarks": ["DP-FedExP eps=2 ACC is 89.07 here, 89.37 in Table II."],
            "cells": cells,
        }
    )  # fmt: skip
    rows = md_table_after(text, "### Table IV:")
    cells = [
        {"method": r[0], "metric": m, "dataset": "MNIST", "value": num(v)}
        for r in rows[1:]
        for m, v in zip(("ACC", "REC", "F1"), r[1:])
    ]
    tables.append(
        {
            "id": "IV",
            "caption": "Baselines on non-IID data (MNIST, 2-client label split 0-4 / 5-9; "
            "epsilon not stated).",
            "metric": "test/accuracy",
            "metric_columns": {"ACC": "test/accuracy", "REC": "test/recall_macro",
                               "F1": "test/f1_macro"},
            "unit": "%",
            "higher_is_better": True,
            "dims": ["method", "metric", "dataset"],
            "settings": {"clients": 2, "partition": "label_groups [[0..4], [5..9]]",
                         "epsilon": "not stated"},
            "cells": cells,
        }
    )  # fmt: skip
    rows = md_table_after(text, "### Table V:")
    header = rows[0]
    cells = []
    for r in rows[1:]:
        for col, v in zip(header[1:], r[1:]):
            ds, phase = col.rsplit(" ", 1)
            cells.append({"method": r[0], "dataset": ds, "phase": phase.lower(),
                          "value": num(v)})  # fmt: skip
    tables.append(
        {
            "id": "V",
            "caption": "Speed in samples per second (batch 48, lr 0.005; RTX 4070 Super).",
            "metric": "speed/samples_per_s",
            "unit": "samples/s",
            "higher_is_better": True,
            "dims": ["method", "dataset", "phase"],
            "settings": {"batch_size": 48, "lr": 0.005},
            "cells": cells,
        }
    )
    return {
        "paper": "001",
        "name": "GCFL",
        "title": "GCFL: A Gradient Correction-based Federated Learning Framework for "
        "Privacy-preserving CPSS",
        "citation": "J. Wan, X. Zhu, F. Liu, W. Fan, X. Xu",
        "notes": "shared/papers/001-gcfl.notes.md",
        "methods": {
            "Isolate": ["isolate", "Isolated"],
            "DP-FedAvg": ["dp_fedavg", "DPFedAvg", "fedavg"],
            "DP-FedProx": ["dp_fedprox", "DPFedProx", "fedprox"],
            "DP-Scaffold": ["dp_scaffold", "scaffold", "SCAFFOLD", "DPScaffold"],
            "DP-FedExP": ["dp_fedexp", "fedexp", "FedExP", "DPFedExP"],
            "GCFL": ["gcfl", "GCFL"],
        },
        "tables": tables,
    }
