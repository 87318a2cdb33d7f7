"""The ``fl-lightning`` command (LightningCLI).

``fl-lightning fit|validate|test --config configs/experiment/<name>.yaml [overrides]``.
Besides Lightning's ``trainer``, ``model`` (the FederatedModule's round settings) and ``data``
groups, three top-level groups are linked into the model: ``client`` (the ClientModule with its
``net``), ``strategy`` (any ``Strategy`` subclass, by class name or ``class_path``) and
``privacy`` (the accountant). Bad input ends in one line ``error: <field>: <why>`` and exit 2,
before any training.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from typing import Any

from fl_lightning import extensions as _extensions  # noqa: F401  (registers subcommands)


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
    """A round progress bar and a last-checkpoint writer, unless the config turned them off."""
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
    return callbacks


def _default_plugins(given: Any) -> Any:
    """The user's plugins plus an atomic, ``weights_only``-loading CheckpointIO
    (``utils/atomic.py``), unless a CheckpointIO was given."""
    from lightning.fabric.plugins import CheckpointIO

    from fl_lightning.utils.atomic import build_checkpoint_io

    plugins = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
    if any(isinstance(p, CheckpointIO) for p in plugins):
        return given
    return [*plugins, build_checkpoint_io()]


DEFAULT_DISTRIBUTED_TIMEOUT_S = 1800.0
_CURRENT_TRAINER: list[Any] = []  # the Trainer of the running command (for failure messages)


def _set_timeout(strategy: Any, timeout_s: Any) -> None:
    """Collectives of a DDP strategy time out after ``distributed_timeout`` seconds (set before
    the process group starts; a strategy object given with its own timeout keeps it)."""
    if timeout_s is None or not float(timeout_s) > 0:
        raise ValueError(f"distributed_timeout: must be > 0 seconds, got {timeout_s}")
    from lightning.pytorch.strategies import DDPStrategy
    from lightning.pytorch.strategies.ddp import default_pg_timeout

    if isinstance(strategy, DDPStrategy) and strategy._timeout in (None, default_pg_timeout):
        from datetime import timedelta

        strategy._timeout = timedelta(seconds=float(timeout_s))


_DISTRIBUTED_SIGNS = (
    "gloo", "nccl", "connection closed by peer", "connection reset by peer", "timed out",
    "broken pipe", "socket timeout",
)  # fmt: skip


def is_distributed_failure(err: BaseException) -> bool:
    """A collective failed: a peer process died, hung past the timeout, or its link broke."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(sign in text for sign in _DISTRIBUTED_SIGNS)


def _distributed_failure_line(err: BaseException) -> str:
    """One line: which rank, which round, why, what was stopped and where to resume from."""
    text = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". This is")[0].rstrip(".")
    rank = world = step = "?"
    resume = "no checkpoint was written yet"
    if _CURRENT_TRAINER:
        trainer = _CURRENT_TRAINER[0]
        rank, world, step = trainer.global_rank, trainer.world_size, trainer.global_step
        cb = trainer.checkpoint_callback
        last = getattr(cb, "last_model_path", "") or ""
        if not last and getattr(cb, "dirpath", None):
            last = os.path.join(cb.dirpath, "last.ckpt")
        if last and os.path.exists(last):
            resume = (
                f"resume from the last complete checkpoint with --ckpt_path {last} "
                "(any number of processes gives the same result)"
            )
    return (
        f"error: distributed: rank {rank} of {world} lost its peers in round {step} ({text}); "
        f"the job is stopped, {resume}"
    )


def _stop_launched_ranks() -> None:
    """Kills the rank processes this one launched (Lightning's launcher), so no rank is left
    blocked in a collective or stopped; under torchrun/SLURM the launcher does this."""
    import signal

    if not _CURRENT_TRAINER:
        return
    launcher = getattr(_CURRENT_TRAINER[0].strategy, "launcher", None)
    for proc in list(getattr(launcher, "procs", []) or []):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)


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
            if self.already_saved:
                return
            log_dir = trainer.log_dir  # a collective under DDP: every rank asks
            if log_dir and not self.overwrite:
                target = os.path.join(log_dir, self.config_filename)
                if os.path.exists(target):
                    raise ValueError(
                        f"trainer.default_root_dir: {log_dir} already holds a run ({target}); "
                        "choose another directory so nothing is overwritten"
                    )
            if trainer.is_global_zero:
                if log_dir and self.save_to_log_dir:
                    # Atomic, and with environment secrets redacted (utils/redact.py).
                    from fl_lightning.utils.atomic import atomic_write
                    from fl_lightning.utils.redact import redact_text

                    config = self.parser.dump(self.config, skip_none=False, format="yaml")
                    target = os.path.join(log_dir, self.config_filename)
                    atomic_write(target, redact_text(config))
                self.save_config(trainer, pl_module, stage)
                self.already_saved = True
            self.already_saved = trainer.strategy.broadcast(self.already_saved)

        def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
            config = self.parser.dump(self.config, skip_none=False, format="yaml")
            import yaml

            from fl_lightning.utils.redact import redact

            flat = redact(_flatten(yaml.safe_load(config)))
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
            parser.add_argument(
                "--distributed_timeout",
                type=float,
                default=DEFAULT_DISTRIBUTED_TIMEOUT_S,
                help="seconds a process waits in a collective for the others before the run "
                "fails (DDP: a lost or hung rank ends the job instead of blocking it)",
            )

        def _parse_ckpt_path(self) -> None:
            """Lightning reads ``--ckpt_path``'s hyperparameters with ``weights_only=True``
            before anything else; a refused or truncated file becomes one ``ckpt_path`` line."""
            from fl_lightning.utils.atomic import CHECKPOINT_ERRORS, checkpoint_error

            try:
                super()._parse_ckpt_path()
            except CHECKPOINT_ERRORS as err:
                path = self.config[self.config.subcommand].get("ckpt_path")
                raise checkpoint_error(path, err) from err

        def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
            timeout = self._get(self.config_init, "distributed_timeout")
            config = {**config, "plugins": _default_plugins(config.get("plugins"))}
            trainer = super()._instantiate_trainer(
                config, [*callbacks, *_default_callbacks(config)]
            )
            _set_timeout(trainer.strategy, timeout)
            _CURRENT_TRAINER[:] = [trainer]
            return trainer

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

    from fl_lightning.utils.atomic import OutputWriteError

    make = build_cli_class()
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        make(args)
    except OutputWriteError as err:  # disk full, read-only folder: not bad input, exit 1
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 1
    except (
        ArgumentError, ValueError, FileNotFoundError, TypeError, KeyError,
        MisconfigurationException,
    ) as err:  # fmt: skip
        from lightning.fabric.utilities.rank_zero import rank_zero_only

        if getattr(rank_zero_only, "rank", 0) == 0:  # one line from rank 0 only
            print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as err:
        if not is_distributed_failure(err):
            raise
        print(_distributed_failure_line(err), file=sys.stderr, flush=True)
        _stop_launched_ranks()
        return 1
    finally:
        _finish_wandb()
        _CURRENT_TRAINER.clear()
    return 0


def _finish_wandb() -> None:
    """Closes a W&B run started by this command, so its files are complete on return (matters
    when the CLI runs in-process: tests, notebooks, sweeps)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fl-lightning`` console script."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    # Lightning warns that a checkpoint taken under manual optimisation holds the state after
    # the optimizer step. For a federated round that is the point: the checkpoint of round r
    # holds the global model after round r, and resume continues with round r + 1.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    args = list(sys.argv[1:] if argv is None else argv)
    handler = _extensions.SUBCOMMANDS.get(args[0]) if args else None
    if handler is not None:
        return int(handler(args[1:]) or 0)
    return run_lightning(argv)


if __name__ == "__main__":
    sys.exit(main())
