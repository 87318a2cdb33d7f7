"""The LightningCLI class of a run: the project's groups (client, strategy, privacy) and their
links, the Trainer's defaults, the config written beside the run, and the checks before any
round (outputs, checkpoint, model vs data, privacy, population, launch)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from fl_lightning.runs.defaults import (
    default_callbacks,
    default_plugins,
    loggers_under,
    trainer_defaults,
)
from fl_lightning.runs.distributed import (
    CURRENT_TRAINER,
    DEFAULT_DISTRIBUTED_TIMEOUT_S,
    set_timeout,
)
from fl_lightning.runs.phase import RunPhase, phase_callback
from fl_lightning.runs.preflight import (
    checkpoint_problem,
    is_alias,
    not_a_directory,
    output_problem,
    resolve_alias,
    resolve_last,
)
from fl_lightning.runs.slurm import IN_PLACE, requeue_checkpoint, resumes_in_place


def build_cli_class():  # noqa: ANN201
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

    from fl_lightning.client.module import ClientModule
    from fl_lightning.configs import base_config_kwargs
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
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
            # Rank 0 looks and tells every rank: a rank that looked itself could find the
            # config.yaml rank 0 has just written and refuse alone, leaving rank 0 waiting.
            held = None
            # A requeued SLURM job continues its run in place (runs/slurm.py).
            requeued = resumes_in_place(trainer)
            if trainer.is_global_zero and log_dir and not self.overwrite and not requeued:
                target = os.path.join(log_dir, self.config_filename)
                held = target if os.path.exists(target) else None
            held = trainer.strategy.broadcast(held)
            if held:
                raise ValueError(
                    f"trainer.default_root_dir: {log_dir} already holds a run ({held}); "
                    "choose another directory so nothing is overwritten"
                )
            if trainer.is_global_zero:
                # Dumped once, written, then logged; not validated again (parsing validated
                # it; a validating dump took twice as long, with the same text for every
                # config in configs/experiment).
                self._dumped = self.parser.dump(
                    self.config, skip_unset=False, skip_validation=True, format="yaml"
                )
                if log_dir and self.save_to_log_dir:
                    # Atomic, and with environment secrets redacted (utils/redact.py).
                    from fl_lightning.utils.atomic import atomic_write
                    from fl_lightning.utils.redact import redact_text

                    target = os.path.join(log_dir, self.config_filename)
                    atomic_write(target, redact_text(self._dumped))
                self.save_config(trainer, pl_module, stage)
                self.already_saved = True
            self.already_saved = trainer.strategy.broadcast(self.already_saved)

        def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if not trainer.loggers:  # e.g. trainer.logger: false; config.yaml is written
                return
            config = self._dumped  # dumped by ``setup``, this method's only caller
            import yaml

            from fl_lightning.utils.redact import redact
            from fl_lightning.utils.tree import flatten_tree

            flat = redact(flatten_tree(yaml.safe_load(config)))
            for logger in trainer.loggers:
                logger.log_hyperparams(flat)

    class FederatedCLI(LightningCLI):
        def __init__(self, *cli_args: Any, **kw: Any) -> None:
            # The subcommand the arguments name, if any: only its parser is built (a parser
            # is a few hundred typed arguments; building all four took a third of a tiny run).
            argv = sys.argv[1:] if kw.get("args") is None else kw["args"]
            named = argv[0] if kw.get("run", True) and isinstance(argv, list) and argv else None
            every = LightningCLI.subcommands()
            self._only = named if named in every else None
            if self._only and "parser_kwargs" in kw:  # the others' parser settings go too
                others = set(every) - {self._only}
                kw["parser_kwargs"] = {
                    k: v for k, v in kw["parser_kwargs"].items() if k not in others
                }
            super().__init__(*cli_args, **kw)

        def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
            """Lightning's subcommands, narrowed to the one being run (``fit --help`` and
            every error still come from that subcommand's full parser; no subcommand named,
            e.g. ``--help``: all of them)."""
            every = LightningCLI.subcommands()
            only = getattr(self, "_only", None)
            return {only: every[only]} if only else every

        def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
            parser.add_class_arguments(ClientModule, "client", fail_untyped=False)
            parser.add_subclass_arguments(Strategy, "strategy", required=True)
            parser.add_class_arguments(PrivacyAccountant, "privacy")
            parser.link_arguments("client", "model.client", apply_on="instantiate")
            parser.link_arguments("strategy", "model.strategy", apply_on="instantiate")
            # privacy.accountant: none switches accounting off (non-private baselines only;
            # FederatedModule refuses it for a run that privatises anything).
            parser.link_arguments(
                "privacy", "model.privacy", apply_on="instantiate", compute_fn=_accountant_or_none
            )
            parser.link_arguments("seed_everything", "model.seed")
            parser.link_arguments("seed_everything", "data.seed")
            parser.add_argument(
                "--distributed_timeout",
                type=float,
                default=DEFAULT_DISTRIBUTED_TIMEOUT_S,
                help="seconds a process waits in a collective for the others before the run "
                "fails (DDP: a lost or hung rank ends the job instead of blocking it)",
            )

        def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
            root = config.get("default_root_dir") or "runs"
            blocker = not_a_directory(Path(root).absolute())
            if blocker is not None:  # before any logger or callback makes a directory
                raise ValueError(
                    f"trainer.default_root_dir: {blocker} is a file, not a directory; "
                    "choose another output path"
                )
            steps = config.get("max_steps")
            if isinstance(steps, int) and steps < -1:  # before Lightning's own message
                raise ValueError(
                    f"trainer.max_steps: {steps} is not a number of rounds; give the number "
                    "of rounds (>= 1)"
                )
            config = {**config, "logger": loggers_under(root, config.get("logger", True))}
            config["plugins"] = default_plugins(config.get("plugins"))
            extra = [*default_callbacks(config), phase_callback()]
            trainer = super()._instantiate_trainer(config, [*callbacks, *extra])
            set_timeout(trainer.strategy, self._get(self.config_init, "distributed_timeout"))
            CURRENT_TRAINER[:] = [trainer]
            return trainer

        def _parse_ckpt_path(self) -> None:
            """Lightning reads the checkpoint's hyperparameters (``weights_only=True``) while
            parsing; a refused or unreadable file is one line naming ckpt_path."""
            from fl_lightning.utils.atomic import checkpoint_error

            try:
                super()._parse_ckpt_path()
            except Exception as err:  # noqa: BLE001 - any load failure means the same thing
                path = self.config[self.config.subcommand].get("ckpt_path")
                raise checkpoint_error(path, err) from err

        def _run_subcommand(self, subcommand: str) -> None:
            RunPhase.value = "setup"
            super()._run_subcommand(subcommand)

        def _check_checkpoint(self, subcommand: str) -> None:
            ckpt_path = self.config[subcommand].get("ckpt_path")
            requeued = None
            if subcommand == "fit":  # a requeued SLURM job: Lightning restores hpc_ckpt_<n>
                # (found by _check_outputs, which runs first)
                requeued = getattr(self.trainer, IN_PLACE, None)
                ckpt_path = requeued or ckpt_path
            if not ckpt_path:
                return
            if is_alias(str(ckpt_path)):  # resolved here, before anything is written
                if ckpt_path == "last":  # the newest last.ckpt under the root, not Lightning's
                    ckpt_path, problem = resolve_last(self.trainer.default_root_dir)
                else:
                    ckpt_path, problem = resolve_alias(str(ckpt_path), self.trainer)
                if problem:
                    raise ValueError(problem)
                # what runs and what config.yaml records: the file, not the alias
                self.config[subcommand]["ckpt_path"] = ckpt_path
                self.config_init[subcommand]["ckpt_path"] = ckpt_path
            max_steps = int(self.trainer.max_steps) if subcommand == "fit" else None
            problem = checkpoint_problem(str(ckpt_path), self.model, max_steps=max_steps)
            if problem:
                raise ValueError(problem)
            if subcommand == "fit" and self.trainer.is_global_zero:
                how = " (requeued SLURM job: continuing in its directory)" if requeued else ""
                print(f"Resuming from {ckpt_path}{how}", flush=True)

        def _check_outputs(self) -> None:
            ckpt_path = self.config[self.config.subcommand].get("ckpt_path")
            requeued = requeue_checkpoint(self.trainer, ckpt_path)
            setattr(self.trainer, IN_PLACE, requeued)
            if requeued:  # a requeued SLURM job continues its own run in place
                return
            problem = output_problem(self.trainer)
            if problem:
                raise ValueError(problem)

        def _check_first_contact(self) -> None:
            """Loads the data (``setup`` is idempotent; no global random draw) and runs the
            client network once on one example of each split (``first_contact.py``): a
            network built for other inputs or another number of classes is one line here,
            before any file is written, not a shape error in round 0."""
            from fl_lightning.first_contact import model_data_problem

            data = self.datamodule
            data.setup("fit")
            hp = data.hparams
            split = f" (data.split {hp.split})" if hp.get("split") else ""
            problem = model_data_problem(
                self.model.client.net,
                {"training": data.train, "validation": data.val, "test": data.test},
                dataset=f"data.dataset {data.dataset_name}{split}",
                num_classes=int(data.num_classes),
                client_num_classes=int(self.model.num_classes),
            )
            if problem:
                raise ValueError(problem)

        def before_validate(self) -> None:
            self._check_outputs()
            self._check_checkpoint("validate")
            self._check_first_contact()

        def before_test(self) -> None:
            self._check_outputs()
            self._check_checkpoint("test")
            self._check_first_contact()

        def before_fit(self) -> None:
            """Checks that need both the model and the data, before the Trainer starts."""
            if self.trainer.max_steps == 0:
                raise ValueError(
                    "trainer.max_steps: 0 rounds would train nothing; give the number of "
                    "rounds (>= 1)"
                )
            self._check_outputs()
            self._check_checkpoint("fit")
            model = self.model
            if model.accountant is None and (model.uses_dp_sgd or model.strategy.traits.private):
                what = "client.dp_sgd" if model.uses_dp_sgd else type(model.strategy).__name__
                raise ValueError(
                    f"privacy.accountant: none, but this run privatises what it releases "
                    f"({what}); a private run must account its ε: choose rdp, prv or pld"
                )
            if self.trainer.max_steps == -1 and (
                model.uses_dp_sgd or model.strategy.traits.private
            ):
                what = "client.dp_sgd" if model.uses_dp_sgd else type(model.strategy).__name__
                raise ValueError(
                    f"trainer.max_steps: -1 (no last round) on a run that spends privacy "
                    f"({what}): its ε would grow without end; give the number of rounds "
                    "(privacy.target_epsilon may still stop it earlier)"
                )
            self._check_first_contact()
            data = self.datamodule
            if data.hparams.partitioner != "natural":
                self.model.sampler.check_population(data.num_clients)
            from fl_lightning.server.federation import check_delta_population

            sizes = tuple(int(n) for n in data.client_sizes().tolist())
            check_delta_population(
                model.accountant, model.strategy, uses_dp_sgd=model.uses_dp_sgd, sizes=sizes
            )
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
            # Every strategy and mechanism check (and σ's calibration) before the Trainer
            # creates its loggers: a refusal leaves no fl/version_N and no W&B run.
            model.set_up_before_fit(
                data, rounds=int(self.trainer.max_steps), precision=str(self.trainer.precision)
            )

        def after_fit(self) -> None:
            trainer = self.trainer
            log_dir = trainer.log_dir
            if trainer.is_global_zero and log_dir and Path(log_dir, "summary.json").exists():
                print(f"Run directory: {log_dir}", flush=True)

    class ParseOnlyCLI(FederatedCLI):
        """Parses and type-checks the arguments; builds and runs nothing (sweep validation)."""

        def _set_seed(self) -> None:
            pass

        def _parse_ckpt_path(self) -> None:
            pass

        def instantiate_classes(self) -> None:
            pass

        def _run_subcommand(self, subcommand: str) -> None:
            pass

    def make(
        args: list[str] | None = None, run: bool = True, parse_only: bool = False
    ) -> FederatedCLI:
        return (ParseOnlyCLI if parse_only else FederatedCLI)(
            FederatedModule,
            FederatedDataModule,
            save_config_callback=LoggedConfigCallback,
            save_config_kwargs={"overwrite": False},
            trainer_defaults=trainer_defaults(),
            seed_everything_default=0,
            parser_kwargs={"exit_on_error": False, **base_config_kwargs(run)},
            args=args,
            run=run,
            auto_configure_optimizers=False,
        )

    return make


def _accountant_or_none(accountant: Any) -> Any:
    """The accountant to hand the round loop: None for ``privacy.accountant: none``."""
    return None if getattr(accountant, "accountant", None) == "none" else accountant
