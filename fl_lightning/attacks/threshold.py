"""Loss / confidence threshold attacks.

Yeom et al. 2018 ("Privacy Risk in Machine Learning", Sec. 3.2, the threshold adversary):
predict "member" when the model's loss on (x, y) is low. Paper 000's Basic-MIA is the same test
with the threshold tuned on a shadow model's members and non-members; we tune it on shadow
model 0 of the bank (highest balanced accuracy on the shadow's own in/out examples) and apply it
to the target model. Scores: negative cross-entropy (``loss``) or true-class confidence
(``confidence``); both "higher means member".
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from fl_lightning.attacks.metrics import MIAResult, best_threshold, evaluate_scores
from fl_lightning.attacks.pipeline import (
    AuditSplit,
    logits_of,
    per_example_loss,
    true_class_confidence,
)
from fl_lightning.attacks.registry import AttackSettings, register_attack
from fl_lightning.attacks.shadows import ShadowBank


def membership_scores(
    net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, score: Literal["loss", "confidence"]
) -> np.ndarray:
    logits = logits_of(net, x)
    if score == "loss":
        return (-per_example_loss(logits, y)).numpy()
    return true_class_confidence(logits, y).numpy()


def threshold_attack(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    score: Literal["loss", "confidence"] = "loss",
    delta: float = 1e-5,
    seed: int = 0,
) -> MIAResult:
    """Basic-MIA: threshold on ``score`` tuned on shadow model 0, applied to ``target``."""
    shadow = bank.get(1)[0]
    ins, outs = bank.balanced_in_out(shadow)
    pool = split.shadow_pool
    s_in = membership_scores(shadow.net, pool.x[ins], pool.y[ins], score)
    s_out = membership_scores(shadow.net, pool.x[outs], pool.y[outs], score)
    t = best_threshold(s_in, s_out)
    m = membership_scores(target, split.members.x, split.members.y, score)
    n = membership_scores(target, split.nonmembers.x, split.nonmembers.y, score)
    name = "threshold" if score == "loss" else "threshold_confidence"
    return evaluate_scores(name, m, n, threshold=t, delta=delta, seed=seed)


@register_attack("threshold")
def _threshold(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float,
    seed: int,
    settings: AttackSettings,
) -> MIAResult:
    return threshold_attack(
        target, split, bank, score=settings.threshold_score, delta=delta, seed=seed
    )
