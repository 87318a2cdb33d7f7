"""Using your own code and finding things: ``--import``, the custom example, the public
client callbacks, the end-of-fit plots, the top-level help, the model zoo in the help and
``FL_SHARED_DATA`` for ``mnist_offline``."""

from __future__ import annotations

import json
import sys
from typing import ClassVar

import pytest

from fl_lightning.callbacks import ClientCallback, RunPlots
from tests.conftest import QUICKSTART, REPO, TINY

EXAMPLE = REPO / "examples" / "custom"


class Recorder(ClientCallback):
    """Records the hook calls (class-level: the CLI builds the instance)."""

    calls: ClassVar[list[tuple[str, int, int]]] = []

    def on_client_start(self, trainer, pl_module, client_id, ctx) -> None:
        Recorder.calls.append(("start", int(ctx.round_idx), int(client_id)))

    def on_client_end(self, trainer, pl_module, client_id, ctx, update) -> None:
        assert update.client_id == client_id and update.delta.numel() > 0
        Recorder.calls.append(("end", int(ctx.round_idx), int(client_id)))


def test_example_module_runs_from_the_cli_with_import(run_cli, capsys, tmp_path) -> None:
    lines = (EXAMPLE / "my_fl.py").read_text().splitlines()
    assert len(lines) < 40, "the example promises a model, a dataset and a strategy in < 40 lines"
    rc = run_cli(["fit", "--import", str(EXAMPLE / "my_fl.py"), "--config",
                  str(EXAMPLE / "config.yaml"), "--trainer.max_steps", "3",
                  "--trainer.logger", "false",
                  "--trainer.enable_progress_bar", "false"])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "Finished 3 rounds" in out.out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["test/accuracy"] > 0.5  # two moons, 3 rounds of median aggregation
    from fl_lightning.data.datasets import DATASETS

    assert "moons" in DATASETS
    assert (tmp_path / "client_times.csv").read_text().startswith("round,client,seconds")


def test_import_of_a_missing_module_is_one_line(run_cli, capsys) -> None:
    rc = run_cli(["fit", "--import", "no_such_module_xyz", "--config", str(QUICKSTART), *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: --import: cannot import 'no_such_module_xyz'")


def test_import_by_module_name_and_class_path(run_cli, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sys.modules.pop("my_fl", None)
    rc = run_cli(["fit", "--import", "my_fl", "--config", str(QUICKSTART), *TINY,
                  "--client.net", "my_fl.TinyNet", "--client.net.init_args.hidden", "8",
                  "--client.net.init_args.num_classes", "2",  # else the quickstart's 10 stays
                  "--client.num_classes", "2", "--data.dataset", "moons",
                  "--strategy", "my_fl.FedMedian", "--trainer.max_steps", "2"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_client_callbacks_wrap_every_client(run_cli, capsys, executor: str) -> None:
    Recorder.calls.clear()
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--strategy", "FedAvg",
                  "--trainer.max_steps", "2", "--model.executor", executor,
                  "--trainer.callbacks+=tests.test_user_code.Recorder"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    calls = Recorder.calls
    for rnd in (0, 1):
        starts = [c for k, r, c in calls if k == "start" and r == rnd]
        ends = [c for k, r, c in calls if k == "end" and r == rnd]
        assert len(starts) == 3 and sorted(starts) == sorted(ends)  # 3 clients per round
    for k, r, c in calls:  # every client starts before it ends
        if k == "end":
            assert calls.index(("start", r, c)) < calls.index(("end", r, c))


def test_fit_writes_plots_and_evaluates_the_last_round(
    run_cli, capsys, tmp_path, monkeypatch
) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    from fl_lightning.runs.cli_class import build_cli_class

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend that is not the Agg the plots draw with
    backend = matplotlib.get_backend()
    monkeypatch.setenv("FL_LIGHTNING_PLOTS", "1")  # the suite's default is 0 (tests/conftest.py)
    cli = build_cli_class()(["--config", str(QUICKSTART), *TINY, "--model.eval_every", "10",
                             "--trainer.max_steps", "3",
                             "--trainer.default_root_dir", str(tmp_path)], run=False)  # fmt: skip
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    plots = next(cb for cb in cli.trainer.callbacks if isinstance(cb, RunPlots))
    rounds, acc = plots.series("test/accuracy")
    assert rounds == [3] and 0.0 <= acc[0] <= 1.0  # eval_every 10 > 3 rounds: the last round
    assert plots.series("privacy/epsilon")[0] == [1, 2, 3]
    for name in ("accuracy_vs_round.png", "epsilon_vs_round.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # The plots leave a user's matplotlib as it was (a notebook keeps its inline backend).
    after, figures = matplotlib.get_backend(), plt.get_fignums()
    matplotlib.use(before)
    assert after == backend and figures == []


def test_plots_are_left_out_with_FL_LIGHTNING_PLOTS_0(run_cli, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FL_LIGHTNING_PLOTS", "0")
    assert run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1"]) == 0
    assert not list(tmp_path.rglob("*.png")) and list(tmp_path.rglob("summary.json"))
    monkeypatch.setenv("FL_LIGHTNING_PLOTS", "yes")
    assert run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: FL_LIGHTNING_PLOTS: expected 0 or 1, got 'yes'", err


def test_top_level_help_lists_every_command(capsys) -> None:
    from fl_lightning.cli import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("fit", "validate", "test", "sweep", "report", "audit", "--import"):
        assert f"  {command}" in out, command
    assert main([]) == 2


def test_client_net_help_lists_the_model_zoo(capsys) -> None:
    import inspect

    import fl_lightning.models as zoo
    from fl_lightning.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "--help-all"])
    out = capsys.readouterr().out
    section = out[out.rindex("--client.net NET") :][:2000]  # the option, not the usage
    for name in zoo.__all__:
        assert name in section.replace("\n", " ").replace(" ", ""), name
    assert main(["fit", "--help"]) == 0  # the screenful: the zoo by name, no torch classes
    out = capsys.readouterr().out
    section = out[out.index("--client.net CLASS") :][:600]
    for name in zoo.__all__:
        assert inspect.isclass(getattr(zoo, name))
        assert name in section.replace("\n", " ").replace(" ", ""), name


def test_mnist_offline_honours_fl_shared_data(tmp_path, monkeypatch) -> None:
    import fl_lightning.utils.shared as shared
    from fl_lightning.data.datamodule import FederatedDataModule
    from tests.conftest import offline_mnist_args

    folder = offline_mnist_args()[1]  # skips, saying why, without the data
    monkeypatch.chdir(tmp_path)  # ../shared/data does not exist from here
    monkeypatch.setattr(shared, "CHECKOUT", tmp_path / "checkout")  # nor near the checkout
    monkeypatch.delenv("FL_SHARED_DATA", raising=False)
    with pytest.raises(ValueError, match="FL_SHARED_DATA"):
        FederatedDataModule(dataset="mnist_offline", root="../shared/data")
    monkeypatch.setenv("FL_SHARED_DATA", folder)
    dm = FederatedDataModule(dataset="mnist_offline", root="../shared/data")
    dm.setup("fit")
    assert len(dm.train) + len(dm.test) == 10_000
