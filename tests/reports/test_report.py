import json
from pathlib import Path

import pytest

from fl_lightning.reports import cli
from fl_lightning.reports.compare import compare, ranking
from fl_lightning.reports.runs import load_runs
from fl_lightning.reports.tables import load_paper
from fl_lightning.sweeps.store import ResultStore

# (method value, target eps, seed) -> final accuracy (fraction); paper 001 Table III ACC is
# DP-FedAvg 85.50/88.73/90.51, DP-FedProx 86.28/90.57/92.18, GCFL 91.11/92.76/93.15.
FAKE = {
    ("fl_lightning.strategies.dp_fedavg.DPFedAvg", 2.0): (0.85, 0.87),
    ("fl_lightning.strategies.dp_fedavg.DPFedAvg", 3.0): (0.88, 0.88),
    ("fl_lightning.strategies.dp_fedavg.DPFedAvg", 4.0): (0.90, 0.92),
    ("fl_lightning.strategies.gcfl.GCFL", 2.0): (0.80, 0.82),
    ("fl_lightning.strategies.gcfl.GCFL", 3.0): (0.84, 0.84),
    ("fl_lightning.strategies.gcfl.GCFL", 4.0): (0.86, 0.86),
}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    s = ResultStore(tmp_path / "store")
    for (method, eps), accs in FAKE.items():
        for seed, acc in enumerate(accs):
            run_dir = tmp_path / "store" / "runs" / f"{method[-4:]}{eps}{seed}"
            run_dir.mkdir(parents=True)
            lines = ["step,round/index,test/accuracy,privacy/epsilon"]
            lines += [f"{r},{r},,{eps * (r + 1) / 4}" for r in range(4)]
            lines += [f"3,3,{acc},"]
            (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
            params = {"strategy.class_path": method, "privacy.target_epsilon": eps,
                      "seed_everything": seed}  # fmt: skip
            metrics = {"test/accuracy": acc, "privacy/epsilon": eps * 0.99}
            row = {"id": f"{method}-{eps}-{seed}", "sweep": "fake", "params": params}
            s.append({**row, "status": "running"})
            s.append({**row, "status": "finished", "metrics": metrics, "run_dir": str(run_dir)})
    s.append({"id": "broken", "sweep": "fake", "params": {}, "status": "failed", "error": "x"})
    return tmp_path / "store"


def test_report_markdown_and_pngs(store: Path, tmp_path: Path):
    out = tmp_path / "report"
    rc = cli.main([str(store), "--paper", "001", "--table", "III", "--where", "metric=ACC",
                   "--out", str(out)])  # fmt: skip
    assert rc == 0
    md = (out / "report.md").read_text()
    assert "| DP-FedAvg | 2 | 1.980 | 86.00 ± 1.41 | 85.50 | +0.50 | 2 |" in md
    assert "| DP-FedAvg | 3 | 2.970 | 88.00 ± 0.00 | 88.73 | -0.73 | 2 |" in md
    assert "| GCFL | 4 | 3.960 | 86.00 ± 0.00 | 93.15 | -7.15 | 2 |" in md
    # paper cells without runs are listed with a dash
    assert "| DP-FedProx | 2 | — | — | 86.28 | — | 0 |" in md
    # paper ranks GCFL above DP-FedAvg; ours the reverse: tau = -1
    assert "Kendall τ between our ranking and the paper's: **-1.000**" in md
    for name in ("accuracy_vs_epsilon", "accuracy_vs_round", "epsilon_vs_round", "ranking"):
        png = out / f"{name}.png"
        assert png.stat().st_size > 5000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name}.png)" in md


def test_comparison_groups_seeds_and_maps_methods(store: Path):
    paper = load_paper("gcfl")
    comp = compare(load_runs(store), paper, paper.table("III"), where={"metric": "F1"})
    assert comp.metric == "test/f1_macro"  # F1 column -> our macro F1
    comp = compare(load_runs(store), paper, paper.table("III"), where={"metric": "ACC"})
    cell = next(c for c in comp.cells if c.method == "GCFL" and c.epsilon == 2.0)
    assert cell.paper == 91.11 and cell.ours == pytest.approx([80.0, 82.0])
    rank = ranking(comp)
    assert rank.methods == ["GCFL", "DP-FedAvg"] and rank.tau == pytest.approx(-1.0)


def test_method_map_and_wandb_csv_export(tmp_path: Path):
    csv = tmp_path / "export.csv"
    rows = ["Name,State,client.prox_mu,privacy.target_epsilon,test/accuracy,privacy/epsilon"]
    rows += ["a,finished,0.0,2,0.9,1.9", "b,finished,0.01,2,0.8,1.9", "c,crashed,0.0,2,0.1,1"]
    csv.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r"
    rc = cli.main([str(csv), "--paper", "1", "--table", "III", "--where", "metric=ACC",
                   "--method-key", "client.prox_mu", "--method-map", "0.0=DP-FedAvg",
                   "--method-map", "0.01=DP-FedProx", "--out", str(out)])  # fmt: skip
    assert rc == 0
    md = (out / "report.md").read_text()
    assert "| DP-FedAvg | 2 | 1.900 | 90.00 | 85.50 | +4.50 | 1 |" in md
    assert "| DP-FedProx | 2 | 1.900 | 80.00 | 86.28 | -6.28 | 1 |" in md
    assert (out / "accuracy_vs_epsilon.png").stat().st_size > 5000
    assert not (out / "accuracy_vs_round.png").exists()  # no per-round data in an export
    assert "no data" in md


def test_paper_report_on_a_wandb_export_averages_the_seeds_of_a_cell(tmp_path: Path):
    """Two seeds of one setting in a W&B export (different names, runtimes and metrics) are one
    cell's seeds, not two settings: its run columns and summary metrics are not the setting
    (docs/sweeps.md's ``report wandb_export.csv --paper 000`` was refused this way)."""
    csv = tmp_path / "export.csv"
    rows = ["Name,State,Runtime,_step,client.prox_mu,privacy.target_epsilon,seed_everything,"
            "test/accuracy,privacy/epsilon"]  # fmt: skip
    rows += ["a,finished,31,9,0.0,2,0,0.90,1.9", "b,finished,35,9,0.0,2,1,0.80,1.9"]
    csv.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r"
    rc = cli.main([str(csv), "--paper", "1", "--table", "III", "--where", "metric=ACC",
                   "--method-key", "client.prox_mu", "--method-map", "0.0=DP-FedAvg",
                   "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert "| DP-FedAvg | 2 | 1.900 | 85.00 ± 7.07 |" in (out / "report.md").read_text()


def test_ambiguous_table_asks_for_where(store: Path, capsys):
    assert cli.main([str(store), "--paper", "000", "--table", "IV"]) == 2
    err = capsys.readouterr().err
    assert "--where" in err and "dataset" in err


def test_where_that_matches_no_run_is_refused_in_one_line(store: Path, tmp_path: Path, capsys):
    """An empty table is no answer: ``--where`` that every run contradicts exits 2 with one
    line saying 0 runs matched and which values the runs have; no report is written."""
    out = tmp_path / "report"
    rc = cli.main([str(store), "--paper", "001", "--table", "III", "--where", "metric=ACC",
                   "--where", "seed_everything=7", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: --where: 0 of 12 runs matched metric=ACC, seed_everything=7")
    assert "seed_everything in runs: 0, 1" in err[0] and not out.exists()


def test_store_row_is_json_lines(store: Path):
    lines = (store / "results.jsonl").read_text().splitlines()
    assert all(isinstance(json.loads(ln), dict) for ln in lines)


# -- our runs, no paper ---------------------------------------------------------------------
def _own_store(tmp_path: Path) -> Path:
    """noise multiplier x clients per round x 2 seeds; accuracy = 0.9 - 0.1 σ + 0.01 m + seed."""
    s = ResultStore(tmp_path / "own")
    for sigma in (0.5, 1.0):
        for m in (5, 10):
            for seed in (0, 1):
                acc = 0.9 - 0.1 * sigma + 0.01 * m + 0.002 * seed
                params = {"strategy.init_args.noise_multiplier": sigma,
                          "model.clients_per_round": m, "seed_everything": seed,
                          "trainer.max_steps": 10}  # fmt: skip
                row = {"id": f"{sigma}-{m}-{seed}", "sweep": "own", "params": params}
                metrics = {"test/accuracy": acc, "privacy/epsilon": 4.0 / sigma, "rounds": 10}
                s.append({**row, "status": "finished", "metrics": metrics})
    return tmp_path / "own"


def test_runs_report_groups_by_any_key_and_never_pools_settings(tmp_path: Path, capsys):
    out = tmp_path / "rep"
    rc = cli.main([str(_own_store(tmp_path)), "--group-by",
                   "strategy.init_args.noise_multiplier", "--out", str(out)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    md = (out / "report.md").read_text()
    # both varying keys are columns (the constant max_steps and the seeds are not): 4 settings
    assert "| strategy.init_args.noise_multiplier | model.clients_per_round | n |" in md
    assert "8 finished runs in 4 settings" in md
    assert "| 0.5 | 5 | 2 | 0.9010 ± 0.0014 | 8.0000 ± 0.0000 | 10 ± 0 |" in md
    assert "| 0.5 | 10 | 2 | 0.9510 ± 0.0014 | 8.0000 ± 0.0000 | 10 ± 0 |" in md
    assert "| 1.0 | 10 | 2 | 0.9010 ± 0.0014 | 4.0000 ± 0.0000 | 10 ± 0 |" in md
    png = out / "test_accuracy_vs_strategy_init_args_noise_multiplier.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({png.name})" in md


def test_runs_report_on_a_folder_of_fit_runs(tmp_path: Path):
    import yaml

    for i, (sigma, acc) in enumerate([(0.5, 0.8), (2.0, 0.5)]):
        d = tmp_path / "runs" / "fl" / f"version_{i}"
        d.mkdir(parents=True)
        strategy = {"class_path": "fl_lightning.strategies.dp_fedavg.DPFedAvg",
                    "init_args": {"noise_multiplier": sigma, "clip_norm": 1.0}}  # fmt: skip
        config = {"seed_everything": 0, "trainer": {"default_root_dir": str(d)},
                  "strategy": strategy}  # fmt: skip
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        (d / "summary.json").write_text(json.dumps({"test/accuracy": acc, "rounds": 3}))
        (d / "metrics.csv").write_text(
            f"step,round/index,test/accuracy,privacy/epsilon\n0,0,,1.0\n1,1,,2.0\n2,2,{acc},3.0\n"
        )
    out = tmp_path / "rep"
    rc = cli.main([str(tmp_path / "runs"), "--group-by", "strategy.init_args.noise_multiplier",
                   "--out", str(out)])  # fmt: skip
    assert rc == 0
    md = (out / "report.md").read_text()
    assert "| strategy.noise_multiplier | n |" in md  # the output folder is not a setting
    assert "| 0.5 | 1 | 0.8000 |" in md and "| 2.0 | 1 | 0.5000 |" in md
    for name in ("accuracy_vs_round.png", "epsilon_vs_round.png"):
        assert (out / name).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group-by", "nope.key"], "--group-by nope.key: no run has this parameter"),
        (["--table", "III"], "--table: needs --paper"),
        (["--paper", "001"], "--table: required with --paper"),
        (["--where", "dataset=MNIST"], "only with --paper"),
    ],
)
def test_runs_report_bad_arguments(tmp_path: Path, capsys, args, message):
    assert cli.main([str(_own_store(tmp_path)), *args, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err


def test_runs_report_on_a_wandb_export_keeps_metrics_out_of_the_setting(tmp_path: Path):
    csv_path = tmp_path / "export.csv"
    rows = ["Name,State,Runtime,strategy.init_args.noise_multiplier,seed_everything,"
            "test/accuracy,privacy/epsilon"]  # fmt: skip
    for i, (sigma, seed, acc) in enumerate([(0.5, 0, 0.80), (0.5, 1, 0.82), (2.0, 0, 0.50)]):
        rows.append(f"run{i},finished,{30 + i},{sigma},{seed},{acc},{4 / sigma}")
    csv_path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "rep"
    assert cli.main([str(csv_path), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "3 finished runs in 2 settings" in md
    assert "| 0.5 | 2 | 0.8100 ± 0.0141 |" in md and "| 2.0 | 1 | 0.5000 |" in md
