"""ML-Leaks adversary 1 (Salem et al. 2019, NDSS, Sec. III).

One shadow model trained on data from the target's distribution (here: the experiment's own
federated pipeline on half of the shadow pool). The attack features are the three largest
posteriors, sorted; an attack classifier (scikit-learn MLP, as the paper's multilayer
perceptron) learns member vs non-member on the shadow model and is applied to the target.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.neural_network import MLPClassifier

from fl_lightning.attacks.metrics import MIAResult, evaluate_scores
from fl_lightning.attacks.pipeline import AuditSplit, logits_of
from fl_lightning.attacks.registry import AttackSettings, register_attack
from fl_lightning.attacks.shadows import ShadowBank


def top3_posteriors(net: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    """The three largest softmax outputs per example, sorted descending (ML-Leaks Sec. III-B)."""
    probs = logits_of(net, x).softmax(dim=1)
    k = min(3, probs.shape[1])
    return probs.topk(k, dim=1).values.numpy()


def ml_leaks_attack(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float = 1e-5,
    seed: int = 0,
) -> MIAResult:
    shadow = bank.get(1)[0]
    ins, outs = bank.balanced_in_out(shadow)
    pool = split.shadow_pool
    features = np.concatenate(
        [top3_posteriors(shadow.net, pool.x[ins]), top3_posteriors(shadow.net, pool.x[outs])]
    )
    labels = np.r_[np.ones(len(ins)), np.zeros(len(outs))]
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=500, random_state=seed)
    clf.fit(features, labels)
    m = clf.predict_proba(top3_posteriors(target, split.members.x))[:, 1]
    n = clf.predict_proba(top3_posteriors(target, split.nonmembers.x))[:, 1]
    return evaluate_scores("ml_leaks", m, n, threshold=0.5, delta=delta, seed=seed)


@register_attack("ml_leaks")
def _ml_leaks(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float,
    seed: int,
    settings: AttackSettings,
) -> MIAResult:
    return ml_leaks_attack(target, split, bank, delta=delta, seed=seed)
