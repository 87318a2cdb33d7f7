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
import re
import sys
import warnings
from typing import Any

from fl_lightning import extensions as _extensions  # noqa: F401  (registers subcommands)

OVERVIEW = """\
fl-lightning: differentially private federated learning on PyTorch Lightning.

commands:
  fit        train a federated run: fl-lightning fit --config configs/experiment/quickstart.yaml
  validate   evaluate a run's global model on the validation split (--ckpt_path)
  test       evaluate a run's global model on the test split (--ckpt_path)
  sweep      run a W&B sweep spec locally, resumable: fl-lightning sweep sweeps/<spec>.yaml
  report     compare runs side by side (--group-by KEY) or against a paper's table (--paper)
  audit      membership inference and gradient inversion against a run: --attack threshold ...

  fl-lightning <command> --help   options of one command
  --import MODULE|FILE.py         import your module first (models, datasets, strategies),
                                  then name them in configs: class_path: MODULE.MyNet
"""


def _trainer_defaults() -> dict[str, Any]:
    return {
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
        "enable_model_summary": False,
        "max_steps": 20,
        "default_root_dir": "runs",
        "logger": [
            {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": "runs", "name": "fl"},
            },
            {
                "class_path": "lightning.pytorch.loggers.WandbLogger",
                "init_args": {"save_dir": "runs", "project": "fl-lightning", "offline": True},
            },
        ],
    }


def _default_callbacks(trainer_config: dict[str, Any]) -> list[Any]:
    """A round progress bar and a last-checkpoint writer, unless the config turned them off,
    and the end-of-fit plots (``fl_lightning.callbacks.RunPlots``)."""
    from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

    from fl_lightning.server.progress import RoundProgressBar

    given = trainer_config.get("callbacks") or []
    callbacks: list[Any] = []
    if trainer_config.get("enable_progress_bar") is not False and not any(
        isinstance(c, ProgressBar) for c in given
    ):
        callbacks.append(RoundProgressBar())
    if trainer_config.get("enable_checkpointing") is not False and not any(
        isinstance(c, ModelCheckpoint) for c in given
    ):
        callbacks.append(ModelCheckpoint(save_last=True, every_n_train_steps=10, save_top_k=0))
    from fl_lightning.callbacks import RunPlots

    if not any(isinstance(c, RunPlots) for c in given):  # accuracy / ε vs round PNGs
        callbacks.append(RunPlots())
    return callbacks


def build_cli_class():  # noqa: ANN201
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

    from fl_lightning.client.module import ClientModule
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.privacy.accountant import PrivacyAccountant
    from fl_lightning.server.module import FederatedModule
    from fl_lightning.strategies import Strategy

    class LoggedConfigCallback(SaveConfigCallback):
        """Writes config.yaml beside the run and logs the resolved config to every logger.

        Refuses (one line, before training) to write into a directory that already holds a run.
        """

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            log_dir = trainer.log_dir
            if log_dir and not self.overwrite:
                target = os.path.join(log_dir, self.config_filename)
                if os.path.exists(target):
                    raise ValueError(
                        f"trainer.default_root_dir: {log_dir} already holds a run ({target}); "
                        "choose another directory so nothing is overwritten"
                    )
            super().setup(trainer, pl_module, stage)

        def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
            config = self.parser.dump(self.config, skip_none=False, format="yaml")
            import yaml

            flat = _flatten(yaml.safe_load(config))
            for logger in trainer.loggers:
                logger.log_hyperparams(flat)

    class FederatedCLI(LightningCLI):
        def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
            parser.add_class_arguments(ClientModule, "client", fail_untyped=False)
            parser.add_subclass_arguments(Strategy, "strategy", required=True)
            parser.add_class_arguments(PrivacyAccountant, "privacy")
            parser.link_arguments("client", "model.client", apply_on="instantiate")
            parser.link_arguments("strategy", "model.strategy", apply_on="instantiate")
            parser.link_arguments("privacy", "model.privacy", apply_on="instantiate")
            parser.link_arguments("seed_everything", "model.seed")
            parser.link_arguments("seed_everything", "data.seed")

        def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
            return super()._instantiate_trainer(config, [*callbacks, *_default_callbacks(config)])

        def before_fit(self) -> None:
            """Checks that need both the model and the data, before the Trainer starts."""
            data = self.datamodule
            if data.hparams.partitioner != "natural":
                self.model.sampler.check_population(data.num_clients)
            from fl_lightning.server.distributed import launch_problem

            trainer = self.trainer
            problem = launch_problem(
                accelerator=type(trainer.accelerator).__name__.lower().replace("accelerator", ""),
                devices=int(trainer.num_devices),
                world_size=int(trainer.num_devices) * int(trainer.num_nodes),
                strategy=self.model.strategy,
            )
            if problem:
                raise ValueError(problem)

    def make(args: list[str] | None = None, run: bool = True) -> FederatedCLI:
        return FederatedCLI(
            FederatedModule,
            FederatedDataModule,
            save_config_callback=LoggedConfigCallback,
            save_config_kwargs={"overwrite": False},
            trainer_defaults=_trainer_defaults(),
            seed_everything_default=0,
            parser_kwargs={"exit_on_error": False},
            args=args,
            run=run,
            auto_configure_optimizers=False,
        )

    return make


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def one_line(err: BaseException) -> str:
    """The bad field and why, on one line, from a ValueError or a jsonargparse error."""
    text = str(err).strip() or type(err).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keys = re.findall(r'Parser key "([^"]+)"', text)
    if not keys:
        return lines[0] if lines else text
    stripped = [ln.lstrip("- ") for ln in lines]
    reason = next(
        (ln for ln in stripped if ln.startswith("Expected")),
        next((ln for ln in stripped if ln.startswith("Problem")), lines[0]),
    )
    given = next((ln for ln in lines if ln.startswith("Given value:")), "")
    given_value = given.split(":", 1)[1].strip() if given else ""
    got = f" (got {given_value!r})" if given_value and "Got value" not in reason else ""
    return f"{'.'.join(keys)}: {reason}{got}"


def run_lightning(args: list[str] | None = None) -> int:
    from jsonargparse import ArgumentError

    make = build_cli_class()
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        make(args)
    except (
        ArgumentError, ValueError, FileNotFoundError, TypeError, KeyError,
        MisconfigurationException,
    ) as err:  # fmt: skip
        from lightning.fabric.utilities.rank_zero import rank_zero_only

        if getattr(rank_zero_only, "rank", 0) == 0:  # one line from rank 0 only
            print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    finally:
        _finish_wandb()
    return 0


def _finish_wandb() -> None:
    """Closes a W&B run started by this command, so its files are complete on return (matters
    when the CLI runs in-process: tests, notebooks, sweeps)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


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
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    # Lightning warns that a checkpoint taken under manual optimisation holds the state after
    # the optimizer step. For a federated round that is the point: the checkpoint of round r
    # holds the global model after round r, and resume continues with round r + 1.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
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
    handler = _extensions.SUBCOMMANDS.get(rest[0])
    if handler is not None:
        return int(handler(rest[1:]) or 0)
    if argv is None and rest != args:  # LightningCLI reads sys.argv itself
        sys.argv = [sys.argv[0], *rest]
    return run_lightning(argv if rest == args else rest)


if __name__ == "__main__":
    sys.exit(main())
