"""LiRA, offline variant (Carlini et al. 2022, "Membership Inference Attacks From First
Principles", Alg. 1 with only OUT models, Sec. VI-C).

k shadow models are trained with the experiment's own pipeline on random halves of the
attacker's shadow pool, so every target example is OUT for every shadow. For each target
(x, y) the logit-scaled confidence φ = log(p_y / (1 − p_y)) (computed stably as
z_y − logsumexp_{j≠y} z_j, Sec. IV-B) is taken under each shadow; the OUT distribution is a
Gaussian N(μ_x, σ²) with the per-example mean and, as the paper recommends for few shadow
models, one global ("fixed") variance. The score is the one-sided test statistic
(φ_target − μ_x)/σ: the larger, the more likely a member.
"""

from __future__ import annotations

import numpy as np
import torch

from fl_lightning.attacks.metrics import MIAResult, evaluate_scores
from fl_lightning.attacks.pipeline import AuditSplit, logits_of
from fl_lightning.attacks.registry import AttackSettings, register_attack
from fl_lightning.attacks.shadows import ShadowBank


def logit_confidence(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """φ = z_y − logsumexp_{j≠y} z_j = log(p_y/(1 − p_y)) (Carlini et al. 2022, Sec. IV-B)."""
    z = logits_of(net, x).double()
    z_y = z.gather(1, y[:, None]).squeeze(1)
    others = z.scatter(1, y[:, None], float("-inf"))
    return (z_y - others.logsumexp(dim=1)).numpy()


def lira_offline_attack(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    num_shadows: int = 4,
    delta: float = 1e-5,
    seed: int = 0,
) -> MIAResult:
    if num_shadows < 2:
        raise ValueError(
            f"audit.shadow_models: LiRA needs at least 2 shadow models, got {num_shadows}"
        )
    targets = split.targets
    out = np.stack([logit_confidence(s.net, targets.x, targets.y) for s in bank.get(num_shadows)])
    mu = out.mean(axis=0)
    sigma = max(float(out.std(axis=0, ddof=1).mean()), 1e-6)
    score = (logit_confidence(target, targets.x, targets.y) - mu) / sigma
    n = len(split.members)
    return evaluate_scores("lira", score[:n], score[n:], threshold=None, delta=delta, seed=seed)


@register_attack("lira")
def _lira(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float,
    seed: int,
    settings: AttackSettings,
) -> MIAResult:
    return lira_offline_attack(
        target, split, bank, num_shadows=settings.shadow_models, delta=delta, seed=seed
    )
