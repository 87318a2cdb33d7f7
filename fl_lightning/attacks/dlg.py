"""Gradient inversion: DLG (Zhu, Liu, Han 2019, "Deep Leakage from Gradients", Alg. 1) and
iDLG (Zhao, Mopuri, Bilen 2020, "iDLG: Improved Deep Leakage from Gradients", Sec. 3).

The attacker (the server) sees one client's upload *after the method's own privatisation*:
the client runs one local SGD step on its batch with the deployed local loop (DP-SGD included),
the strategy's ``process_update`` clips / privatises it (SPM, ASGP, ... as deployed), and an
optional extra ``Mechanism`` (Gaussian, Laplace) is applied. For plain SGD the gradient is
``g = −Δ/η`` (the first step of momentum SGD is the same; weight decay is removed since the
attacker knows the weights). DLG then optimises a dummy input and a dummy soft label with
L-BFGS so that the dummy's gradient matches g in squared L2 distance (DLG Eq. 4); iDLG first
reads the label off the sign of the last layer's weight gradient (iDLG Sec. 3.1, exact for
cross-entropy with non-negative penultimate activations) and optimises the input only.
Snapshots are kept at 1/3, 2/3 and 3/3 of the iterations (paper 003's figure).

The iterate kept is the one with the lowest gradient-matching loss seen so far (the attacker
can compute that loss; it never sees the original). A non-finite loss (L-BFGS without a line
search overshoots on saturated softmax outputs, e.g. logistic regression on a trained model)
restores the best iterate and restarts L-BFGS's curvature history there, so a reconstruction
never "diverges" to huge pixel values. ``restarts`` > 1 runs DLG from independent random
initialisations and keeps the lowest-loss one (common practice since Zhu et al.'s own code).

Threat model (``THREAT_MODEL``): an honest-but-curious server that reads one client's upload
before any server-side (central) noise is added. Central DP (DP-FedAvg's Gaussian noise on the
aggregate) protects the released model, not the individual upload, so a high reconstruction
quality under client-level central DP is expected and is not a failure of that guarantee; only
noise on the upload itself (local DP, DP-SGD's per-step noise) stands in the attacker's way.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.records import RoundContext
from fl_lightning.utils.flat import flatten_into, load_flat_, trainable_parameters
from fl_lightning.utils.rng import generator_for

THREAT_MODEL = (
    "DLG/iDLG threat model: an honest-but-curious server reads one client's upload after the "
    "client's own privatisation (clipping, DP-SGD noise, local mechanisms) and before any "
    "central noise is added to the aggregate. Central DP (e.g. DP-FedAvg's noise) protects the "
    "released model, not the upload, so a good reconstruction under central DP is not a "
    "violation of its guarantee; only noise on the upload itself defends against this attack."
)


@dataclass
class InversionResult:
    reconstruction: torch.Tensor
    label: torch.Tensor
    snapshots: list[torch.Tensor] = field(default_factory=list)
    snapshot_iterations: list[int] = field(default_factory=list)
    final_loss: float = float("nan")


def example_gradient(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The non-private gradient of the mean cross-entropy of (x, y) (the DLG setting)."""
    params = trainable_parameters(net)
    loss = F.cross_entropy(net(x), y)
    return [g.detach() for g in torch.autograd.grad(loss, params)]


def privatize_gradient(
    grads: list[torch.Tensor], mechanism: Mechanism, *, generator: torch.Generator
) -> list[torch.Tensor]:
    """Applies ``mechanism`` to the flat gradient (e.g. Gaussian σ = 1 on every coordinate)."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    noisy = mechanism.privatize(flat, generator=generator)
    out, offset = [], 0
    for g in grads:
        out.append(noisy[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
    return out


def infer_label(grads: list[torch.Tensor], num_classes: int) -> int:
    """iDLG's label inference (Sec. 3.1) for one example under cross-entropy.

    The gradient of the loss w.r.t. the logits is ``p − e_y``: negative only at the true
    class. The last layer's bias gradient *is* that vector, so its argmin is the label whatever
    the inputs; without a bias, the weight-gradient row ``(p_i − [i = y]) · h`` is used, whose
    sum is negative only at ``y`` when the penultimate activations ``h`` are non-negative
    (the paper's ReLU assumption, Eq. 5-6)."""
    last = grads[-1] if grads else None
    if last is not None and last.dim() == 1 and last.shape[0] == num_classes:
        return int(last.argmin())
    for g in reversed(grads):
        if g.dim() == 2 and g.shape[0] == num_classes:
            return int(g.sum(dim=1).argmin())
    raise ValueError("idlg: no last layer with num_classes outputs found in the gradient")


def invert_gradient(
    net: nn.Module,
    target_grads: list[torch.Tensor],
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    batch_size: int = 1,
    method: str = "dlg",
    iterations: int = 300,
    lr: float = 1.0,
    seed: int = 0,
    restarts: int = 1,
) -> InversionResult:
    """DLG / iDLG reconstruction of the batch behind ``target_grads``.

    Minimises ``‖∇W(x', y') − g‖²`` (DLG Eq. 4) with L-BFGS, keeping the lowest-loss iterate;
    with ``restarts`` > 1 the attack is repeated from independent random initialisations and
    the run with the lowest final matching loss is returned.
    """
    if method not in ("dlg", "idlg"):
        raise ValueError(f"audit.attack: unknown inversion {method!r}")
    if method == "idlg" and batch_size != 1:
        raise ValueError("audit.dlg_batch_size: iDLG's label inference needs batch size 1")
    if restarts < 1:
        raise ValueError(f"audit.dlg_restarts: must be >= 1, got {restarts}")
    best: InversionResult | None = None
    for r in range(restarts):
        res = _invert_once(
            net,
            target_grads,
            input_shape=input_shape,
            num_classes=num_classes,
            batch_size=batch_size,
            method=method,
            iterations=iterations,
            lr=lr,
            seed=seed if r == 0 else seed + 7919 * r,
        )
        if best is None or res.final_loss < best.final_loss:
            best = res
    assert best is not None
    return best


def _invert_once(
    net: nn.Module,
    target_grads: list[torch.Tensor],
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    batch_size: int,
    method: str,
    iterations: int,
    lr: float,
    seed: int,
) -> InversionResult:
    net = copy.deepcopy(net).eval()
    params = trainable_parameters(net)
    for p in params:
        p.requires_grad_(True)
    device = params[0].device
    targets = [g.to(device) for g in target_grads]
    gen = torch.Generator().manual_seed(seed)
    dummy = (
        torch.randn((batch_size, *input_shape), generator=gen, device=gen.device)
        .to(device)
        .requires_grad_(True)
    )
    opt_vars: list[torch.Tensor] = [dummy]
    if method == "idlg":
        label = torch.tensor([infer_label(targets, num_classes)], device=device)
        soft = None
    else:
        soft = (
            torch.randn((batch_size, num_classes), generator=gen, device=gen.device)
            .to(device)
            .requires_grad_(True)
        )
        opt_vars.append(soft)
        label = None

    def make_optimizer() -> torch.optim.LBFGS:
        return torch.optim.LBFGS(opt_vars, lr=lr, max_iter=1, history_size=100)

    optimizer = make_optimizer()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = net(dummy)
        if soft is None:
            assert label is not None  # iDLG: the label inferred above
            loss = F.cross_entropy(logits, label)
        else:  # DLG's soft label: cross-entropy against softmax(dummy label)
            loss = torch.mean(torch.sum(-soft.softmax(-1) * F.log_softmax(logits, -1), dim=-1))
        grads = torch.autograd.grad(loss, params, create_graph=True)
        diff = sum(((g - t) ** 2).sum() for g, t in zip(grads, targets))
        assert isinstance(diff, torch.Tensor)  # a sum over the (non-empty) parameters
        diff.backward()
        return diff

    marks = sorted({max(1, iterations * k // 3) for k in (1, 2, 3)})
    result = InversionResult(reconstruction=dummy.detach(), label=torch.empty(0))
    best_loss = math.inf
    best = [v.detach().clone() for v in opt_vars]
    for it in range(1, iterations + 1):
        before = [v.detach().clone() for v in opt_vars]
        loss = optimizer.step(closure)
        value = float(loss.detach()) if loss is not None else math.nan
        # ``step`` returns the loss *before* its update: score the iterate it was computed at.
        if math.isfinite(value) and value < best_loss:
            best_loss, best = value, before
        if not all(bool(torch.isfinite(v).all()) for v in opt_vars) or not math.isfinite(value):
            with torch.no_grad():  # back to the best iterate, with a fresh curvature history
                for v, b in zip(opt_vars, best):
                    v.copy_(b)
            optimizer = make_optimizer()
        if it in marks:
            result.snapshots.append(best[0].clone().cpu())
            result.snapshot_iterations.append(it)
    final = float(closure().detach())  # the last update's iterate, not scored by a step
    if math.isfinite(final) and final < best_loss:
        best_loss, best = final, [v.detach().clone() for v in opt_vars]
    result.reconstruction = best[0].cpu()
    if result.snapshot_iterations and result.snapshot_iterations[-1] == iterations:
        result.snapshots[-1] = result.reconstruction.clone()
    result.label = (label if label is not None else best[1].argmax(-1)).cpu()
    result.final_loss = best_loss
    return result


def upload_gradient(
    module: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    client_id: int = 0,
    mechanism: Mechanism | None = None,
    seed: int = 0,
) -> list[torch.Tensor]:
    """What the server can read off one client's privatised upload, as a gradient.

    ``module`` is the trained FederatedModule: the client trains one local step on (x, y) from
    the current global model with the deployed local loop and strategy hooks; the update goes
    through ``strategy.process_update`` and ``mechanism``; returns ``−Δ/η − λw`` per parameter.
    """
    from fl_lightning.client.local_loop import LocalTrainer
    from fl_lightning.server.round import as_round_plan, client_plans, process_update

    cfg = module.local_config
    if cfg.optimizer != "sgd":
        raise ValueError(
            "client.optimizer: the gradient-inversion audit reads −Δ/η off an SGD step; "
            f"got {cfg.optimizer!r}"
        )
    from fl_lightning.client.module import ClientModule

    # A fresh client on a copy of the global network (the process's own client may carry
    # Opacus hooks from training); the same local-training settings as deployed.
    client = ClientModule(copy.deepcopy(module.global_net).cpu(), num_classes=module.num_classes)
    client.training_config = cfg
    global_params = trainable_parameters(module.global_net)
    flat = torch.empty(sum(p.numel() for p in global_params))
    flatten_into([p.detach().cpu() for p in global_params], flat)
    round_idx = int(module.rounds_completed)
    strategy = module.strategy
    num_clients = max(1, int(getattr(strategy, "num_clients", 1)) or 1)
    ctx = RoundContext(
        round_idx=round_idx,
        total_rounds=max(round_idx + 1, 1),
        seed=seed,
        num_clients=num_clients,
        cohort=[client_id],
        expected_cohort_size=1.0,
        sample_rate=1.0 / num_clients,
        global_params=flat,
    )
    plan = as_round_plan(strategy.configure_round(ctx), ctx).with_local(
        local_steps=1, batch_size=len(y), local_epochs=1
    )
    ctx = dataclasses.replace(ctx, client_config=plan.local.as_dict())
    trainer = LocalTrainer(client, "cpu")
    client_plan = client_plans(strategy, ctx, plan)(client_id)
    update = trainer.train(client_id, x.cpu(), y.cpu(), ctx, client_plan)
    update = process_update(strategy, update, ctx)  # as the client uploads it
    delta = update.delta
    if mechanism is not None:
        delta = mechanism.privatize(delta, generator=generator_for(seed, round_idx, "audit_mech"))
    lr = float(cfg.with_overrides(ctx.client_config).lr)
    grad_flat = -delta / lr - cfg.weight_decay * flat
    params = trainable_parameters(client.net)
    load_flat_(params, flat)  # the attacker's copy of the global weights
    out, offset = [], 0
    for p in params:
        out.append(grad_flat[offset : offset + p.numel()].view_as(p).clone())
        offset += p.numel()
    return out
