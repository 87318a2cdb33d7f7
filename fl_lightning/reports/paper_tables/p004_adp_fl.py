"""Paper 004, ADP-FL: Tables 2-5 (accuracy by budget, Gaussian and Laplace mechanisms, client
time)."""

from __future__ import annotations

import re
from typing import Any

from fl_lightning.reports.paper_tables.notes_markdown import md_table_after, num


def p004(text: str) -> dict[str, Any]:
    tables = []
    rows = md_table_after(text, "### Table 2:")
    header = rows[0]
    cells = []
    for r in rows[1:]:
        if r[0] == "Non":
            method, eps = "FedAvg (no DP)", None
        else:
            m = re.match(r"(Baseline|ADP-FL) ε = (\d+)", r[0])
            assert m, r[0]
            method, eps = m.group(1), float(m.group(2))
        for ds, v in zip(header[1:], r[1:]):
            cell = {"method": method, "epsilon": eps, "dataset": ds, "value": num(v)}
            if cell["value"] is None:
                cell["remark"] = "Nan: failed to converge"
            cells.append(cell)
    tables.append(
        {
            "id": "2",
            "caption": "Accuracy (%) of the baseline and ADP-FL under different privacy budgets "
            "(non-IID, 2 labels per client; 'FedAvg (no DP)' is the non-private run).",
            "metric": "test/accuracy",
            "unit": "%",
            "higher_is_better": True,
            "dims": ["method", "epsilon", "dataset"],
            "settings": {"epsilon": [1, 5, 10], "delta": 1e-5, "clients": 50,
                         "partition": "2 labels per client, 10% of the data each",
                         "lr": 0.01, "batch_size": 16, "local_epochs": 3, "optimizer": "sgd",
                         "models": {"MNIST": "RNN (LSTM 64)", "CIFAR10": "VGG9",
                                    "EMNIST": "CNN"}},
            "cells": cells,
        }
    )  # fmt: skip
    for tid, mech in (("3", "Gaussian"), ("4", "Laplace")):
        rows = md_table_after(text, f"### Table {tid}:")
        header = rows[0]
        cells = []
        for r in rows[1:]:
            for col, v in zip(header[2:], r[2:]):
                eps = float(col.replace("ε=", ""))
                cells.append({"dataset": r[0], "method": r[1], "mechanism": mech.lower(),
                              "epsilon": eps, "value": num(v)})  # fmt: skip
        tables.append(
            {
                "id": tid,
                "caption": f"Accuracy (%) of ADP-FL vs the baseline with the {mech} mechanism "
                "under different privacy budgets.",
                "metric": "test/accuracy",
                "unit": "%",
                "higher_is_better": True,
                "dims": ["dataset", "method", "mechanism", "epsilon"],
                "settings": {"epsilon": [10, 20, 30, 40, 50], "mechanism": mech.lower(),
                             "delta": 1e-5 if mech == "Gaussian" else 0},
                "cells": cells,
            }
        )  # fmt: skip
    rows = md_table_after(text, "### Table 5:")
    header = rows[0]
    cells = [
        {"method": r[0], "dataset": ds, "value": num(v)}
        for r in rows[1:]
        for ds, v in zip(header[1:], r[1:])
    ]
    tables.append(
        {
            "id": "5",
            "caption": "Average client-side time (minutes) of the baseline and ADP-FL.",
            "metric": "time/minutes",
            "unit": "min",
            "higher_is_better": False,
            "dims": ["method", "dataset"],
            "settings": {"epsilon": "not stated", "mechanism": "not stated"},
            "cells": cells,
        }
    )
    return {
        "paper": "004",
        "name": "ADP-FL",
        "title": "An Asynchronous Federated Learning Aggregation Method Based on Adaptive "
        "Differential Privacy",
        "citation": "J. Wu, G. Xia, H. Huang, C. Yu, Y. Zhang, H. Li, Preprints.org 2025, "
        "doi:10.20944/preprints202506.2188.v1",
        "notes": "shared/papers/004-adp-fl-async.notes.md",
        "methods": {
            "ADP-FL": ["adp_fl", "ADPFL"],
            "Baseline": ["dp_fedavg", "DPFedAvg", "even_budget", "EvenBudget", "AsyncLocalDP"],
            "FedAvg (no DP)": ["fedavg", "FedAvg", "none"],
        },
        "tables": tables,
    }
