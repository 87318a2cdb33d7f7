"""The report fixes of the reproductions issue: --where filters our runs, different settings are
never pooled, project baseline names and sound variants map to the paper's, an arm defined by two
parameters, ties shown as ties, a single-ε table without --where."""

from pathlib import Path

import pytest

from fl_lightning.reports import cli
from fl_lightning.reports.compare import compare, ranking
from fl_lightning.reports.markdown import competition_ranks
from fl_lightning.reports.runs import Run, load_runs
from fl_lightning.reports.tables import load_paper
from fl_lightning.sweeps.runner import resolved_config
from fl_lightning.sweeps.store import ResultStore

P002 = load_paper("002")


def _run(i: int, acc: float, params: dict, config: dict | None = None) -> Run:
    return Run(
        f"r{i}",
        params,
        {"test/accuracy": acc, "privacy/epsilon": 1.9},
        None,
        None,
        dict(config or {}),
    )


def _ablation_runs() -> list[Run]:
    """The 002 ablation arms as optimizer x ANR, 2 seeds, on offline MNIST, plus CIFAR runs
    that --where dataset=MNIST must leave out."""
    runs, i = [], 0
    accs = {
        ("adam", True): (0.9, 0.92),
        ("adam", False): (0.88, 0.88),
        ("sgd", True): (0.80, 0.82),
        ("sgd", False): (0.85, 0.85),
    }
    for (opt, anr), pair in accs.items():
        for seed, acc in enumerate(pair):
            params = {
                "client.optimizer": opt,
                "strategy.init_args.anr": anr,
                "seed_everything": seed,
            }
            runs.append(_run(i, acc, params, {"data.dataset": "mnist_offline"}))
            runs.append(_run(i + 1, 0.10, params, {"data.dataset": "cifar10"}))
            i += 2
    return runs


AB_MAP = {"adam,true": "DPFL-AGN", "adam,false": "AGN", "sgd,true": "ANR", "sgd,false": "DP-SGD"}


def test_two_parameter_arms_where_filters_runs_and_single_eps_table():
    comp = compare(
        _ablation_runs(),
        P002,
        P002.table("5.3"),
        where={"dataset": "MNIST"},
        method_key="client.optimizer,strategy.init_args.anr",
        method_map=AB_MAP,
    )
    cells = {c.method: c for c in comp.cells}
    # CIFAR runs filtered out (they are at 10 %): only the two MNIST seeds per arm remain
    assert comp.filtered_runs == 8
    assert cells["DPFL-AGN"].ours == [90.0, 92.0] and cells["DPFL-AGN"].paper == 95.23
    assert cells["DP-SGD"].ours == [85.0, 85.0] and cells["DP-SGD"].paper == 94.68
    # the table has the single ε = 2: runs without an ε label still land in the paper's cells
    assert all(c.epsilon is None for c in comp.cells) and len(comp.cells) == 4
    rank = ranking(comp)
    assert rank.tau is not None and rank.p_value is not None


def test_where_on_a_run_parameter_and_unknown_key(tmp_path: Path):
    runs = _ablation_runs()
    comp = compare(
        runs,
        P002,
        P002.table("5.3"),
        where={"dataset": "MNIST", "client.optimizer": "adam"},
        method_key="client.optimizer,strategy.init_args.anr",
        method_map=AB_MAP,
    )
    assert {c.method for c in comp.cells if c.runs} == {"DPFL-AGN", "AGN"}
    with pytest.raises(ValueError, match="--where nothing"):
        compare(runs, P002, P002.table("5.3"), where={"dataset": "MNIST", "nothing": 1})


def test_runs_of_different_settings_are_never_pooled():
    runs = [
        _run(
            0,
            0.9,
            {
                "strategy.class_path": "fl_lightning.strategies.dpfl_agn.DPFLAGN",
                "client.lr": 0.01,
                "seed_everything": 0,
            },
        ),
        _run(
            1,
            0.5,
            {
                "strategy.class_path": "fl_lightning.strategies.dpfl_agn.DPFLAGN",
                "client.lr": 0.001,
                "seed_everything": 1,
            },
        ),
    ]
    with pytest.raises(ValueError, match="differ in client.lr"):
        compare(runs, P002, P002.table("Fig8"))
    comp = compare(runs, P002, P002.table("Fig8"), where={"client.lr": 0.01})
    cell = next(c for c in comp.cells if c.method == "DPFL-AGN")
    assert cell.ours == [90.0] and cell.paper == 94.86
    # differing only in the seed: pooled (that is what a cell is)
    same = [
        _run(i, 0.8 + i / 100, {"strategy.class_path": "DPSGDFL", "seed_everything": i})
        for i in range(3)
    ]
    comp = compare(same, P002, P002.table("Fig8"))
    assert len(next(c for c in comp.cells if c.method == "DPSGD").ours) == 3


@pytest.mark.parametrize(
    ("paper", "label", "expected"),
    [
        ("000", "fl_lightning.strategies.dp_fedavg_local.DPFedAvgLocal", "DP-FedAvg"),
        ("000", "dp_fedavg_local", "DP-FedAvg"),
        ("004", "fl_lightning.strategies.even_budget.EvenBudget", "Baseline"),
        ("004", "even_budget", "Baseline"),
        ("004", "none", "FedAvg (no DP)"),
        ("003", "none", "NoDP"),
        ("002", "fl_lightning.strategies.dpsgd_fl.DPSGDFL", "DP-SGD"),
        ("002", "fl_lightning.strategies.nbafl.NbAFL,corrected", "NbAFL (sound)"),
        ("002", "fl_lightning.strategies.nbafl.NbAFL,published", "NbAFL"),
        ("001", "fl_lightning.strategies.gcfl.GCFL,corrected", "GCFL (sound)"),
    ],
)
def test_project_names_map_to_the_papers(paper, label, expected):
    from fl_lightning.reports.compare import run_method

    keys = ["k1", "k2"][: len(label.split(","))]
    run = _run(0, 0.5, dict(zip(keys, label.split(","))))
    assert run_method(run, ",".join(keys), {}, load_paper(paper), "ours") == expected


def test_ties_are_shown_as_ties(tmp_path: Path):
    assert competition_ranks([90.0, 85.001, 85.0, 70.0], True) == ["1", "2=", "2=", "4"]
    assert competition_ranks([1.0, 2.0, 2.0], False) == ["1", "2=", "2="]
    runs = [
        _run(i, acc, {"strategy.class_path": m, "seed_everything": 0})
        for i, (m, acc) in enumerate([("DPSGDFL", 0.9), ("NbAFL", 0.9), ("DPFLAGN", 0.8)])
    ]
    comp = compare(runs, P002, P002.table("Fig8"))
    rank = ranking(comp)
    # paper: DPFL-AGN > NbAFL > DPSGD; ours: DPSGD = NbAFL > DPFL-AGN (a tie, τ-b)
    assert rank.tau == pytest.approx(-0.8164965809, abs=1e-6)


def test_runner_config_reaches_where(tmp_path: Path, capsys):
    """A store row's resolved config (written by the runner) is what --where reads."""
    run_dir = tmp_path / "store" / "runs" / "p" / "a1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(
        "data:\n  dataset: mnist_offline\n  root: /x\ntrainer:\n  logger: []\nclient:\n  lr: 0.1\n"
    )
    config = resolved_config(run_dir)
    assert config == {"data.dataset": "mnist_offline", "client.lr": 0.1}
    s = ResultStore(tmp_path / "store")
    row = {
        "id": "p",
        "sweep": "x",
        "params": {"strategy.class_path": "DPSGDFL", "seed_everything": 0},
    }
    s.append(
        {
            **row,
            "status": "finished",
            "metrics": {"test/accuracy": 0.9},
            "run_dir": str(run_dir),
            "config": config,
        }
    )
    runs = load_runs(tmp_path / "store")
    assert runs[0].get("data.dataset") == "mnist_offline"
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                str(tmp_path / "store"),
                "--paper",
                "002",
                "--table",
                "Fig8",
                "--where",
                "dataset=CIFAR-10",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    # The run's resolved config says mnist_offline, so --where CIFAR-10 leaves no run: one line
    # naming what the runs have, exit 2, no report (an empty table is no answer).
    rc = cli.main([str(tmp_path / "store"), "--paper", "002", "--table", "5.3",
                   "--where", "dataset=CIFAR-10", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == (
        "error: --where: 0 of 1 runs matched dataset=CIFAR-10 (dataset in runs: mnist_offline)"
    ), err
    assert not (out / "report.md").exists()
