"""FederatedModule: the round loop as a LightningModule (one training step = one round).

The Lightning ``Trainer`` gives the loop process launch, logging, progress, checkpoints and
seeding; ``max_steps`` is the number of rounds. This module only wires Lightning's hooks to the
parts that do the work (docs/architecture.md, "One round"): the settings (``settings.py``), the
set-up before any data moves (``federation.py``), the secure-mode seed (``secure_seed.py``), the
noise-to-signal warning (``noise_signal.py``), the round's steps (``round.py``), evaluation
(``evaluation.py``, also behind ``validate``/``test``) and the end of the run, its summary,
files and statement (``run_end.py``, ``run_files.py``).
The checkpoint holds the global model; Lightning adds the server optimizer's state and the
strategy's and accountant's ``state_dict``.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import lightning.pytorch as pl
import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server.distributed import check_distributed_run
from fl_lightning.server.evaluation import evaluate_split
from fl_lightning.server.executor_choice import build_executor
from fl_lightning.server.federation import SetUpOnce, set_up_federation
from fl_lightning.server.noise_signal import warn_before_round_zero
from fl_lightning.server.privacy_plan import declare_private_run
from fl_lightning.server.round import FederatedRound
from fl_lightning.server.run_end import end_summary, finish_run
from fl_lightning.server.run_files import log_upload_guarantee, run_files_dir, write_label_histogram
from fl_lightning.server.run_identity import resolved_config
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.server.secure_seed import SecureSeed
from fl_lightning.server.settings import ServerSettings, refuse_trainer_precision
from fl_lightning.strategies.base import Metrics, Strategy
from fl_lightning.utils.flat import trainable_parameters


class FederatedModule(pl.LightningModule):
    """The federated round loop.

    Args:
        client: the ClientModule every client trains (one per process, reused).
        strategy: the aggregation strategy (a Callback).
        privacy: the accountant (a Callback); None for a run without accounting.
        sampling: ``fixed`` (m clients per round, without replacement), ``poisson`` (each client
            with probability q), ``cyclic_poisson`` (the cyclic blocks, each client of the round's
            block with probability q: cyclic Poisson), ``cyclic`` (the clients shuffled once
            into ⌊N/m⌋ blocks of m,
            taken in turn: DP-FTRL's min-separated participation) or ``auto`` (the default:
            Poisson for strategies whose
            client-level noise is amplified by sampling, whose accounting is then tight, else
            fixed; ``server/sampling.py``). The accountant is told which one ran.
        clients_per_round: m (also the expected cohort size of Poisson sampling without a rate).
        client_rate: q for Poisson sampling (None: m/N) and for ``cyclic_poisson`` (None: 1).
        server_optimizer: ``sgd`` (FedAvg / FedAvgM) or ``adam`` (FedAdam).
        server_lr: server learning rate (1.0 with SGD and no momentum is plain FedAvg).
        server_momentum: server SGD momentum (FedAvgM).
        server_betas: Adam betas (FedAdam).
        server_eps: Adam ε (FedAdam uses a large one, e.g. 1e-3; Reddi et al. 2021).
        eval_every: evaluate the global model every this many rounds, and at the last round
            (0: only at the last round).
        seed: seed of every generator of the run (cohorts, batches, noise).
        executor: ``sequential`` (one client at a time), ``vectorized`` (stacked cohorts,
            ``server/vectorized_executor.py``; falls back to sequential with a logged reason)
            or ``auto`` (measures both on the first rounds and keeps the faster,
            ``server/executor.py: AutoExecutor``; docs/performance.md).
    """

    def __init__(
        self,
        client: ClientModule,
        strategy: Strategy,
        privacy: PrivacyAccountant | None = None,
        sampling: Literal["auto", "fixed", "poisson", "cyclic", "cyclic_poisson"] = "auto",
        clients_per_round: int = 10,
        client_rate: float | None = None,
        server_optimizer: Literal["sgd", "adam"] = "sgd",
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        server_betas: tuple[float, float] = (0.9, 0.99),
        server_eps: float = 1e-3,
        eval_every: int = 5,
        seed: int = 0,
        executor: Literal["sequential", "vectorized", "auto"] = "sequential",
    ) -> None:
        super().__init__()
        self.settings = ServerSettings(
            executor=executor,
            server_optimizer=server_optimizer,
            server_lr=server_lr,
            server_momentum=server_momentum,
            server_betas=server_betas,
            server_eps=server_eps,
            eval_every=eval_every,
        )
        self.automatic_optimization = False
        self.sampler = CohortSampler(sampling, clients_per_round, client_rate)
        self.strategy = strategy
        self.accountant = privacy
        self.seed = seed
        self.global_net = copy.deepcopy(client.net)
        self.num_classes = client.num_classes
        # Not a registered submodule: the client's working copy is not part of the checkpoint.
        self._client = [client]
        self._round: FederatedRound | None = None  # bound to the fit's parts in on_fit_start
        # every σ fixed and the strategy set up, once a fit (``server/federation.py``)
        self.federation = SetUpOnce(self._set_up_federation)
        # Put before the summary line this run prints (audit's shadow runs say what they are).
        self.console_label = ""
        self.last_eval: dict[str, float] = {}
        # What the last round logged (round/*, train/*, privacy/*, test/* when evaluated):
        # public, for callbacks (fl_lightning.callbacks.RunPlots, user callbacks).
        self.round_metrics: dict[str, float] = {}
        # What the strategy's hooks returned in the last round (logged as strategy/<key>).
        self.strategy_metrics: Metrics = {}
        self.rounds_completed = 0
        # Rounds that released nothing (SecAgg below its threshold: strategy/round_aborted).
        self.rounds_aborted = 0
        self.stopped_by_budget = False
        # SIGINT/SIGTERM's name when the run stopped on it at a round boundary, and the
        # checkpoint saved there (runs/interrupt.py)
        self.interrupted: str | None = None
        self.resume_from: str | None = None
        self.secret = SecureSeed()  # privacy.secure_mode: only in the checkpoint
        self.save_hyperparameters(ignore=["client", "strategy", "privacy"])

    @property
    def client(self) -> ClientModule:
        return self._client[0]

    @property
    def secure_mode(self) -> bool:
        """``privacy.secure_mode``: generators keyed by a secret seed, not the configured one."""
        return self.accountant is not None and self.accountant.secure_mode

    @property
    def noise_seed(self) -> int:
        """The first key of every noise, cohort and batch generator (``server/secure_seed.py``):
        the configured seed, or in secure mode the secret drawn in ``setup``."""
        return self.secret.noise_seed(self.seed, secure=self.secure_mode)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rounds_aborted"] = self.rounds_aborted
        self.secret.save(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:  # after ``setup``
        self.rounds_aborted = int(checkpoint.get("rounds_aborted", 0))
        self.secret.load(checkpoint)

    @property
    def local_config(self) -> LocalTrainingConfig:
        """The clients' local-training config as the run trains them: the client's, with the
        DP-SGD σ the set-up fixed (``server/federation.py``; as configured before ``setup``)."""
        local = self.federation.local
        return self.client.training_config if local is None else local

    @property
    def uses_dp_sgd(self) -> bool:
        return self.client.training_config.dp_sgd is not None

    @property
    def data(self):  # noqa: ANN201 - the FederatedDataModule
        return self.trainer.datamodule

    # -- set-up ------------------------------------------------------------------------------
    def configure_callbacks(self) -> list[pl.Callback]:
        return [cb for cb in (self.strategy, self.accountant) if cb is not None]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.settings.optimizer(trainable_parameters(self.global_net))

    def setup(self, stage: str) -> None:
        data = self.data
        data.setup(stage)
        if data.num_classes != self.num_classes:
            raise ValueError(
                f"client.num_classes: model has {self.num_classes} classes, dataset "
                f"{data.dataset_name!r} has {data.num_classes}"
            )
        refuse_trainer_precision(str(self.trainer.precision))
        if stage == "fit":  # every σ fixed and the strategy set up, before any data moves
            # the one noise seed, before any callback's on_fit_start keys a generator by it
            self.secret.draw(self.trainer.strategy.broadcast, secure=self.secure_mode)
            self.federation.for_fit(data, int(self.trainer.max_steps))

    def set_up_before_fit(self, data: Any, *, rounds: int, precision: str) -> None:
        """Every check and calibration of ``setup("fit")``, now, before the Trainer starts
        (``server/federation.py: SetUpOnce.before_fit``); ``data`` is set up."""
        refuse_trainer_precision(precision)
        self.federation.before_fit(data, rounds)

    def _set_up_federation(self, data: Any, rounds: int) -> LocalTrainingConfig:
        return set_up_federation(
            strategy=self.strategy,
            client=self.client,
            accountant=self.accountant,
            sampler=self.sampler,
            data=data,
            global_net=self.global_net,
            server=self.settings.optimizer_spec,
            rounds=rounds,
            seed=self.seed,
        )

    def on_fit_start(self) -> None:
        data = self.data
        check_distributed_run(self.strategy, self.resolved_config)  # before any collective
        data.to(self.device)
        declare_private_run(self.accountant, self.strategy, uses_dp_sgd=self.uses_dp_sgd)
        trainer = LocalTrainer(self.client, self.device, config=self.local_config)
        executor = build_executor(self.settings.executor, trainer)
        from fl_lightning.callbacks import ClientHooks

        executor.hooks = ClientHooks(self.trainer, self)
        self._round = FederatedRound(
            strategy=self.strategy,
            accountant=self.accountant,
            sampler=self.sampler,
            executor=executor,
            data=data,
            local=self.local_config,
            global_net=self.global_net,
            seed=self.noise_seed,
            device=self.device,
        )
        self._log_partition()
        local_dp = self.strategy.local_dp
        log_upload_guarantee(local_dp.guarantee_note() if local_dp else None, self.loggers)
        warn_before_round_zero(self.strategy, self.global_net, self.sampler, data,
                               int(self.trainer.max_steps),
                               is_global_zero=self.trainer.is_global_zero)  # fmt: skip

    def resolved_config(self) -> dict[str, Any]:
        """What every rank must agree on (``server/run_identity.py``)."""
        return resolved_config(
            hparams=dict(self.hparams),
            training_config=self.local_config,
            net=self.client.net,
            strategy=self.strategy,
            data_hparams=dict(self.data.hparams),
            rounds=int(self.trainer.max_steps),
        )

    def _log_partition(self) -> None:
        hist = self.data.label_histogram()
        if hist is None:  # a lazy source: its clients' labels are not all read
            return
        hist = hist.cpu()
        log_dir = self.trainer.log_dir  # a collective under DDP: every rank asks
        out = run_files_dir(log_dir) if self.trainer.is_global_zero else None
        write_label_histogram(hist, out, self.loggers)

    # -- one round (server/round.py) ---------------------------------------------------------
    @property
    def federated_round(self) -> FederatedRound:
        """The round's steps, bound to this fit's parts by ``on_fit_start``."""
        assert self._round is not None, "FederatedModule: no round before on_fit_start"
        return self._round

    def training_step(self, batch: Any, batch_idx: int) -> None:
        round_idx = int(self.global_step)
        optimizer = self.optimizers()
        assert not isinstance(optimizer, list)  # configure_optimizers returns one
        outcome = self.federated_round.run_round(
            round_idx,
            int(self.trainer.max_steps),
            optimizer,
            self.evaluate_global,
            first_round=self.rounds_completed == 0,
        )
        if outcome.stop:
            self.stopped_by_budget = True
            self.print(outcome.stop)
            self.trainer.should_stop = True
            return
        self.strategy_metrics = outcome.strategy_metrics
        self.rounds_aborted += int(bool(outcome.strategy_metrics.get("round_aborted")))
        self.rounds_completed = round_idx + 1
        metrics = outcome.metrics
        if self.settings.evaluates_after(round_idx, int(self.trainer.max_steps)):
            metrics.update({f"test/{k}": v for k, v in self.evaluate_global().items()})
        self.round_metrics = dict(metrics)
        self.log_dict(metrics, on_step=True, on_epoch=False, prog_bar=False, batch_size=1)

    # -- evaluation --------------------------------------------------------------------------
    def evaluate_global(self, split: str = "test") -> dict[str, float]:
        """Metrics of the global model (or of the strategy's own models) on a split
        (``server/evaluation.py``)."""
        data = self.data
        ds = data.test if split == "test" else data.val
        if ds is None:
            return {}
        self.last_eval = evaluate_split(
            self.global_net,
            ds.x.to(self.device),
            ds.y.to(self.device),
            batch_size=data.hparams.eval_batch_size,
            num_classes=self.num_classes,
            models=self.strategy.evaluation_models(),
        )
        return self.last_eval

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.global_net(x)

    # ``validate`` and ``test`` score the whole split once, at the end of Lightning's loop, by
    # the same path as the rounds (``evaluate_global``: eval batches, the strategy's models,
    # DDP-reduced metrics); the loop's batches are not needed, so the steps keep nothing.
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def test_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def on_validation_epoch_end(self) -> None:
        # The datamodule's validation loader falls back to the test split.
        self._log_split("val" if self.data.val is not None else "test", prefix="val")

    def on_test_epoch_end(self) -> None:
        self._log_split("test", prefix="test")

    def _log_split(self, split: str, *, prefix: str) -> None:
        metrics = self.evaluate_global(split)
        self.log_dict({f"{prefix}/{k}": v for k, v in metrics.items()}, batch_size=1)

    # -- end of training ---------------------------------------------------------------------
    def on_train_end(self) -> None:  # the summary, files, statement and line (run_end.py)
        final = self.evaluate_global()
        planned = int(self.trainer.max_steps)
        summary = end_summary(final, accountant=self.accountant,
                              strategy_metrics=self.strategy_metrics,
                              completed=self.rounds_completed, aborted=self.rounds_aborted,
                              planned=planned, stopped_by_budget=self.stopped_by_budget,
                              interrupted=self.interrupted,
                              resume_from=self.resume_from)  # fmt: skip
        log_dir = self.trainer.log_dir  # a collective under DDP: every rank asks
        if self.trainer.is_global_zero:
            finish_run(summary, final, log_dir=log_dir, accountant=self.accountant,
                       strategy=self.strategy, data=self.data, secure_mode=self.secure_mode,
                       callbacks=getattr(self.trainer, "callbacks", []), loggers=self.loggers,
                       console_label=self.console_label)  # fmt: skip
