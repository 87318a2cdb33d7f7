"""The audit table of docs/audit.md: every available strategy on offline MNIST, attacked.

Runs ``fl-lightning audit`` on ``configs/experiment/quickstart.yaml`` with overrides to offline
MNIST (20 Dirichlet clients, 5 per round, the small CNN) once per strategy, with the membership
attacks and DLG / iDLG on one client's privatised upload, and prints a markdown table.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and printed, never typed in. ``--out DIR`` appends the run to
``DIR/audit_table.json`` and a section to ``DIR/audit_table.md``; nothing recorded is
rewritten.

    nice -n 10 python benchmarks/audit_table.py --rounds 10 > /tmp/audit_table.md
    nice -n 10 python benchmarks/audit_table.py --rounds 10 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import out_dir, record_run

ROOT = Path(__file__).resolve().parents[1]

# name -> (strategy class path, init args as CLI overrides)
STRATEGIES = {
    "FedAvg": ("fl_lightning.strategies.fedavg.FedAvg", []),
    "DP-FedAvg (σ=1, C=1)": (
        "fl_lightning.strategies.dp_fedavg.DPFedAvg",
        ["--strategy.clip_norm=1.0", "--strategy.noise_multiplier=1.0"],
    ),
    "DP-FedASGP": ("fl_lightning.strategies.dp_fedasgp.DPFedASGP", []),
    "SPM (LDP-FedAvg)": ("fl_lightning.strategies.ldp_fedavg.LDPFedAvg", []),
}


def available(class_path: str) -> bool:
    module, _, name = class_path.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return False


def run(name: str, class_path: str, extra: list[str], args: argparse.Namespace) -> dict:
    out = Path(tempfile.mkdtemp(prefix="audit-table-"))
    cmd = [
        sys.executable,
        "-m",
        "fl_lightning.cli",
        "audit",
        "--config",
        str(ROOT / "configs/experiment/quickstart.yaml"),
        "--attack",
        "mia",
        "--attack",
        "dlg",
        "--attack",
        "idlg",
        "--num-targets",
        str(args.targets),
        "--shadow-models",
        str(args.shadows),
        "--dlg-iterations",
        str(args.dlg_iterations),
        "--dlg-examples",
        str(args.dlg_examples),
        "--out",
        str(out),
        f"--trainer.default_root_dir={out}",
        f"--trainer.max_steps={args.rounds}",
        "--trainer.logger=false",
        # The quickstart's composition on offline MNIST with the small CNN (20 Dirichlet
        # clients, 5 per round): the setting of docs/audit.md.
        f"--data={ROOT / 'configs/data/mnist_offline.yaml'}",
        f"--client={ROOT / 'configs/client/mnist_cnn_small.yaml'}",
        "--model.clients_per_round=5",
        f"--strategy={class_path}",
        *extra,
    ]
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: audit failed\n{proc.stderr[-3000:]}")
    res = json.loads((out / "audit.json").read_text())
    res["wall_s"] = time.perf_counter() - start
    res["out"] = str(out)
    return res


def table(rows: dict[str, dict]) -> str:
    head = (
        "| method | accountant ε (δ) | attack | AUC | bal. acc. | TPR@0.1%FPR | TPR@1%FPR "
        "| ε lower bound (95%) |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, res in rows.items():
        eps = res["accountant_epsilon"]
        eps_s = "∞" if eps == float("inf") else f"{eps:.2f} ({res['accountant_delta']:g})"
        for attack, e in res["attacks"].items():
            if "auc" not in e:
                continue
            lines.append(
                f"| {name} | {eps_s} | {attack} | {e['auc']:.3f} | {e['balanced_accuracy']:.3f} "
                f"| {e['tpr_at_0_1pct_fpr']:.3f} | {e['tpr_at_1pct_fpr']:.3f} "
                f"| {e['epsilon_lower_bound']:.3f} |"
            )
    lines += [
        "",
        "| method | DLG SSIM (median) | DLG PSNR (dB, median) | DLG recovered | "
        "iDLG SSIM (median) | iDLG PSNR (dB, median) | iDLG recovered | iDLG label acc. "
        "| audit wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in rows.items():
        d, i = res["attacks"]["dlg"], res["attacks"]["idlg"]
        lines.append(
            f"| {name} | {d['ssim_median']:.3f} | {d['psnr_median']:.2f} "
            f"| {d['recovered_fraction']:.0%} | {i['ssim_median']:.3f} | {i['psnr_median']:.2f} "
            f"| {i['recovered_fraction']:.0%} | {i['label_accuracy']:.2f} | {res['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--targets", type=int, default=500)
    p.add_argument("--shadows", type=int, default=2)
    p.add_argument("--dlg-iterations", type=int, default=100)
    p.add_argument("--dlg-examples", type=int, default=2)
    p.add_argument("--only", nargs="*", help="method names to run (default: all available)")
    p.add_argument("--out", default=None, help="directory: append the run there")
    args = p.parse_args()
    out = out_dir(p, args.out, "audit_table")
    load_before = os.getloadavg()
    rows = {}
    for name, (class_path, extra) in STRATEGIES.items():
        if args.only and name not in args.only:
            continue
        if available(class_path):
            rows[name] = run(name, class_path, extra, args)
            print(
                f"{name}: done in {rows[name]['wall_s']:.0f} s ({rows[name]['out']})",
                file=sys.stderr,
            )
        else:
            print(f"{name}: {class_path} not available, skipped", file=sys.stderr)
    command = "python benchmarks/audit_table.py " + " ".join(sys.argv[1:])
    record_run(
        out,
        "audit_table",
        title=f"{args.rounds} rounds, {len(rows)} method(s)",
        intro="# Audit table: every available strategy on offline MNIST, attacked\n\n"
        "`benchmarks/audit_table.py`; each run appended as measured.\n",
        lines=[f"- command: `{command}`", "", table(rows)],
        load_before=load_before,
        command=command,
        threads=1,  # the audits run in subprocesses with OMP_NUM_THREADS=1 (see ``run``)
        arguments=vars(args),
        audits=rows,
    )


if __name__ == "__main__":
    main()
