"""The ``fl-lightning`` command (LightningCLI).

``fl-lightning fit|validate|test --config configs/experiment/<name>.yaml [overrides]``.
Besides Lightning's ``trainer``, ``model`` (the FederatedModule's round settings) and ``data``
groups, three top-level groups are linked into the model: ``client`` (the ClientModule with its
``net``), ``strategy`` (any ``Strategy`` subclass, by class name or ``class_path``) and
``privacy`` (the accountant). Bad input ends in one line ``error: <field>: <why>`` and exit 2,
before any training.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from fl_lightning import extensions as _extensions  # noqa: F401  (registers subcommands)
from fl_lightning.runs.arguments import yaml_problem
from fl_lightning.runs.cli_class import build_cli_class
from fl_lightning.runs.distributed import (
    CURRENT_TRAINER,
    distributed_failure_line,
    is_distributed_failure,
    stop_launched_ranks,
)
from fl_lightning.runs.error_lines import located, one_line
from fl_lightning.runs.interrupt import exit_code
from fl_lightning.runs.phase import RunPhase
from fl_lightning.runs.slurm import SlurmRequeued

OVERVIEW = """\
fl-lightning: differentially private federated learning on PyTorch Lightning.

commands:
  fit        train a federated run: fl-lightning fit --config configs/experiment/quickstart.yaml
  validate   evaluate a run's global model on the validation split (--ckpt_path)
  test       evaluate a run's global model on the test split (--ckpt_path)
  sweep      run a W&B sweep spec locally, resumable: fl-lightning sweep sweeps/<spec>.yaml
  report     compare runs side by side (--group-by KEY) or against a paper's table (--paper)
  audit      membership inference and gradient inversion against a run: --attack threshold ...
  repro      reproduce a paper's tables and verdicts from its definition: fl-lightning repro 000

  fl-lightning <command> --help   options of one command (fit --help-all: every trainer flag)
  --import MODULE|FILE.py         import your module first (models, datasets, strategies),
                                  then name them in configs: class_path: MODULE.MyNet
"""


SWEEP_PARAM_PATH = "WANDB_SWEEP_PARAM_PATH"


def sweep_agent_args(args: list[str]) -> list[str]:
    """``args`` plus the parameters ``wandb agent`` chose for this run (its ``wandb.config``,
    which the agent writes to ``$WANDB_SWEEP_PARAM_PATH``) that the command line does not set
    already: a spec whose command has no ``${args}`` still runs the agent's point."""
    path = os.environ.get(SWEEP_PARAM_PATH)
    if not path or not os.environ.get("WANDB_SWEEP_ID") or not Path(path).is_file():
        return args
    import yaml

    from fl_lightning.sweeps.spec import format_value

    try:
        params = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError:
        return args
    given = {a.split("=", 1)[0][2:] for a in args if a.startswith("--")}
    extra = []
    for key, entry in params.items():
        if str(key).startswith("_") or key == "wandb_version" or key in given:
            continue
        value = entry.get("value") if isinstance(entry, dict) and "value" in entry else entry
        extra.append(f"--{key}={format_value(value)}")
    return [*args, *extra]


def run_lightning(args: list[str] | None = None) -> int:
    """Runs fit/validate/test. Bad input (found while parsing and building, or a refusal
    raised before the first round) ends in one line ``error: <field>: <why>`` and exit 2; an
    error once training has started is a bug or a failure, not bad input, and keeps its
    traceback (exit 1)."""
    from jsonargparse import ArgumentError
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    from fl_lightning.privacy.accounting.budget import BudgetError
    from fl_lightning.server.run_files import NothingReleased
    from fl_lightning.utils.atomic import OutputWriteError

    argv = list(sys.argv[1:] if args is None else args)
    with_agent = sweep_agent_args(argv)
    if with_agent != argv:
        args = argv = with_agent
    rank0 = getattr(rank_zero_only, "rank", 0) == 0
    problem = yaml_problem(argv)
    if problem:
        if rank0:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    make = build_cli_class()
    config_errors: dict[str, tuple[type[BaseException], ...]] = {
        "config": (
            ArgumentError,
            ValueError,
            FileNotFoundError,
            TypeError,
            KeyError,
            MisconfigurationException,
        ),  # fmt: skip
        # Inside Trainer.fit before the first round: the checks raise ValueError; a TypeError
        # or KeyError here is a bug and keeps its traceback.
        "setup": (ValueError, FileNotFoundError, MisconfigurationException),
        "training": (),
    }
    RunPhase.value = "config"
    peers_alive = True
    try:
        cli = make(args)
    except Exception as err:
        phase = RunPhase.value
        if isinstance(err, OutputWriteError):  # disk full, read-only folder: one line, exit 1
            print(f"error: {one_line(err)}", file=sys.stderr)
            return 1
        if isinstance(err, NothingReleased):  # every round aborted: one line, exit 1
            if rank0:
                print(f"error: {err}", file=sys.stderr)
            return 1
        if isinstance(err, SlurmRequeued):  # saved at a round boundary, requeued: one line
            if rank0:
                print(f"requeued: {err}", flush=True)
            return 0
        if phase != "config" and is_distributed_failure(err):
            print(distributed_failure_line(err), file=sys.stderr, flush=True)
            stop_launched_ranks()
            peers_alive = False
            return 1
        # A budget that cannot pay for the first round is bad input wherever it is found
        # (strategies whose cohort is known only at round 0 find it there): one line.
        if isinstance(err, (*config_errors[phase], BudgetError)):
            if rank0:  # one line from rank 0 only
                print(f"error: {located(one_line(err), argv)}", file=sys.stderr)
            return 2
        if phase == "config":
            raise
        import traceback

        traceback.print_exc()
        where = "during training" if phase == "training" else "while setting up the run"
        first = (str(err).strip().splitlines() or [""])[0]
        print(f"error: {where}: {type(err).__name__}: {first} (traceback above)", file=sys.stderr)
        return 1
    finally:
        _finish_wandb()
        if peers_alive:
            _close_process_group()
        RunPhase.value = "config"
        CURRENT_TRAINER.clear()
    # stopped by SIGINT/SIGTERM at a round boundary, its files written: the signal's exit code
    interrupted = getattr(getattr(cli, "model", None), "interrupted", None)
    return exit_code(interrupted) if interrupted else 0


def _close_process_group() -> None:
    """Destroys the DDP process group (Lightning leaves it open). Left open, gloo's worker
    threads can still hold tensors while the interpreter shuts down, and the process then dies
    with SIGABRT ("terminate called without an active exception") after a successful run;
    pytorch/pytorch#179291 describes the crash."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _finish_wandb() -> None:
    """Closes a W&B run started by this command, so its files are complete on return (matters
    when the CLI runs in-process: tests, notebooks, sweeps)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
        # finish() can return before wandb-core has written the run's records (seen offline,
        # on a loaded machine); teardown waits for the service, so the .wandb file is whole.
        teardown = getattr(wandb, "teardown", None)
        if teardown is not None:
            teardown()


def quiet_console() -> None:
    """Keeps the console to what the user needs: the round bar, the final summary, warnings
    that need attention and errors. Silenced: Lightning's info lines ("Seed set to 0",
    "GPU available", "TPU available", the litlogger/litmodels tips, "`Trainer.fit` stopped",
    which the summary line repeats) and a torch-internal deprecation that Lightning triggers
    on every run (``_pytree``'s ``LeafSpec``)."""
    import logging

    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed",
                 # "SLURM auto-requeueing enabled": fl_lightning/runs/slurm.py handles SIGUSR1
                 "lightning.pytorch.trainer.connectors.signal_connector"):  # fmt: skip
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # Lightning's CSV logger would delete it; output_problem refuses that run first.
    warnings.filterwarnings("ignore", message="Experiment logs directory .* is not empty")
    # A resumed run writes into its own new directory, by design (nothing is overwritten).
    warnings.filterwarnings("ignore", message="The dirpath has changed from")
    # Passing LightningCLI its arguments is how this command runs it (after --import, in a
    # sweep point, for audit's target and shadow runs), not a mistake to warn about.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")


PLUGIN_GROUP = "fl_lightning.plugins"


def import_user_modules(args: list[str]) -> list[str]:
    """Imports every ``--import MODULE`` (or ``--import=MODULE``, or a file ``path/to/mod.py``
    whose folder then goes on ``sys.path``; repeatable, any position), the modules named in
    ``$FL_IMPORT`` and every installed ``fl_lightning.plugins`` entry point; returns the other
    arguments.

    A user module registers datasets (``register_dataset``) and defines networks, strategies
    and callbacks that configs then name by ``class_path: my_module.MyNet``. The working
    directory is put on ``sys.path`` first, as ``python -m`` would, so a module beside the
    configs imports from the console script too. Raises ``ValueError`` naming the module.
    """
    import importlib
    from importlib.metadata import entry_points

    modules: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--import":
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                raise ValueError("--import: expected a module name, e.g. --import my_module")
            modules.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--import="):
            modules.append(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    modules += [m for m in os.environ.get("FL_IMPORT", "").replace(",", " ").split() if m]
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        if name.endswith(".py") or os.sep in name:  # a file: its folder goes on sys.path
            path = os.path.abspath(name)
            if not os.path.isfile(path):
                raise ValueError(f"--import: no such file {name!r}")
            folder, name = os.path.split(path)
            name = name.removesuffix(".py")
            if folder not in sys.path:
                sys.path.insert(0, folder)
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ValueError(f"--import: cannot import {name!r}: {err}") from err
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()
        except ImportError as err:
            raise ValueError(f"entry point {PLUGIN_GROUP}:{ep.name}: {err}") from err
    return rest


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fl-lightning`` console script."""
    # W&B's mode follows the environment (fl_lightning.loggers.wandb_mode); its chatter does not.
    os.environ.setdefault("WANDB_SILENT", "true")
    # Lightning warns that a checkpoint taken under manual optimisation holds the state after
    # the optimizer step. For a federated round that is the point: the checkpoint of round r
    # holds the global model after round r, and resume continues with round r + 1.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    quiet_console()
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(OVERVIEW)
        return 0 if args else 2
    try:
        rest = import_user_modules(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rest:
        print(OVERVIEW)
        return 2
    if rest[0] in ("fit", "validate", "test"):
        if "--help-all" in rest:  # jsonargparse's full help: every trainer flag and class
            rest = [("--help" if a == "--help-all" else a) for a in rest]
            if argv is None:  # LightningCLI reads sys.argv itself
                sys.argv = [sys.argv[0], *rest]
            return run_lightning(rest)
        if "-h" in rest or "--help" in rest:  # a screenful, without building the parser
            from fl_lightning.runs.help import short_help

            print(short_help(rest[0]), end="")
            return 0
    handler = _extensions.SUBCOMMANDS.get(rest[0])
    if handler is not None:
        return int(handler(rest[1:]) or 0)
    if argv is None and rest != args:  # LightningCLI reads sys.argv itself
        sys.argv = [sys.argv[0], *rest]
    return run_lightning(argv if rest == args else rest)


if __name__ == "__main__":
    sys.exit(main())
