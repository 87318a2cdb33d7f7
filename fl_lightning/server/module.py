"""FederatedModule: the round loop as a LightningModule (one training step = one round).

The Lightning ``Trainer`` gives the loop process launch, logging, progress, checkpoints and
seeding; ``max_steps`` is the number of rounds. Each step (DESIGN.md, "One round"):

1. the strategy configures the round; 2. the sampler draws the cohort from (seed, round);
3. the executor trains this process's clients on the one reused ClientModule; 4. client-side
processing (clipping, local mechanisms) with generators keyed by (seed, round, client);
5. the strategy aggregates (central noise from a generator keyed by (seed, round));
6. the server optimizer applies the aggregate as a pseudo-gradient (SGD lr 1 = FedAvg,
momentum = FedAvgM, Adam = FedAdam); 7. the accountant records the round and logs ε, stopping
before a round that would exceed ``target_epsilon``; 8. every ``eval_every`` rounds the global
model is evaluated with torchmetrics.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Literal

import lightning.pytorch as pl
import torch

from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.metrics import classification_metrics
from fl_lightning.privacy.accountant import PrivacyAccountant
from fl_lightning.privacy.budget import (
    BudgetError,
)
from fl_lightning.privacy.events import RoundPrivacy
from fl_lightning.records import RoundContext
from fl_lightning.server.distributed import (
    check_ranks_agree,
    rank_and_world,
)
from fl_lightning.server.evaluation import evaluate_split
from fl_lightning.server.executor import Executor
from fl_lightning.server.executor_choice import build_executor
from fl_lightning.server.privacy_plan import (
    calibrate_client_noise,
    calibrate_strategy_noise,
    planned_privacy,
)
from fl_lightning.server.reduction import RoundUpdates, hook_metrics, reduce_round
from fl_lightning.server.run_files import (
    run_summary,
    summary_line,
    write_label_histogram,
    write_run_files,
)
from fl_lightning.server.run_identity import resolved_config
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.server.sharding import assign_clients
from fl_lightning.strategies.base import Metrics, Strategy
from fl_lightning.strategies.spec import FederationSpec, ServerOptimizerSpec
from fl_lightning.utils.flat import flatten_into, layer_slices, trainable_parameters
from fl_lightning.utils.rng import generator_for

log = logging.getLogger(__name__)


class FederatedModule(pl.LightningModule):
    """The federated round loop.

    Args:
        client: the ClientModule every client trains (one per process, reused).
        strategy: the aggregation strategy (a Callback).
        privacy: the accountant (a Callback); None for a run without accounting.
        sampling: ``fixed`` (m clients per round, without replacement), ``poisson`` (each client
            with probability q) or ``auto`` (the default: Poisson for strategies whose
            client-level noise is amplified by sampling, whose accounting is then tight, else
            fixed; ``server/sampling.py``). The accountant is told which one ran.
        clients_per_round: m (also the expected cohort size of Poisson sampling without a rate).
        client_rate: q for Poisson sampling (None: m/N).
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
        sampling: Literal["auto", "fixed", "poisson"] = "auto",
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
        if executor not in ("sequential", "vectorized", "auto"):
            raise ValueError(
                f"model.executor: expected 'sequential', 'vectorized' or 'auto', got {executor!r}"
            )
        self.executor_name = executor
        if server_optimizer not in ("sgd", "adam"):
            raise ValueError(
                f"model.server_optimizer: expected 'sgd' or 'adam', got {server_optimizer!r}"
            )
        if server_lr < 0:
            raise ValueError(f"model.server_lr: learning rate must be >= 0, got {server_lr}")
        if not 0 <= server_momentum < 1:
            raise ValueError(f"model.server_momentum: must be in [0, 1), got {server_momentum}")
        if eval_every < 0:
            raise ValueError(f"model.eval_every: must be >= 0, got {eval_every}")
        self.automatic_optimization = False
        self.sampler = CohortSampler(sampling, clients_per_round, client_rate)
        self.strategy = strategy
        self.accountant = privacy
        self.server_optimizer = server_optimizer
        self.server_lr = server_lr
        self.server_momentum = server_momentum
        self.server_betas = (float(server_betas[0]), float(server_betas[1]))
        self.server_eps = server_eps
        self.eval_every = eval_every
        self.seed = seed
        self.global_net = copy.deepcopy(client.net)
        self.num_classes = client.num_classes
        # Not a registered submodule: the client's working copy is not part of the checkpoint.
        self._client = [client]
        self._local_trainer: LocalTrainer | None = None
        self._executor: Executor | None = None
        self._global_flat: torch.Tensor | None = None
        self._eval_outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.last_eval: dict[str, float] = {}
        # What the last round logged (round/*, train/*, privacy/*, test/* when evaluated):
        # public, for callbacks (fl_lightning.callbacks.RunPlots, user callbacks).
        self.round_metrics: dict[str, float] = {}
        # What the strategy's hooks returned in the last round (logged as strategy/<key>).
        self.strategy_metrics: Metrics = {}
        self.rounds_completed = 0
        self.stopped_by_budget = False
        self.save_hyperparameters(ignore=["client", "strategy", "privacy"])

    @property
    def client(self) -> ClientModule:
        return self._client[0]

    @property
    def uses_dp_sgd(self) -> bool:
        return self.client.training_config.dp_sgd is not None

    # -- set-up ------------------------------------------------------------------------------
    def configure_callbacks(self) -> list[pl.Callback]:
        return [cb for cb in (self.strategy, self.accountant) if cb is not None]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = trainable_parameters(self.global_net)
        if self.server_optimizer == "adam":
            return torch.optim.Adam(
                params, lr=self.server_lr, betas=self.server_betas, eps=self.server_eps
            )
        return torch.optim.SGD(params, lr=self.server_lr, momentum=self.server_momentum)

    @property
    def data(self):  # noqa: ANN201 - the FederatedDataModule
        return self.trainer.datamodule

    def setup(self, stage: str) -> None:
        data = self.data
        data.setup(stage)
        if data.num_classes != self.num_classes:
            raise ValueError(
                f"client.num_classes: model has {self.num_classes} classes, dataset "
                f"{data.dataset_name!r} has {data.num_classes}"
            )
        if stage == "fit":
            self.sampler.resolve(amplified_by_sampling=self.strategy.amplified_by_sampling)
            self.sampler.check_population(data.num_clients)
            # Every σ is fixed here, before any data moves: the clients' DP-SGD σ first (the
            # spec states what clients run), then the strategy's, once it knows the federation.
            sampling = self.sampler.sampling(data.num_clients)
            rounds = int(self.trainer.max_steps)
            sizes = tuple(int(n) for n in data.client_sizes().tolist())
            self.client.training_config = calibrate_client_noise(
                self.client.training_config,
                client_sizes=sizes,
                sampling=sampling,
                rounds=rounds,
                accountant=self.accountant,
            )
            self.strategy.setup_federation(self.federation_spec(sizes, rounds))
            calibrate_strategy_noise(
                self.strategy, sampling=sampling, rounds=rounds, accountant=self.accountant
            )

    def federation_spec(self, client_sizes: tuple[int, ...], rounds: int) -> FederationSpec:
        """The federation as the strategy sees it (``strategies/spec.py``), before data moves."""
        data = self.data
        return FederationSpec(
            num_clients=data.num_clients,
            num_parameters=sum(p.numel() for p in trainable_parameters(self.global_net)),
            local=self.client.training_config,
            client_sizes=client_sizes,
            layer_slices=layer_slices(self.global_net),
            server=ServerOptimizerSpec(
                self.server_optimizer, float(self.server_lr), float(self.server_momentum)
            ),
            rounds=rounds,
            seed=self.seed,
            has_validation_split=data.val is not None,
            global_model=self.global_net,
            client_data=data.client_data,
        )

    def on_fit_start(self) -> None:
        data = self.data
        if rank_and_world()[1] > 1:
            # Every rank raises the same error before any collective (no rank left waiting);
            # the CLI checks this before launching, this covers runs built in Python.
            problem = self.strategy.distributed_problem()
            if problem:
                raise ValueError(f"strategy: {problem}")
            check_ranks_agree(self.resolved_config())
        data.to(self.device)
        if self.accountant is not None:
            self.accountant.private_run = self.uses_dp_sgd or self.strategy.is_private
            self.accountant.not_private_reason = (
                f"{type(self.strategy).__name__} uploads and aggregates updates without noise"
            )
        self._local_trainer = LocalTrainer(self.client, self.device)
        self._executor = build_executor(self.executor_name, self._local_trainer)
        from fl_lightning.callbacks import ClientHooks

        self._executor.hooks = ClientHooks(self.trainer, self)
        self._global_flat = torch.empty(
            sum(p.numel() for p in trainable_parameters(self.global_net)), device=self.device
        )
        self._log_partition()

    def resolved_config(self) -> dict[str, Any]:
        """What every rank must agree on (``server/run_identity.py``)."""
        return resolved_config(
            hparams=dict(self.hparams),
            training_config=self.client.training_config,
            net=self.client.net,
            strategy=self.strategy,
            data_hparams=dict(self.data.hparams),
            rounds=int(self.trainer.max_steps),
        )

    def _log_partition(self) -> None:
        hist = self.data.label_histogram().cpu()
        log_dir = self.trainer.log_dir  # a collective under DDP: every rank asks
        write_label_histogram(hist, log_dir if self.trainer.is_global_zero else None, self.loggers)

    # -- one round ---------------------------------------------------------------------------
    def round_context(self, round_idx: int) -> RoundContext:
        n = self.data.num_clients
        assert self._global_flat is not None
        flatten_into(trainable_parameters(self.global_net), self._global_flat)
        ctx = RoundContext(
            round_idx=round_idx,
            total_rounds=int(self.trainer.max_steps),
            seed=self.seed,
            num_clients=n,
            cohort=self.sampler.sample(self.seed, round_idx, n),
            expected_cohort_size=self.sampler.expected_size(n),
            sample_rate=self.sampler.sample_rate(n),
            global_params=self._global_flat,
            evaluate=self.evaluate_global,
            sampling=self.sampler.sampling(n),
        )
        ctx.cohort = self.strategy.select_clients(ctx)
        ctx.client_config = self.strategy.configure_round(ctx)
        return ctx

    def planned_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """What the round will spend, known before any client trains (for the budget stop)."""
        return planned_privacy(
            self.strategy, self.client.training_config, self.data.client_sizes(), ctx
        )

    def clients_of_this_process(self, ctx: RoundContext) -> list[int]:
        """This rank's share of the cohort (all of it with one process); see ``sharding.py``."""
        rank, world = rank_and_world()
        if world == 1:
            return list(ctx.cohort)
        cfg = self.client.training_config.with_overrides(ctx.client_config)
        sizes = self.data.client_sizes()
        costs = {}
        for cid in ctx.cohort:
            n = int(sizes[cid])
            costs[cid] = float(cfg.steps_for(n) * min(cfg.batch_size, n))
        return assign_clients(ctx.cohort, costs, world)[rank]

    def training_step(self, batch: Any, batch_idx: int) -> None:
        start = time.perf_counter()
        round_idx = int(self.global_step)
        ctx = self.round_context(round_idx)
        if self._stop_for_budget(ctx):
            return
        assert self._executor is not None
        local = RoundUpdates(
            self._executor.run(self.clients_of_this_process(ctx), ctx, self.data, self.strategy)
        )
        central = generator_for(self.seed, round_idx, "central", device=self.device)
        reduced = reduce_round(self.strategy, local, ctx, central)
        self._apply_server_step(reduced.delta)
        observed = hook_metrics(
            self.strategy.after_round(ctx, reduced.delta), self.strategy, "after_round"
        )
        self.strategy_metrics = reduced.metrics | observed
        self.rounds_completed = round_idx + 1
        stats = reduced.updates
        metrics = self._round_metrics(ctx, stats, time.perf_counter() - start)
        if self.accountant is not None:
            spent = self.strategy.round_privacy(ctx)
            spent.record_level.update(stats.dp_steps)
            self.accountant.record(spent)
            metrics.update(
                {k: v for k, v in self.accountant.report().items() if isinstance(v, float)}
            )
        # Every eval_every rounds and at the last planned round, so a short run has an accuracy.
        last = round_idx + 1 == int(self.trainer.max_steps)
        if (self.eval_every and (round_idx + 1) % self.eval_every == 0) or last:
            metrics.update({f"test/{k}": v for k, v in self.evaluate_global().items()})
        self.round_metrics = dict(metrics)
        self.log_dict(metrics, on_step=True, on_epoch=False, prog_bar=False, batch_size=1)

    def _stop_for_budget(self, ctx: RoundContext) -> bool:
        """Stops the run before a round that would exceed the target ε (what the round will
        spend is known before any client trains); refuses a target that cannot pay for the
        first round."""
        if self.accountant is None:
            return False
        planned = self.planned_privacy(ctx)
        if self.accountant.would_exceed(planned):
            if self.rounds_completed == 0:
                alone = self.accountant.report_alone(planned)
                raise BudgetError(
                    f"privacy.target_epsilon: {self.accountant.target_epsilon:g} cannot pay "
                    f"for the first round, which costs ε = {alone['privacy/epsilon']:.4g} "
                    f"({alone['privacy/guarantee']}); raise the target or add noise"
                )
            self.stopped_by_budget = True
            self.print(
                f"Stopping before round {ctx.round_idx}: it would exceed target ε = "
                f"{self.accountant.target_epsilon}"
            )
            self.trainer.should_stop = True
            return True
        return False

    def _apply_server_step(self, aggregate: torch.Tensor) -> None:
        """Applies the aggregate as the pseudo-gradient −Δ (Reddi et al. 2021, Alg. 1)."""
        optimizer = self.optimizers()
        assert not isinstance(optimizer, list)  # configure_optimizers returns one
        offset = 0
        for p in trainable_parameters(self.global_net):
            n = p.numel()
            p.grad = -aggregate[offset : offset + n].view_as(p).to(p.dtype)
            offset += n
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def _round_metrics(self, ctx: RoundContext, stats: RoundUpdates, seconds: float) -> dict:
        metrics: dict[str, float] = {
            "round/time_s": seconds,
            "round/cohort_size": float(len(ctx.cohort)),
            "round/index": float(ctx.round_idx),
        }
        if stats.losses:
            metrics["train/loss"] = sum(stats.losses) / len(stats.losses)
        for k, values in stats.metrics.items():
            metrics[f"clients/{k}"] = sum(values) / len(values)
        for k, v in self.strategy_metrics.items():
            metrics[f"strategy/{k}"] = float(v)
        return metrics

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

    def _eval_step(self, batch: Any) -> None:
        x, y = batch
        self._eval_outputs.append((self.global_net(x), y))

    def _eval_epoch_end(self, prefix: str) -> None:
        logits = torch.cat([o[0] for o in self._eval_outputs])
        y = torch.cat([o[1] for o in self._eval_outputs])
        self._eval_outputs.clear()
        metrics = classification_metrics(logits, y, self.num_classes)
        self.log_dict({f"{prefix}/{k}": v for k, v in metrics.items()}, batch_size=len(y))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    # -- end of training ---------------------------------------------------------------------
    def on_train_end(self) -> None:
        final = self.evaluate_global()
        summary = run_summary(
            rounds=self.rounds_completed,
            stopped_by_budget=self.stopped_by_budget,
            final=final,
            accountant=self.accountant,
            strategy_metrics=self.strategy_metrics,
        )
        log_dir = self.trainer.log_dir  # a collective under DDP: every rank asks
        if not self.trainer.is_global_zero:
            return
        write_run_files(summary, self.accountant, log_dir, self.loggers)
        print(summary_line(summary, final), flush=True)
