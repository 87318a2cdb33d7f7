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


def _cp_lower(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = beta.ppf(alpha / 2, k, n - k + 1)
    return np.where(k <= 0, 0.0, lo)


def _cp_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = beta.ppf(1 - alpha / 2, k + 1, n - k)
    return np.where(k >= n, 1.0, hi)


def clopper_pearson(successes: int, trials: int, *, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided exact binomial confidence interval (Clopper & Pearson 1934)."""
    if trials <= 0:
        return 0.0, 1.0
    return float(_cp_lower(successes, trials, alpha)), float(_cp_upper(successes, trials, alpha))


def _eps_from_counts(
    tp: np.ndarray, fp: np.ndarray, n_pos: int, n_neg: int, *, delta: float, alpha: float
) -> np.ndarray:
    """ε lower bounds (vectorised over thresholds) from true / false positive counts."""
    tp, fp = np.asarray(tp, dtype=np.float64), np.asarray(fp, dtype=np.float64)
    tpr_lo, fpr_hi = _cp_lower(tp, n_pos, alpha), _cp_upper(fp, n_neg, alpha)
    tnr_lo, fnr_hi = _cp_lower(n_neg - fp, n_neg, alpha), _cp_upper(n_pos - tp, n_pos, alpha)
    out = np.zeros_like(tp)
    for num, den in ((tpr_lo - delta, fpr_hi), (tnr_lo - delta, fnr_hi)):
        ok = (num > 0) & (den > 0)
        ratio = np.where(ok, num / np.where(den > 0, den, 1.0), 1.0)
        out = np.maximum(out, np.where(ok, np.log(np.maximum(ratio, 1e-300)), 0.0))
    return out


def empirical_epsilon(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    delta: float,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, float]:
    """A (1 − α)-confidence lower bound on ε from the attack's scores.

    The scores are split in halves (seeded); the threshold maximising the bound on the first
    half is chosen there and the Clopper-Pearson bound computed on the second half. Returns
    the bound and the (TPR, FPR) it came from.
    """
    rng = np.random.default_rng(seed)
    m = rng.permutation(np.asarray(member_scores, dtype=np.float64))
    n = rng.permutation(np.asarray(nonmember_scores, dtype=np.float64))
    m_sel, m_eval = m[: len(m) // 2], m[len(m) // 2 :]
    n_sel, n_eval = n[: len(n) // 2], n[len(n) // 2 :]
    thresholds = np.unique(np.concatenate([m_sel, n_sel]))
    tp = len(m_sel) - np.searchsorted(np.sort(m_sel), thresholds, side="left")
    fp = len(n_sel) - np.searchsorted(np.sort(n_sel), thresholds, side="left")
    sel = _eps_from_counts(tp, fp, len(m_sel), len(n_sel), delta=delta, alpha=alpha)
    best_t = float(thresholds[int(np.argmax(sel))]) if len(thresholds) else math.inf
    tp_e, fp_e = int((m_eval >= best_t).sum()), int((n_eval >= best_t).sum())
    eps = float(
        _eps_from_counts(
            np.array([tp_e]), np.array([fp_e]), len(m_eval), len(n_eval), delta=delta, alpha=alpha
        )[0]
    )
    return {
        "epsilon_lower_bound": eps,
        "eps_threshold": best_t,
        "eps_tpr": tp_e / max(1, len(m_eval)),
        "eps_fpr": fp_e / max(1, len(n_eval)),
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
