"""Vectorised cohorts: the local training of many clients at once, on a stacked model.

``VectorizedExecutor`` runs the local steps of a bucket of clients together on a
``client/stacked.py: StackedNet`` (the user's model with its parameter layers stacked over a
client axis, the clients folded into the batch axis): one forward and one backward per step for
every client of the bucket, for any model built from standard layers. Clients are sorted by
their number of steps and cut into buckets of at most ``max_clients``; at step t only the
clients that still have a step run (a suffix of the bucket), each batch padded to the widest of
the step and masked.

The semantics are the sequential loop's, through the same functions (``client/semantics.py``):
the same batch plan from the same ``(seed, round, client, "batches")`` generator, the same SGD
update (``torch.optim.sgd.sgd``), for DP-SGD clients the same per-example clip factors
(``privacy/mechanisms/clipping.py``), the same noisy mean (``client/dp_sgd.py: noisy_mean``) with
the same noise (``privacy/mechanisms/dp_sgd_noise.py: BucketNoise``: each client's ``(seed, round,
client, "dp_sgd")`` generator, or under ``client.dp_sgd.noise_rng: philox`` the bucket's noise of
every step in one counter-based draw), the same ``ClientUpdate`` and
DP-SGD event (``client/local_loop.py: client_update``). Like every executor it never sees the
strategy: it reads the clients' plans (``records.py: ClientPlan``), all of the round's at once
(references to weights the strategy holds anyway), and yields trained updates, which the round
hands to the strategy's ``process_update``. Updates agree with the sequential executor's up to
float rounding (tested).

It is an engine of the one local-training call (``client/local_loop.py:
LocalTrainer.train_many``, which ``VectorizedExecutor.run`` calls with it): the engine says
whether it can run the round's plans (``blocker``) and trains them (``train``); what it cannot
run identically goes to ``train_many``'s sequential loop with one WARNING line
(``vectorization_blocker``): a plan with a gradient hook or optimizer state, a client that
starts from its own weights or has its own local overrides; FedProx; Adam; ``client.precision:
bf16-mixed`` (the stacked layers are hand-written autograd Functions, some fusing the SGD step
into their backward, that autocast does not cast); a model that cannot be stacked
(``client/stacked.py: stack_blocker``: BatchNorm, LSTM projections, parameters in other layer
types) or whose stacked forward differs from its own (``StackedNet.check``).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.dp_sgd import per_sample_losses
from fl_lightning.client.local_loop import (
    ClientStart,
    LocalTrainer,
    client_update,
    name_failed_clients,
)
from fl_lightning.client.module import ClientModule
from fl_lightning.client.semantics import batch_plan, sgd_step_
from fl_lightning.client.stacked import StackedNet, stack_blocker
from fl_lightning.client.stacked_layers import LowRankSteps
from fl_lightning.privacy.accounting.budget import dp_sgd_rate
from fl_lightning.privacy.mechanisms.dp_sgd_noise import BucketNoise
from fl_lightning.records import ClientPlan, ClientUpdate, RoundContext
from fl_lightning.server.executor import ClientPlans, client_start
from fl_lightning.utils.rng import generator_for

if TYPE_CHECKING:
    from fl_lightning.callbacks import ClientHooks
    from fl_lightning.data.datamodule import FederatedDataModule

log = logging.getLogger(__name__)


def model_blocker(net: torch.nn.Module, *, dp: bool = False) -> str | None:
    """Why ``net`` cannot be trained as a stack of clients (None when it can)."""
    return stack_blocker(net, dp=dp)


def precision_blocker(cfg: LocalTrainingConfig) -> str | None:
    """Why ``cfg.precision`` cannot be vectorised (None when it can): the stacked layers are
    hand-written autograd Functions (``client/stacked_layers.py``, ``stacked_recurrent.py``),
    some with the SGD step fused into their backward; autocast does not cast their inputs, so
    ``bf16-mixed`` runs in the sequential loop only."""
    if cfg.precision != "32":
        return f"client.precision {cfg.precision!r}: only the sequential loop runs mixed precision"
    return None


def vectorization_blocker(
    net: torch.nn.Module,
    plans: Mapping[int, ClientPlan],
    ctx: RoundContext,
    cfg: LocalTrainingConfig,
) -> str | None:
    """Why this round cannot be vectorised (None when it can): the model, the precision, a
    client plan the stacked loop does not run (gradient hook, optimizer state, own start
    weights, own local overrides), FedProx or Adam."""
    reason = model_blocker(net, dp=cfg.dp_sgd is not None) or precision_blocker(cfg)
    if reason:
        return reason
    reason = next((r for r in (plan_blocker(p, ctx) for p in plans.values()) if r), None)
    if reason:
        return reason
    if len({p.local for p in plans.values()}) > 1:
        return "clients of the round have their own local-training overrides"
    if cfg.prox_mu > 0:
        return "client.prox_mu > 0 (FedProx) is only implemented in the sequential loop"
    if cfg.optimizer != "sgd":
        return f"client.optimizer {cfg.optimizer!r}: only SGD is vectorised"
    return None


def plan_blocker(plan: ClientPlan, ctx: RoundContext) -> str | None:
    """Why one client's plan cannot be stacked (None when it can): the stacked loop starts
    every client from the global model with a fresh SGD optimizer and no gradient hook."""
    if plan.grad_hook is not None:
        return "the strategy adjusts local gradients (a gradient hook in the client plan)"
    if plan.optimizer_state is not None or plan.save_optimizer_state is not None:
        return "the strategy keeps the clients' optimizer state across rounds"
    if plan.start_params is not ctx.global_params:
        return "the strategy starts clients from their own weights"
    return None


def available_memory(device: torch.device) -> int:
    """Bytes free for new tensors on ``device`` now (Linux ``MemAvailable`` on the CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


class VectorizedExecutor:
    """Trains a round's clients in stacked buckets; same updates as ``SequentialExecutor``.

    Args:
        trainer: the process's LocalTrainer (its net, loss and config; also the fallback).
        max_clients: most clients per bucket.
        memory_budget: bytes a bucket may use (weights, momentum, gradients and the activations
            autograd saves, per client; ``bucket_size``). None: half of the memory available
            now (``MemAvailable`` on the CPU, ``torch.cuda.mem_get_info`` on a GPU).
        weights_bytes: on the CPU, most bytes of stacked weights per bucket. Each step streams
            every client's weights several times, so a bucket whose weights stay near the
            caches is faster (measured: MNIST CNN, cohort 100, buckets of 10 clients 1.7x
            faster than one bucket of 100; 66 MB of weights vs 660 MB).
        low_rank_ratio: with plain SGD, a Linear layer keeps the bucket's steps as low-rank
            factors (``client/stacked.py: LowRankSteps``) when rows × (in + out) ≤ this ×
            in × out (its history of inputs and output gradients is small); 0 turns it off.
        dp_cpu_max_clients: on the CPU, most clients per bucket of DP-SGD clients whose batches
            are Poisson samples (rate B/n < 1). A stacked step runs every client at the width
            of the bucket's largest Poisson batch, so the padding grows with the bucket (with
            q = 1/6 and 60 examples the largest of K batches averages 11.6 (K = 2), 13.0
            (K = 4) and 14.9 (K = 12) against a mean of 10), while the operators a step issues
            do not: a bucket of K clients issues 1/K of a client's share of them. The bucket
            is therefore as large as ``dp_cpu_bucket_flops`` of training work per example
            allows (``dp_bucket_cap``), at least 2 and at most this. Measured
            (benchmarks/results/cohort_speed.md, "Smaller DP-SGD buckets on the CPU"): for the
            1.66M-parameter MNIST CNN buckets of 2 are 1.06–1.10× buckets of 4 and about 1.3×
            buckets of 12 (padding dominates); benchmarks/results/round_operators.md for the
            sweep demo's 54k-parameter CNN (operators dominate).
        dp_cpu_bucket_flops: a DP-SGD bucket on the CPU holds ``dp_cpu_bucket_flops // F``
            clients, F the training FLOPs of one example (3 × its forward's, counted by
            ``torch.utils.flop_counter``): 2 for the 1.66M-parameter MNIST CNN (F = 74M),
            16 for the sweep demo's CNN (F = 5M).
    """

    def __init__(
        self,
        trainer: LocalTrainer,
        *,
        max_clients: int = 64,
        memory_budget: int | None = None,
        weights_bytes: int = 80 * 2**20,
        low_rank_ratio: float = 0.5,
        dp_cpu_max_clients: int = 16,
        dp_cpu_bucket_flops: int = 2**27,
    ) -> None:
        self.local_trainer = trainer
        self.hooks: ClientHooks | None = None
        self.max_clients = max_clients
        self.memory_budget = memory_budget
        self.weights_bytes = weights_bytes
        self.low_rank_ratio = low_rank_ratio
        self.dp_cpu_max_clients = dp_cpu_max_clients
        self.dp_cpu_bucket_flops = dp_cpu_bucket_flops
        self._flops_per_example: int | None = None
        self.last_bucket_size: int | None = None
        self.last_fallback_reason: str | None = None
        self.last_path: str | None = None  # "stacked" or "sequential" (last round)
        self.last_low_rank: list[str] = []  # Linear weights kept as factors (last bucket)
        self._logged: set[str] = set()
        self._stacked: dict[bool, StackedNet | str] = {}  # by dp: the net, or why not
        self._round_cfg = trainer.config  # the round's config, fixed by blocker
        net = trainer.client.net
        self.names = [n for n, p in net.named_parameters() if p.requires_grad]
        self.params = [p for p in net.parameters() if p.requires_grad]
        self._cross_entropy = type(trainer.client).loss is ClientModule.loss

    # -- public ------------------------------------------------------------------------------
    def run(
        self,
        clients: Sequence[int],
        plans: ClientPlans,
        ctx: RoundContext,
        data: FederatedDataModule,
    ) -> Iterator[ClientUpdate]:
        """``LocalTrainer.train_many`` with this stacked engine: the round's clients trained
        together where the engine can (:meth:`blocker`), else one at a time (``last_path``
        and ``last_fallback_reason`` say which ran and why; the reason is logged once)."""
        yield from self.local_trainer.train_many(
            clients, plans, ctx, data, engine=self, on_start=client_start(self.hooks, ctx)
        )

    # -- the engine (client/local_loop.py: CohortEngine) --------------------------------------
    def blocker(
        self,
        clients: Sequence[int],
        plans: Mapping[int, ClientPlan],
        ctx: RoundContext,
        data: FederatedDataModule,
    ) -> str | None:
        """Why this round's plans cannot be stacked (``vectorization_blocker``, then the model
        stacked and checked on a real batch); None when they can. Records and logs the reason
        (once per reason)."""
        first = plans[clients[0]].local.as_dict() if clients else ctx.client_config
        cfg = self.local_trainer.config.with_overrides(first)
        reason = vectorization_blocker(self.local_trainer.client.net, plans, ctx, cfg)
        if reason is None and clients:
            stacked = self._stacked_net(cfg.dp_sgd is not None, data, clients[0], ctx)
            reason = stacked if isinstance(stacked, str) else None
        self.last_fallback_reason = reason
        self.last_path = "sequential" if reason is not None else "stacked"
        if reason is not None and reason not in self._logged:
            self._logged.add(reason)
            log.warning("executor: falling back to sequential training: %s", reason)
        self._round_cfg = cfg
        return reason

    def train(
        self,
        clients: Sequence[int],
        plans: Mapping[int, ClientPlan],
        ctx: RoundContext,
        data: FederatedDataModule,
        on_start: ClientStart | None,
    ) -> Iterator[ClientUpdate]:
        """The clients in buckets on the stacked model (the plans passed :meth:`blocker`:
        every client starts from the global model with a fresh SGD optimizer and the round's
        overrides); updates in the order of ``clients``."""
        if not clients:
            return
        cfg = self._round_cfg
        stacked = self._stacked[cfg.dp_sgd is not None]
        assert not isinstance(stacked, str), "train runs only after blocker said it can"
        device = data.client_data(clients[0])[0].device
        sizes = data.client_sizes()
        batch_plans = {}
        for cid in clients:
            gen = generator_for(ctx.seed, ctx.round_idx, cid, "batches", device=device)
            batch_plans[cid] = batch_plan(cfg, int(sizes[cid]), gen, device)
        # by steps (a bucket's clients drop out as they finish); DP-SGD clients then by their
        # round's examples: a stacked step pads every client to the bucket's widest batch, and
        # clients of similar totals have Poisson widths closer to each other's (for 2 steps,
        # half the variance). Non-private buckets keep the cohort's order (their numbers).
        if cfg.dp_sgd is None:
            ordered = sorted(clients, key=lambda c: len(batch_plans[c]))
        else:
            ordered = sorted(
                clients, key=lambda c: (len(batch_plans[c]), sum(map(len, batch_plans[c])))
            )
        updates: dict[int, ClientUpdate] = {}
        size = self.bucket_size(cfg, data, ordered[0])
        self.last_bucket_size = min(size, len(ordered))
        done = 0  # clients[:done] were handed on, in the caller's order
        for lo in range(0, len(ordered), size):
            bucket = ordered[lo : lo + size]
            if on_start is not None:  # a bucket trains together: every client starts now
                for cid in bucket:
                    on_start(cid)
            try:
                for update in self._train_bucket(stacked, bucket, batch_plans, ctx, data, cfg):
                    updates[update.client_id] = update
            except Exception as err:
                name_failed_clients(err, bucket, ctx.round_idx)
                raise
            # hand on every client whose predecessors are done (all of the bucket when the
            # clients take equal steps), so that only out-of-order updates are held
            while done < len(clients) and clients[done] in updates:
                yield updates.pop(clients[done])
                done += 1

    def client_bytes(self, cfg: LocalTrainingConfig, x: torch.Tensor) -> int:
        """Memory one client of a bucket needs during a step: its weights, gradients (momentum
        buffers, per-example gradients of DP-SGD) and the activations autograd saves for a
        batch of ``B`` examples (measured on one example with ``saved_tensors_hooks``)."""
        net = self.local_trainer.client.net
        weights = {p.data_ptr() for p in net.parameters()}
        saved = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal saved
            if t.data_ptr() not in weights:
                saved += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            net(x[:1]).float().sum()
        param_bytes = sum(p.numel() * p.element_size() for p in self.params)
        copies = 2 + (cfg.momentum > 0) + (cfg.dp_sgd is not None)
        # DP-SGD instantiates per-example gradients of convolutions and norms (not Linear)
        per_example = 0
        if cfg.dp_sgd is not None:
            per_example = sum(
                p.numel() * p.element_size()
                for m in net.modules()
                if not isinstance(m, torch.nn.Linear)
                for p in m.parameters(recurse=False)
                if p.requires_grad
            )
        return copies * param_bytes + cfg.batch_size * (2 * saved + per_example)

    def bucket_size(self, cfg: LocalTrainingConfig, data: FederatedDataModule, cid: int) -> int:
        """Clients per bucket: ``max_clients``, fewer if the bucket's weights would exceed
        ``weights_bytes`` (CPU) or its memory ``memory_budget``, and at most
        ``dp_cpu_max_clients`` for DP-SGD clients on the CPU whose batches are Poisson samples
        (rate B/n < 1; at rate 1 every batch is the client's whole data and nothing is padded
        for the sampling)."""
        budget = self.memory_budget
        x = data.client_data(cid)[0]
        if budget is None:
            budget = available_memory(x.device) // 2
        per_client = self.client_bytes(cfg, x[:1])
        size = min(self.max_clients, budget // max(per_client, 1))
        if x.device.type == "cpu":
            param_bytes = sum(p.numel() * p.element_size() for p in self.params)
            size = min(size, self.weights_bytes // max(param_bytes, 1))
            n = len(x)
            if cfg.dp_sgd is not None and dp_sgd_rate(batch_size=cfg.batch_size, size=n) < 1:
                size = min(size, self.dp_bucket_cap(x[:1]))  # Poisson batches: padding
        return max(1, size)

    def dp_bucket_cap(self, x: torch.Tensor) -> int:
        """Most DP-SGD clients with Poisson batches per bucket on the CPU: ``dp_cpu_bucket_flops``
        ÷ the training FLOPs of one example ``x`` (counted once), clamped to
        [min(2, dp_cpu_max_clients), dp_cpu_max_clients] (the class docstring)."""
        if self._flops_per_example is None:
            from torch.utils.flop_counter import FlopCounterMode

            net = self.local_trainer.client.net
            # forward FLOPs × 3 (forward, input and weight gradients); no grad, and the global
            # generator (dropout) left as it was
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), torch.random.fork_rng(devices=[]), counter:
                net(x)
            self._flops_per_example = max(1, 3 * counter.get_total_flops())
        cap = self.dp_cpu_bucket_flops // self._flops_per_example
        return int(max(min(2, self.dp_cpu_max_clients), min(cap, self.dp_cpu_max_clients)))

    # -- internals ---------------------------------------------------------------------------
    def _stacked_net(
        self, dp: bool, data: FederatedDataModule, cid: int, ctx: RoundContext
    ) -> StackedNet | str:
        """The stacked model (built and checked on the first real batch), or why not."""
        if dp not in self._stacked:
            try:
                stacked = StackedNet(self.local_trainer.client.net, self.names, dp=dp)
                x = data.client_data(cid)[0][:2]
                stacked.check(self._weights(ctx, 1, x.device), x)
                self._stacked[dp] = stacked
            except (ValueError, RuntimeError, NotImplementedError) as err:
                self._stacked[dp] = str(err)
        return self._stacked[dp]

    def _weights(self, ctx: RoundContext, k: int, device: torch.device) -> dict[str, torch.Tensor]:
        """(k, *shape) copies of the global weights, one per client."""
        out, offset = {}, 0
        for n, p in zip(self.names, self.params):
            size = p.numel()
            view = ctx.global_params[offset : offset + size].view_as(p).to(device)
            out[n] = view.unsqueeze(0).repeat(k, *[1] * p.dim())
            offset += size
        return out

    def _losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._cross_entropy:  # the ClientModule's loss: no per-example vmap needed
            return F.cross_entropy(out, y, reduction="none")
        return per_sample_losses(self.local_trainer.client.loss, out, y)

    def _noisy_means(
        self, sums: list[torch.Tensor], noise: torch.Tensor, expected: torch.Tensor
    ) -> list[torch.Tensor]:
        """(Σ clip_C(g) + N(0, σ²C² I)) / (q·n) of every active client at once (Abadi et al.
        2016, Alg. 1; ``client/dp_sgd.py: noisy_mean``, the same arithmetic element by
        element): ``sums`` (active, *shape) per parameter, ``noise`` (active, P) and
        ``expected`` (active, 1); returns views of one (active, P) buffer, by parameter."""
        active = noise.shape[0]
        flat = noise + torch.cat([s.reshape(active, -1) for s in sums], dim=1)
        flat.div_(expected)
        parts = flat.split([p.numel() for p in self.params], dim=1)
        return [part.view(active, *p.shape) for part, p in zip(parts, self.params)]

    def _train_bucket(
        self,
        stacked: StackedNet,
        bucket: list[int],
        plans: dict[int, list[torch.Tensor]],
        ctx: RoundContext,
        data: FederatedDataModule,
        cfg: LocalTrainingConfig,
    ) -> list[ClientUpdate]:
        # the bucket's examples, client after client, read through the one data accessor
        # (``client_data``, as the sequential loop reads them); a step gathers its rows by index
        own = [data.client_data(c) for c in bucket]
        x_all, y_all = torch.cat([x for x, _ in own]), torch.cat([y for _, y in own])
        device = x_all.device
        k = len(bucket)
        steps = [len(plans[c]) for c in bucket]  # nondecreasing
        sizes = [len(y) for _, y in own]
        offsets = [0, *itertools.accumulate(sizes)][:-1]
        batches = [
            [b + offsets[j] for b in plans[c]] for j, c in enumerate(bucket)
        ]  # rows of the bucket's examples at every step
        # every client's weights in one (K, P) buffer, per-parameter views into it; at the end
        # it becomes the deltas in place (no second K × P copy)
        flat = ctx.global_params.to(device).unsqueeze(0).repeat(k, 1)
        weights, offset = {}, 0
        for n, p in zip(self.names, self.params):
            weights[n] = flat[:, offset : offset + p.numel()].view(k, *p.shape)
            offset += p.numel()
        buffers: list[torch.Tensor | None] = [None] * len(self.names)
        dp = cfg.dp_sgd
        if dp is not None:
            assert dp.noise_multiplier is not None, "noise multiplier must be calibrated first"
            expected = torch.tensor(
                [dp_sgd_rate(batch_size=cfg.batch_size, size=n) * n for n in sizes],
                dtype=flat.dtype,
                device=device,
            ).view(k, 1)
            noise = BucketNoise(
                dp.noise_rng,
                seed=ctx.seed,
                round_idx=ctx.round_idx,
                clients=bucket,
                shapes=[p.shape for p in self.params],
                std=dp.noise_multiplier * dp.max_grad_norm,
                steps=max(steps),
                device=device,
                dtype=flat.dtype,
            )
        losses = torch.full((max(steps), k), float("nan"), device=device)
        # plain SGD: the stacked Linear layers fuse the update into their backward pass
        fused = dp is None and cfg.momentum == 0 and cfg.weight_decay == 0
        low_rank = None
        if fused and self.low_rank_ratio > 0:  # every client starts from the global weights
            start = ctx.global_params.to(device)
            views, offset = {}, 0
            for n, p in zip(self.names, self.params):
                if p.dim() == 2:
                    views[n] = start[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            examples = max(sum(len(b) for b in plan) for plan in batches)
            low_rank = LowRankSteps(
                views, cfg.lr, clients=k, examples=examples, ratio=self.low_rank_ratio
            )
        stacked.train()
        for t in range(max(steps)):
            j0 = bisect.bisect_right(steps, t)  # clients [j0:] still have step t
            active = k - j0
            width = max(len(batches[j][t]) for j in range(j0, k))
            gather = torch.zeros(max(width, 1), active, dtype=torch.long, device=device)
            mask = torch.zeros(max(width, 1), active, device=device)
            for j in range(j0, k):
                b = batches[j][t]
                gather[: len(b), j - j0] = b
                mask[: len(b), j - j0] = 1.0
            gather, mask = gather[:width].reshape(-1), mask[:width].reshape(-1)
            count = mask.view(-1, active).sum(0)
            params = {n: w[j0:] for n, w in weights.items()}
            x, y = x_all[gather], y_all[gather]
            if dp is None:
                # ``.data``, not ``.detach()``: every leaf gets its own version counter, so the
                # fused in-place step of one layer's weights (a view of the shared buffer) does
                # not invalidate what autograd saved from another layer's weights
                leaves = {n: p.data.requires_grad_(True) for n, p in params.items()}
                out = stacked.forward(
                    leaves, x, fused_lr=cfg.lr if fused else None, low_rank=low_rank
                )
                per = self._losses(out, y) * mask
                client_loss = per.view(-1, active).sum(0) / count.clamp(min=1)
                grads = list(
                    torch.autograd.grad(
                        client_loss.sum(), list(leaves.values()), allow_unused=fused
                    )
                )
            else:
                if width > 0:
                    grads, per = stacked.clipped_sums(
                        params,
                        x,
                        lambda out, y=y, mask=mask: self._losses(out, y) * mask,
                        n=width,
                        max_grad_norm=dp.max_grad_norm,
                    )
                    client_loss = per.view(-1, active).sum(0) / count.clamp(min=1)
                else:  # every active client drew an empty Poisson batch: noise only
                    grads = [torch.zeros_like(p) for p in params.values()]
                    client_loss = torch.zeros(active, device=device)
                grads = self._noisy_means(grads, noise.at(t, j0), expected[j0:])
            losses[t, j0:] = torch.where(count > 0, client_loss.detach(), torch.nan)
            if fused:  # the Linear layers took their step in the backward pass
                todo = [i for i, g in enumerate(grads) if g is not None]
                sgd_step_(
                    [list(params.values())[i] for i in todo],
                    [grads[i] for i in todo],
                    [None] * len(todo),
                    cfg,
                )
            else:
                sgd_step_(
                    list(params.values()),
                    grads,
                    buffers if t == 0 else [b[j0:] if b is not None else None for b in buffers],
                    cfg,
                )
        if low_rank is not None:
            low_rank.finish_(weights)
            self.last_low_rank = [key for key, used in low_rank.use.items() if used]
        deltas = flat.sub_(ctx.global_params.to(device))
        loss_cpu = losses.cpu()  # one transfer for the bucket
        return [
            client_update(
                cid,
                deltas[j],
                num_examples=sizes[j],
                step_losses=loss_cpu[: steps[j], j].tolist(),
                steps=steps[j],
                cfg=cfg,
                round_idx=ctx.round_idx,
            )
            for j, cid in enumerate(bucket)
        ]
