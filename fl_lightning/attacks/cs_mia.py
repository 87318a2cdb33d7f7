"""CS-MIA: membership inference from the confidence series across rounds (Gu et al. 2022,
"CS-MIA: Membership inference attack based on prediction confidence series in federated
learning", J. Inf. Secur. Appl. 67).

The attacker observes the global model after every round and records the true-class
confidence of each candidate; members' confidences rise earlier and more steadily. A shadow
federated run of the same experiment (same rounds) gives labelled series on the shadow pool;
an attack classifier (scikit-learn MLP) on the series and its round-to-round differences is
applied to the target's series (recorded during the target's ``fit``).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.neural_network import MLPClassifier

from fl_lightning.attacks.metrics import MIAResult, evaluate_scores
from fl_lightning.attacks.pipeline import AuditSplit
from fl_lightning.attacks.registry import AttackSettings, register_attack
from fl_lightning.attacks.shadows import ShadowBank


def series_features(series: np.ndarray, rounds: int) -> np.ndarray:
    """The last ``rounds`` confidences and their differences, per example."""
    s = series[:, -rounds:]
    return np.concatenate([s, np.diff(s, axis=1)], axis=1)


def cs_mia_attack(
    target_series: np.ndarray,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float = 1e-5,
    seed: int = 0,
) -> MIAResult:
    """``target_series``: (2n, rounds) confidences of the members then the non-members."""
    if target_series.shape[1] < 2:
        raise ValueError(
            "audit: cs_mia needs the confidence series of at least 2 rounds, recorded while "
            "training (run the audit without --checkpoint, or the callback during fit)"
        )
    shadow = bank.get(1)[0]
    rounds = min(target_series.shape[1], shadow.series.shape[1])
    ins, outs = bank.balanced_in_out(shadow)
    features = np.concatenate(
        [series_features(shadow.series[ins], rounds), series_features(shadow.series[outs], rounds)]
    )
    labels = np.r_[np.ones(len(ins)), np.zeros(len(outs))]
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=500, random_state=seed)
    clf.fit(features, labels)
    p = clf.predict_proba(series_features(target_series, rounds))[:, 1]
    n = len(split.members)
    return evaluate_scores("cs_mia", p[:n], p[n:], threshold=0.5, delta=delta, seed=seed)


@register_attack("cs_mia")
def _cs_mia(
    target: torch.nn.Module,
    split: AuditSplit,
    bank: ShadowBank,
    *,
    delta: float,
    seed: int,
    settings: AttackSettings,
) -> MIAResult:
    """The target enters through its recorded series, not its final weights."""
    series = settings.series
    if series is None or series.shape[1] < 2:
        raise ValueError(
            "audit: cs_mia needs the per-round confidence series recorded during training; "
            "run it as a fit callback or `fl-lightning audit` without --checkpoint"
        )
    return cs_mia_attack(series, split, bank, delta=delta, seed=seed)
