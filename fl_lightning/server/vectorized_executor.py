"""Vectorised cohorts: many clients' local SGD at once with ``torch.func``.

``VectorizedExecutor`` stacks the cohort's weights along a leading client axis and runs every
local step of all clients of a bucket as one ``vmap(grad(functional_call(net, ...)))`` call
(for DP-SGD a nested ``vmap`` gives per-client, per-example gradients). Clients are sorted by
dataset size and cut into buckets of at most ``max_clients`` clients; inside a bucket the batches
are padded to the largest and masked, and a client that has run all its steps is frozen (its
learning-rate flag is 0, its momentum buffer kept).

It reproduces the sequential executor (same batches from the same (seed, round, client)
generators, same DP noise drawn parameter by parameter from the client's ``dp_sgd`` generator,
same SGD update with momentum and weight decay, same client-side ``process_update``) up to
float rounding. What it cannot run identically is handed to the ``SequentialExecutor`` with a
logged reason (``vectorization_blocker``): a strategy that adjusts local gradients, keeps
client optimizer state or starts clients from their own weights; FedProx; Adam; a model with
buffers (BatchNorm statistics), dropout or recurrent layers.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.dp_sgd import per_sample_losses
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.privacy.budget import dp_sgd_event, dp_sgd_rate
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.server.executor import SequentialExecutor
from fl_lightning.server.stacked_chain import StackedChain, build_chain
from fl_lightning.strategies.base import Strategy
from fl_lightning.utils.rng import generator_for

if TYPE_CHECKING:
    from fl_lightning.data.datamodule import FederatedDataModule

log = logging.getLogger(__name__)

_STATEFUL = (nn.Dropout, nn.modules.dropout._DropoutNd, nn.RNNBase)


def model_blocker(net: nn.Module) -> str | None:
    """Why ``net`` cannot be trained as a vmapped stack of clients (None when it can)."""
    if any(True for _ in net.buffers()):
        return "the model has buffers (e.g. BatchNorm statistics) that vmap would not update"
    for m in net.modules():
        if isinstance(m, _STATEFUL) or type(m).__name__ in ("DPLSTM", "DPGRU", "DPRNN"):
            return f"the model contains {type(m).__name__} (random or recurrent state)"
    return None


def vectorization_blocker(
    net: nn.Module, strategy: Strategy, cfg: LocalTrainingConfig
) -> str | None:
    """Why this round cannot be vectorised (None when it can)."""
    reason = model_blocker(net)
    if reason:
        return reason
    cls = type(strategy)
    for hook in ("adjust_local_gradients", "client_optimizer_state", "client_start_params"):
        if getattr(cls, hook) is not getattr(Strategy, hook):
            return f"{cls.__name__} overrides {hook} (per-client gradient or optimizer hooks)"
    if strategy.persists_client_optimizer_state:
        return f"{cls.__name__} persists client optimizer state"
    if cfg.prox_mu > 0:
        return "client.prox_mu > 0 (FedProx) is only implemented in the sequential loop"
    if cfg.optimizer != "sgd":
        return f"client.optimizer {cfg.optimizer!r}: only SGD is vectorised"
    return None


def _without_hooks(net: nn.Module) -> nn.Module:
    """A copy of ``net`` without the Opacus engines' hooks (they break ``torch.func``); only
    its structure is used, weights are passed to ``functional_call``."""
    clone = copy.deepcopy(net)
    for m in clone.modules():
        for attr in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
        ):
            getattr(m, attr).clear()
    return clone


class VectorizedExecutor:
    """Trains a round's clients in vmapped buckets; same updates as ``SequentialExecutor``.

    Args:
        trainer: the process's LocalTrainer (its net, loss and config; also the fallback).
        max_clients: most clients per bucket (bounds memory: weights × clients).
    """

    def __init__(self, trainer: LocalTrainer, *, max_clients: int = 64) -> None:
        from torch.func import functional_call, grad, vmap

        self.local_trainer = trainer
        self.sequential = SequentialExecutor(trainer)
        self.hooks = None  # fl_lightning.callbacks.ClientHooks, set by the FederatedModule
        self.max_clients = max_clients
        self.last_fallback_reason: str | None = None
        self.last_path: str | None = None  # "chain", "vmap" or "sequential" (last round)
        self._logged: set[str] = set()
        self._buffers: dict[str, dict[str, torch.Tensor]] = {}
        net = _without_hooks(trainer.client.net)
        loss_fn = trainer.client.loss
        self.names = [n for n, p in net.named_parameters() if p.requires_grad]
        self.params = [p for p in trainer.client.net.parameters() if p.requires_grad]

        cross_entropy = type(trainer.client).loss is ClientModule.loss

        def batch_loss(params, x, y, m):
            out = functional_call(net, params, (x,))
            if cross_entropy:  # the ClientModule's loss: skip the per-example vmap
                losses = F.cross_entropy(out, y, reduction="none")
            else:
                losses = per_sample_losses(loss_fn, out, y)
            count = m.sum()
            loss = (losses * m).sum() / count.clamp(min=1)
            return loss, loss

        def sample_loss(params, x, y):
            loss = loss_fn(functional_call(net, params, (x.unsqueeze(0),)), y.unsqueeze(0))
            return loss, loss

        # Fast path (no DP): hand-written stacked forward/backward of chain-shaped models.
        self.chain: StackedChain | None = None
        self.chain_blocker: str | None = "client.loss is not ClientModule's cross-entropy"
        if cross_entropy:
            self.chain, self.chain_blocker = build_chain(net, self.names)
        if self.chain_blocker is not None:
            log.info("executor: vmap path (no stacked chain: %s)", self.chain_blocker)
        # client axis over (params, x, y, mask)
        self._client_grads = vmap(grad(batch_loss, has_aux=True))
        # client axis over (params, x, y); example axis over (x, y)
        per_example = vmap(grad(sample_loss, has_aux=True), in_dims=(None, 0, 0))
        self._client_example_grads = vmap(per_example)

    # -- public ------------------------------------------------------------------------------
    def run(
        self,
        clients: Sequence[int],
        ctx: RoundContext,
        data: FederatedDataModule,
        strategy: Strategy,
    ) -> Iterator[ClientUpdate]:
        cfg = self.local_trainer.config.with_overrides(ctx.client_config)
        reason = vectorization_blocker(self.local_trainer.client.net, strategy, cfg)
        self.last_fallback_reason = reason
        if reason is not None:
            if reason not in self._logged:
                self._logged.add(reason)
                log.warning("executor: falling back to sequential training: %s", reason)
            self.last_path = "sequential"
            self.sequential.hooks = self.hooks
            yield from self.sequential.run(clients, ctx, data, strategy)
            return
        sizes = {cid: len(data.client_indices[cid]) for cid in clients}
        ordered = sorted(clients, key=lambda c: sizes[c])
        updates: dict[int, ClientUpdate] = {}
        hooks = self.hooks
        for lo in range(0, len(ordered), self.max_clients):
            bucket = ordered[lo : lo + self.max_clients]
            if hooks is not None:  # a bucket trains together: every client starts now
                for cid in bucket:
                    hooks.start(cid, ctx)
            for update in self._train_bucket(bucket, ctx, data, cfg):
                updates[update.client_id] = update
        for cid in clients:
            g = generator_for(ctx.seed, ctx.round_idx, cid, "client_mechanism")
            update = strategy.process_update(updates[cid], ctx, generator=g)
            if hooks is not None:
                hooks.end(cid, ctx, update)
            yield update

    # -- internals ---------------------------------------------------------------------------
    def _reused(self, purpose: str, k: int, device: torch.device) -> dict[str, torch.Tensor]:
        """(k, *shape) buffers per parameter, kept across rounds (re-allocated only for a larger
        bucket or another device), so that a round does not page in clients × weights of fresh
        memory (measured: ~0.1 s a round for 10 MNIST CNNs)."""
        bufs = self._buffers.get(purpose)
        first = next(iter(bufs.values())) if bufs else None
        if first is None or first.shape[0] < k or first.device != torch.device(device):
            bufs = {
                n: torch.empty(k, *p.shape, dtype=p.dtype, device=device)
                for n, p in zip(self.names, self.params)
            }
            self._buffers[purpose] = bufs
        return {n: b[:k] for n, b in bufs.items()}

    @staticmethod
    def _batches(cfg: LocalTrainingConfig, n: int, gen: torch.Generator, device) -> list:
        """The local loop's batch indices, drawn exactly as ``LocalTrainer.train`` does."""
        out = []
        if cfg.dp_sgd is not None:
            rate = dp_sgd_rate(batch_size=cfg.batch_size, size=n)
            for _ in range(cfg.steps_for(n)):
                mask = torch.rand(n, generator=gen, device=device) < rate
                out.append(mask.nonzero().squeeze(1))
            return out
        order = torch.empty(0, dtype=torch.long, device=device)
        cursor = 0
        for _ in range(cfg.steps_for(n)):
            if cursor >= len(order):
                order = torch.randperm(n, generator=gen, device=device)
                cursor = 0
            out.append(order[cursor : cursor + cfg.batch_size])
            cursor += cfg.batch_size
        return out

    def _train_bucket(
        self,
        bucket: list[int],
        ctx: RoundContext,
        data: FederatedDataModule,
        cfg: LocalTrainingConfig,
    ) -> list[ClientUpdate]:
        x_all, y_all = data.train.x, data.train.y
        device = x_all.device
        k = len(bucket)
        batches, steps, sizes = [], [], []
        for cid in bucket:
            index = data.client_indices[cid]
            gen = generator_for(ctx.seed, ctx.round_idx, cid, "batches", device=device)
            local = self._batches(cfg, len(index), gen, device)
            batches.append([index[b] for b in local])
            steps.append(len(local))
            sizes.append(len(index))
        n_steps = max(steps)
        width = max(1, max(len(b) for client in batches for b in client))
        # One gather for the whole bucket: (steps, clients, width) indices and masks.
        gather = torch.zeros(n_steps, k, width, dtype=torch.long, device=device)
        mask = torch.zeros(n_steps, k, width, device=device)
        for j, client in enumerate(batches):
            for t, b in enumerate(client):
                gather[t, j, : len(b)] = b
                mask[t, j, : len(b)] = 1.0
        xs, ys = x_all[gather], y_all[gather]
        active = torch.arange(n_steps, device=device)[:, None] < torch.tensor(steps, device=device)
        active = active.float()  # (steps, clients)

        stacked = self._reused("weights", k, device)
        offset = 0
        for n, p in zip(self.names, self.params):
            size = p.numel()
            view = ctx.global_params[offset : offset + size].view_as(p)
            stacked[n].copy_(view.unsqueeze(0).expand_as(stacked[n]))
            offset += size
        momentum_buf: dict[str, torch.Tensor] | None = None
        dp = cfg.dp_sgd
        if dp is not None:
            from opacus.optimizers.optimizer import _generate_noise

            assert dp.noise_multiplier is not None, "noise multiplier must be calibrated first"
            rates = [dp_sgd_rate(batch_size=cfg.batch_size, size=n) for n in sizes]
            expected = torch.tensor([r * n for r, n in zip(rates, sizes)], device=device)
            noise_gens = [generator_for(ctx.seed, ctx.round_idx, c, "dp_sgd") for c in bucket]
            std = dp.noise_multiplier * dp.max_grad_norm
        losses = torch.empty(n_steps, k, device=device)
        chain = self.chain if dp is None else None
        self.last_path = "chain" if chain is not None else "vmap"
        fused = cfg.momentum == 0 and cfg.weight_decay == 0
        grad_buf = None
        if chain is not None and not fused:
            grad_buf = self._reused("grads", k, device)
        for t in range(n_steps):
            x, y, m = xs[t], ys[t], mask[t]
            if chain is not None:
                # plain SGD: the chain applies the step in place (frozen clients have zero
                # gradients); otherwise it writes gradients for the momentum/decay step below
                loss = chain.step(stacked, x, y, m, lr=cfg.lr, grads=grad_buf)
                losses[t] = torch.where(m.sum(1) > 0, loss, torch.nan)
                if fused:
                    continue
                grads = dict(grad_buf)
            elif dp is None:
                grads, loss = self._client_grads(stacked, x, y, m)
                losses[t] = torch.where(m.sum(1) > 0, loss, torch.nan)
            else:
                per_ex, loss = self._client_example_grads(stacked, x, y)
                norms = torch.stack(
                    [per_ex[n].reshape(k, width, -1).norm(2, dim=2) for n in self.names], dim=2
                ).norm(2, dim=2)
                factors = (dp.max_grad_norm / (norms + 1e-6)).clamp(max=1.0) * m
                count = m.sum(1)
                losses[t] = torch.where(
                    count > 0, (loss * m).sum(1) / count.clamp(min=1), torch.nan
                )
                grads = {}
                for n in self.names:
                    summed = torch.einsum("kb,kb...->k...", factors, per_ex[n])
                    grads[n] = summed
                for j in range(k):
                    if t >= steps[j]:
                        continue
                    for n in self.names:
                        noise = _generate_noise(
                            std=std, reference=grads[n][j], generator=noise_gens[j]
                        )
                        grads[n][j].add_(noise)
                for n in self.names:
                    grads[n] = grads[n] / expected.view(-1, *[1] * (grads[n].dim() - 1))
            act = active[t]
            momentum_buf = self._sgd_step(stacked, grads, act, cfg, momentum_buf)

        flat = torch.cat([stacked[n].reshape(k, -1) for n in self.names], dim=1)
        deltas = flat.sub_(ctx.global_params)
        loss_cpu = losses.cpu()
        out = []
        for j, cid in enumerate(bucket):
            own = loss_cpu[: steps[j], j]
            own = own[~torch.isnan(own)]
            dp_steps = []
            if dp is not None:
                # The same event rule as the sequential loop (privacy/budget.py).
                size = int(sizes[j])
                dp_steps.append(
                    dp_sgd_event(
                        dp.noise_multiplier, batch_size=cfg.batch_size, size=size, steps=steps[j]
                    )
                )
            out.append(
                ClientUpdate(
                    client_id=cid,
                    delta=deltas[j],
                    num_examples=sizes[j],
                    loss=float(own.mean()) if len(own) else float("nan"),
                    metrics={"local_steps": float(steps[j])},
                    dp_steps=dp_steps,
                    base_round=ctx.round_idx,
                )
            )
        return out

    def _sgd_step(
        self,
        stacked: dict[str, torch.Tensor],
        grads: dict[str, torch.Tensor],
        active: torch.Tensor,
        cfg: LocalTrainingConfig,
        momentum_buf: dict[str, torch.Tensor] | None,
    ) -> dict[str, torch.Tensor] | None:
        """``torch.optim.SGD.step`` (weight decay, momentum, no dampening) for every client whose
        flag in ``active`` is 1; clients past their last step keep weights and buffer."""
        first = momentum_buf is None and cfg.momentum > 0
        if first:
            momentum_buf = {}
        everyone = bool(active.all())
        for n in self.names:
            p, g = stacked[n], grads[n]
            shape = (-1, *[1] * (p.dim() - 1))
            flag = active.view(shape)
            d_p = g.add_(p, alpha=cfg.weight_decay) if cfg.weight_decay else g
            if cfg.momentum > 0:
                assert momentum_buf is not None
                if first:
                    momentum_buf[n] = d_p.clone()
                elif everyone:
                    momentum_buf[n].mul_(cfg.momentum).add_(d_p)
                else:
                    buf = momentum_buf[n]
                    momentum_buf[n] = torch.where(flag > 0, buf * cfg.momentum + d_p, buf)
                d_p = momentum_buf[n]
            if everyone:
                p.add_(d_p, alpha=-cfg.lr)
            else:
                p.addcmul_(d_p, flag, value=-cfg.lr)
        return momentum_buf
