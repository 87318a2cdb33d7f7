"""Membership-inference metrics and the empirical ε lower bound.

Scores are "higher means member". We report the ROC AUC, the balanced accuracy of a decision
threshold, TPR at low FPR (Carlini et al. 2022, "Membership Inference Attacks From First
Principles", Sec. III: 0.1% and 1%), and a lower bound on ε from (TPR, FPR).

The ε bound (Jagielski et al. 2020, "Auditing Differentially Private Machine Learning", Sec. 3;
Nasr et al. 2021, Eq. 1): an (ε, δ)-DP mechanism makes every membership test satisfy
``TPR ≤ e^ε·FPR + δ`` and ``TNR ≤ e^ε·FNR + δ``. With Clopper-Pearson intervals at confidence
1 − α, ``ε ≥ max(ln((TPR_lo − δ)/FPR_hi), ln((TNR_lo − δ)/FNR_hi))`` holds with probability
≥ 1 − α. The threshold is chosen on one half of the scores and the bound evaluated on the other
half, so choosing the best threshold does not inflate it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta
from sklearn.metrics import roc_auc_score, roc_curve


def clopper_pearson(successes: int, trials: int, *, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided exact binomial confidence interval (Clopper & Pearson 1934)."""
    if trials <= 0:
        return 0.0, 1.0
    lo = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return lo, hi


def _eps_from_rates(tp: int, fp: int, n_pos: int, n_neg: int, *, delta: float, alpha: float) -> float:
    tpr_lo, _ = clopper_pearson(tp, n_pos, alpha=alpha)
    _, fpr_hi = clopper_pearson(fp, n_neg, alpha=alpha)
    tnr_lo, _ = clopper_pearson(n_neg - fp, n_neg, alpha=alpha)
    _, fnr_hi = clopper_pearson(n_pos - tp, n_pos, alpha=alpha)
    best = 0.0
    for num, den in ((tpr_lo - delta, fpr_hi), (tnr_lo - delta, fnr_hi)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
    return best


def empirical_epsilon(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    delta: float,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, float]:
    """A (1 − α)-confidence lower bound on ε from the attack's scores.

    The scores are split in halves (seeded); the threshold maximising the point estimate of the
    bound is chosen on the first half and the Clopper-Pearson bound computed on the second.
    Returns the bound and the (TPR, FPR) counts it came from.
    """
    rng = np.random.default_rng(seed)
    m = rng.permutation(np.asarray(member_scores, dtype=np.float64))
    n = rng.permutation(np.asarray(nonmember_scores, dtype=np.float64))
    m_sel, m_eval = m[: len(m) // 2], m[len(m) // 2 :]
    n_sel, n_eval = n[: len(n) // 2], n[len(n) // 2 :]
    thresholds = np.unique(np.concatenate([m_sel, n_sel]))
    best_t, best = math.inf, -math.inf
    for t in thresholds:
        tp, fp = int((m_sel >= t).sum()), int((n_sel >= t).sum())
        point = _eps_from_rates(tp, fp, len(m_sel), len(n_sel), delta=delta, alpha=alpha)
        if point > best:
            best, best_t = point, float(t)
    tp, fp = int((m_eval >= best_t).sum()), int((n_eval >= best_t).sum())
    eps = _eps_from_rates(tp, fp, len(m_eval), len(n_eval), delta=delta, alpha=alpha)
    return {
        "epsilon_lower_bound": eps,
        "eps_threshold": best_t,
        "eps_tpr": tp / max(1, len(m_eval)),
        "eps_fpr": fp / max(1, len(n_eval)),
        "eps_n": float(len(m_eval) + len(n_eval)),
        "eps_confidence": 1.0 - alpha,
    }


def tpr_at_fpr(member_scores: np.ndarray, nonmember_scores: np.ndarray, fpr: float) -> float:
    """The largest TPR of any threshold whose FPR is at most ``fpr`` (Carlini et al. 2022)."""
    labels = np.r_[np.ones(len(member_scores)), np.zeros(len(nonmember_scores))]
    f, t, _ = roc_curve(labels, np.r_[member_scores, nonmember_scores])
    ok = f <= fpr
    return float(t[ok].max()) if ok.any() else 0.0


def balanced_accuracy(
    member_scores: np.ndarray, nonmember_scores: np.ndarray, threshold: float | None
) -> tuple[float, float]:
    """Balanced accuracy of "member iff score ≥ threshold"; the best threshold when None."""
    m, n = np.asarray(member_scores), np.asarray(nonmember_scores)
    if threshold is None:
        cands = np.unique(np.r_[m, n])
        accs = [0.5 * ((m >= t).mean() + (n < t).mean()) for t in cands]
        i = int(np.argmax(accs))
        return float(accs[i]), float(cands[i])
    return float(0.5 * ((m >= threshold).mean() + (n < threshold).mean())), float(threshold)


def best_threshold(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> float:
    """The threshold with the best balanced accuracy (used on shadow data to tune Basic-MIA)."""
    return balanced_accuracy(member_scores, nonmember_scores, None)[1]


@dataclass
class MIAResult:
    """One membership-inference attack's numbers on equal-size member / non-member sets."""

    attack: str
    auc: float
    balanced_accuracy: float
    threshold_source: str
    tpr_at_0_1pct_fpr: float
    tpr_at_1pct_fpr: float
    epsilon_lower_bound: float
    eps_tpr: float
    eps_fpr: float
    eps_confidence: float
    num_members: int
    num_nonmembers: int
    accountant_epsilon: float | None = None
    accountant_delta: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate_scores(
    attack: str,
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    threshold: float | None = None,
    delta: float = 1e-5,
    seed: int = 0,
) -> MIAResult:
    """All metrics of one attack. ``threshold``: the attack's own decision rule (e.g. tuned on
    shadow data); None reports the balanced accuracy of the best threshold (optimistic)."""
    m = np.asarray(member_scores, dtype=np.float64)
    n = np.asarray(nonmember_scores, dtype=np.float64)
    if len(m) != len(n):
        raise ValueError(f"member and non-member sets must have equal size, got {len(m)}, {len(n)}")
    labels = np.r_[np.ones(len(m)), np.zeros(len(n))]
    auc = float(roc_auc_score(labels, np.r_[m, n]))
    bal, _ = balanced_accuracy(m, n, threshold)
    eps = empirical_epsilon(m, n, delta=delta, seed=seed)
    return MIAResult(
        attack=attack,
        auc=auc,
        balanced_accuracy=bal,
        threshold_source="shadow" if threshold is not None else "best (optimistic)",
        tpr_at_0_1pct_fpr=tpr_at_fpr(m, n, 0.001),
        tpr_at_1pct_fpr=tpr_at_fpr(m, n, 0.01),
        epsilon_lower_bound=eps["epsilon_lower_bound"],
        eps_tpr=eps["eps_tpr"],
        eps_fpr=eps["eps_fpr"],
        eps_confidence=eps["eps_confidence"],
        num_members=len(m),
        num_nonmembers=len(n),
    )
