"""Build a run from a config: the LightningCLI class with the project's groups, defaults and
pre-flight checks, and the one-line error messages for bad input.

Used by the ``fl-lightning`` entry point (``cli.py``), by the attack pipeline (shadow runs) and by
the sweep runner (a spec's points are checked against this parser before launching), so that none
of them imports the entry point.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any


def _trainer_defaults() -> dict[str, Any]:
    return {
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
        "enable_model_summary": False,
        "max_steps": 20,
        "default_root_dir": "runs",
        # True: the default loggers, built under default_root_dir by _default_loggers.
        "logger": True,
    }


def _default_loggers(root: str | os.PathLike[str]) -> list[Any]:
    """CSV (``<root>/fl/version_N``) and W&B (``<root>/wandb``; mode from the environment,
    :mod:`fl_lightning.loggers`)."""
    from lightning.pytorch.loggers import CSVLogger

    from fl_lightning.loggers import WandbLogger

    return [CSVLogger(save_dir=os.fspath(root), name="fl"), WandbLogger()]


def _loggers_under(root: str | os.PathLike[str], logger: Any) -> Any:
    """The trainer's ``logger`` argument with every output under ``root``: ``True`` becomes the
    default loggers; a W&B logger given without a directory writes under ``root``."""
    from fl_lightning.loggers import WandbLogger

    if logger is True:
        logger = _default_loggers(root)
    for lg in logger if isinstance(logger, (list, tuple)) else [logger]:
        if isinstance(lg, WandbLogger):
            lg.default_save_dir(root)
    return logger


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
CURRENT_TRAINER: list[Any] = []  # the Trainer of the running command (for failure messages)


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


def distributed_failure_line(err: BaseException) -> str:
    """One line: which rank, which round, why, what was stopped and where to resume from."""
    text = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". This is")[0].rstrip(".")
    rank = world = step = "?"
    resume = "no checkpoint was written yet"
    if CURRENT_TRAINER:
        trainer = CURRENT_TRAINER[0]
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


def stop_launched_ranks() -> None:
    """Kills the rank processes this one launched (Lightning's launcher), so no rank is left
    blocked in a collective or stopped; under torchrun/SLURM the launcher does this."""
    import signal

    if not CURRENT_TRAINER:
        return
    launcher = getattr(CURRENT_TRAINER[0].strategy, "launcher", None)
    for proc in list(getattr(launcher, "procs", []) or []):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)


_RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", "hparams.yaml")


def _not_a_directory(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a directory."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def output_problem(trainer: Any) -> str | None:
    """Why the run may not write where it would (one line naming the field), or None.

    Checked before the Trainer starts: Lightning's CSV logger deletes an existing
    ``metrics.csv`` as soon as its experiment is created (in ``Trainer.fit``'s setup), so a
    check any later would come after the loss.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    root = Path(trainer.default_root_dir).absolute()
    log_dir = Path(trainer.log_dir or root).absolute()

    def field_of(path: Path) -> str:
        return "trainer.default_root_dir" if path.is_relative_to(root) else "trainer.logger"

    dirs = [root, log_dir]
    dirs += [Path(lg.save_dir).absolute() for lg in trainer.loggers if lg.save_dir]
    explicit_ckpt_dirs = [
        Path(cb.dirpath).absolute()
        for cb in trainer.callbacks
        if isinstance(cb, ModelCheckpoint) and cb.dirpath
    ]
    for d in [*dirs, *explicit_ckpt_dirs]:
        blocker = _not_a_directory(d)
        if blocker is not None:
            field = field_of(d) if d not in explicit_ckpt_dirs else "trainer.callbacks"
            return f"{field}: {blocker} is a file, not a directory; choose another output path"
    held = [log_dir / name for name in _RUN_FILES if (log_dir / name).exists()]
    for d in [log_dir / "checkpoints", *explicit_ckpt_dirs]:
        held += sorted(d.glob("*.ckpt")) if d.is_dir() else []
    if held:
        return (
            f"{field_of(log_dir)}: {log_dir} already holds a run ({held[0].name}); choose "
            "another directory (or logger version) so nothing is overwritten"
        )
    return None


_CKPT_ALIASES = ("last", "best", "hpc", "registry")


def checkpoint_problem(path: str, model: Any, *, max_steps: int | None) -> str | None:
    """Why ``ckpt_path`` cannot resume this run (one line naming the field), or None: missing,
    unreadable, not a Lightning checkpoint, saved from another model, or already at
    ``max_steps`` rounds (resuming would train nothing)."""
    import torch

    if path in _CKPT_ALIASES or "://" in path:
        return None  # Lightning resolves these itself
    if not Path(path).is_file():
        return f"ckpt_path: {path} does not exist or is not a file"
    from fl_lightning.utils.atomic import checkpoint_error

    try:
        # Loaded the way AtomicCheckpointIO will load it: weights_only, so nothing in it runs.
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to unpickle means the same thing
        return str(checkpoint_error(path, err))
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        return f"ckpt_path: {path} is not a Lightning checkpoint (no state_dict)"
    saved, here = ckpt["state_dict"], model.state_dict()
    for key, tensor in here.items():
        if key not in saved:
            return (
                f"ckpt_path: {path} was saved from another model ({key} is missing); check "
                "client.net and the dataset"
            )
        got = getattr(saved[key], "shape", None)
        if got is not None and tuple(got) != tuple(tensor.shape):
            return (
                f"ckpt_path: {path} was saved from another model ({key} has shape "
                f"{list(got)} there, {list(tensor.shape)} here); check client.net and the dataset"
            )
    extra = sorted(set(saved) - set(here))
    if extra:
        return (
            f"ckpt_path: {path} was saved from another model (it has {extra[0]}, this model "
            "does not); check client.net and the dataset"
        )
    done = int(ckpt.get("global_step", 0))
    if max_steps is not None and 0 < max_steps <= done:
        return (
            f"trainer.max_steps: {path} has already run {done} rounds, so max_steps "
            f"{max_steps} leaves nothing to train; set trainer.max_steps above {done}"
        )
    return None


class RunPhase:
    """Where the command is: ``config`` (parsing, building), ``setup`` (``Trainer.fit`` before
    the first round) or ``training`` (rounds or evaluation running). Decides how an error is
    reported (:func:`run_lightning`)."""

    value = "config"


def _phase_callback() -> Any:
    from lightning.pytorch.callbacks import Callback

    class TrainingPhase(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

        def on_test_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

    return TrainingPhase()


def build_cli_class():  # noqa: ANN201
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

    from fl_lightning.client.module import ClientModule
    from fl_lightning.configs import base_config_kwargs
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
            # Rank 0 looks and tells every rank: a rank that looked itself could find the
            # config.yaml rank 0 has just written and refuse alone, leaving rank 0 waiting.
            held = None
            if trainer.is_global_zero and log_dir and not self.overwrite:
                target = os.path.join(log_dir, self.config_filename)
                held = target if os.path.exists(target) else None
            held = trainer.strategy.broadcast(held)
            if held:
                raise ValueError(
                    f"trainer.default_root_dir: {log_dir} already holds a run ({held}); "
                    "choose another directory so nothing is overwritten"
                )
            if trainer.is_global_zero:
                # Dumped once (a dump re-validates the whole config): written, then logged.
                self._dumped = self.parser.dump(self.config, skip_none=False, format="yaml")
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
            blocker = _not_a_directory(Path(root).absolute())
            if blocker is not None:  # before any logger or callback makes a directory
                raise ValueError(
                    f"trainer.default_root_dir: {blocker} is a file, not a directory; "
                    "choose another output path"
                )
            config = {**config, "logger": _loggers_under(root, config.get("logger", True))}
            config["plugins"] = _default_plugins(config.get("plugins"))
            extra = [*_default_callbacks(config), _phase_callback()]
            trainer = super()._instantiate_trainer(config, [*callbacks, *extra])
            _set_timeout(trainer.strategy, self._get(self.config_init, "distributed_timeout"))
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
            if not ckpt_path:
                return
            max_steps = int(self.trainer.max_steps) if subcommand == "fit" else None
            problem = checkpoint_problem(str(ckpt_path), self.model, max_steps=max_steps)
            if problem:
                raise ValueError(problem)
            if subcommand == "fit" and self.trainer.is_global_zero:
                print(f"Resuming from {ckpt_path}", flush=True)

        def _check_outputs(self) -> None:
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
            trainer_defaults=_trainer_defaults(),
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


_UNION = "Does not validate against any of the Union subtypes"
_YAML_MARK = re.compile(r'in "[^"]*", line (\d+), column (\d+)')


def one_line(err: BaseException) -> str:
    """The bad field and why, on one line, from a ValueError or a jsonargparse error."""
    text = str(err).strip() or type(err).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    stripped = [ln.lstrip("- ") for ln in lines]
    unknown = re.search(r"unrecognized arguments: --([^\s=]+)", text)
    if unknown:
        return f"{unknown.group(1)}: not an option (see fl-lightning fit --help)"
    keys = re.findall(r'Parser key "([^"]+)"', text)
    option = re.search(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted", text)
    if option:
        cls = option.group(1).rsplit(".", 1)[-1]
        where = ".".join(keys) or "class"
        return f"{where}.init_args.{option.group(2)}: not a parameter of {cls}"
    if _UNION in text:
        # A class-typed group (strategy, client.dp_sgd, ...) whose __init__ refused a value:
        # the refusal names the field; "Expected a <class 'NoneType'>" is the other subtype.
        labels = ("Subtypes:", "Errors:", "Given value", "Expected")
        named = [
            ln
            for ln in stripped
            if re.match(r"^[A-Za-z_][\w.]*: ", ln) and not ln.startswith(labels)
        ]
        if named:
            return named[0]
    unable = re.search(r"Unable to load config '([^']+)'", text)
    mark = _YAML_MARK.findall(text)
    if unable and mark:
        problem = next((ln for ln in stripped[2:] if not ln.startswith("in ")), "invalid YAML")
        line, col = mark[-1]
        where = ".".join(keys) or "config"
        return f"{where}: {unable.group(1)} line {line}, column {col}: {problem}"
    if not keys:
        return lines[0] if lines else text
    reason = next(
        (ln for ln in stripped if ln.startswith("Expected")),
        next((ln for ln in stripped if ln.startswith("Problem")), lines[0]),
    )
    given = next((ln for ln in lines if ln.startswith("Given value:")), "")
    given_value = given.split(":", 1)[1].strip() if given else ""
    got = f" (got {given_value!r})" if given_value and "Got value" not in reason else ""
    return f"{'.'.join(keys)}: {reason}{got}"


def yaml_problem(args: list[str]) -> str | None:
    """The first YAML file named on the command line that does not parse, as one line with
    its flag, file, line and column (jsonargparse names neither file nor line)."""
    import yaml

    for i, tok in enumerate(args):
        flag, _, value = tok.partition("=")
        if not flag.startswith("--"):
            continue
        if not value and i + 1 < len(args):
            value = args[i + 1]
        if not value.endswith((".yaml", ".yml")) or not Path(value).is_file():
            continue
        try:
            yaml.safe_load(Path(value).read_text())
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            context = getattr(err, "context", None)
            why = f"{problem} ({context})" if context else problem
            return f"{flag.lstrip('-')}: {value}{where}: {why}"
    return None


def argument_problem(args: list[str]) -> str | None:
    """Why ``fl-lightning <args>`` would be refused while parsing (an unknown key, a value of
    the wrong type, a missing or malformed config file), as one line; None if it parses. Builds
    nothing, so it is quick enough to check every point of a sweep before launching any."""
    from jsonargparse import ArgumentError

    problem = yaml_problem(args)
    if problem:
        return problem
    try:
        build_cli_class()(args, parse_only=True)
    except (ArgumentError, ValueError, TypeError, KeyError, FileNotFoundError) as err:
        return one_line(err)
    return None
