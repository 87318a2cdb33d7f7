"""The reproduction's statistics, one of each, shared by every paper: the paired test (by
seed), the minimum detectable effect at its n, the label rule that maps a test to a verdict,
and Kendall's τ within one column of a table.

The arms of a reproduction share their seeds (the same data split, client order and, where
the mechanism draws it from the seed, the same noise), so two arms are compared by the
differences of their runs seed for seed: a one-sample Student-t interval on the n paired
differences (Welch's unpaired test ignores that pairing and is not used). A claim about one
arm's own value (e.g. a correlation per run) uses the same interval on its runs' values."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

ALPHA = 0.05  # two-sided level of every interval
POWER = 0.8  # the power at which the minimum detectable effect is stated
KENDALL_MIN = 5  # Kendall τ only over at least this many items of one column
VERDICTS = ("confirmed", "contradicted", "inconclusive", "untestable")


@dataclass
class Test:
    """A mean with its 95 % interval over ``n`` values (paired differences or per-run values)."""

    kind: str
    n: int
    estimate: float
    ci95: tuple[float, float]
    sd: float
    mde: float | None

    def as_json(self, paper_value: float, null_value: float, digits: int = 3) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n": self.n,
            "estimate": round(self.estimate, digits),
            "ci95": [round(self.ci95[0], digits), round(self.ci95[1], digits)],
            "sd": round(self.sd, digits),
            "mde": None if self.mde is None else round(self.mde, digits),
            "paper_value": paper_value,
            "null_value": null_value,
        }


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true mean difference a two-sided one-sample (paired) t-test at level
    ``alpha`` detects with probability ``power`` over ``n`` pairs whose differences have
    standard deviation ``sd``: (t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n (the usual
    normal-approximation formula with Student quantiles). None below 2 pairs.

    E.g. sd = 6.5 pt and n = 3: (4.303 + 1.061) · 6.5 / 1.732 ≈ 20.1 pt."""
    from scipy.stats import t as student

    if n < 2:
        return None
    df = n - 1
    q = float(student.ppf(1 - alpha / 2, df)) + float(student.ppf(power, df))
    return q * sd / math.sqrt(n)


def mean_test(values: list[float], kind: str = "one-sample t") -> Test | None:
    """The mean of ``values`` with its two-sided 95 % Student-t interval (None below 2)."""
    from scipy.stats import t as student

    n = len(values)
    if n < 2:
        return None
    m = statistics.fmean(values)
    sd = statistics.stdev(values)
    half = float(student.ppf(1 - ALPHA / 2, n - 1)) * sd / math.sqrt(n)
    return Test(kind, n, m, (m - half, m + half), sd, mde(sd, n))


def paired_test(a: dict[Any, float], b: dict[Any, float]) -> tuple[Test | None, list[Any]]:
    """Paired by seed: the mean of a[s] − b[s] over the seeds both arms finished, with its 95 %
    t interval and the MDE at that n; also returns the seeds used (sorted)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    return mean_test(diffs, "paired t (by seed)"), seeds


def label(ci: tuple[float, float], paper_value: float, null_value: float, scope: str) -> str:
    """The verdict that follows from an interval (the reproduction standard's rule).

    ``scope = "value"`` (the claim is the paper's figure): confirmed when the paper's value is
    inside the interval and the null value outside, contradicted when the paper's value is
    outside, inconclusive when both are inside. ``scope = "direction"`` (the claim is only that
    A beats B, on the side of ``null_value`` where ``paper_value`` lies): confirmed when the
    interval lies wholly on that side, contradicted when wholly on the other, inconclusive
    when it holds the null value."""
    lo, hi = sorted(ci)

    def inside(v: float) -> bool:
        return lo <= v <= hi

    if scope == "direction":
        if paper_value == null_value:
            raise ValueError("scope direction: paper_value equals null_value (no side)")
        up = paper_value > null_value
        if inside(null_value):
            return "inconclusive"
        return "confirmed" if (lo > null_value) == up else "contradicted"
    if scope != "value":
        raise ValueError(f"scope: expected 'value' or 'direction', got {scope!r}")
    if not inside(paper_value):
        return "contradicted"
    return "inconclusive" if inside(null_value) else "confirmed"


def kendall(ours: list[float | None], paper: list[float | None]) -> dict[str, Any]:
    """Kendall τ-b (``scipy.stats.kendalltau``, ties as ties; our means at two decimals)
    between our values and the paper's over the items that have both: only over at least
    ``KENDALL_MIN`` items, else τ and p are None. Call it per column of a table (one privacy
    level), never over a table pooled across columns: a trend along the column axis would
    count as agreement on the methods' order."""
    from scipy.stats import kendalltau

    both = [(o, p) for o, p in zip(ours, paper) if o is not None and p is not None]
    out: dict[str, Any] = {"tau": None, "p_value": None, "n": len(both)}
    if len(both) < KENDALL_MIN:
        return out
    res = kendalltau([round(float(o), 2) for o, _ in both], [float(p) for _, p in both])
    tau, p = float(res.statistic), float(res.pvalue)
    out["tau"] = tau if math.isfinite(tau) else None
    out["p_value"] = p if math.isfinite(p) else None
    return out


def describe_mde(test: Test, unit: str) -> str:
    """'with seed SD ≈ X and n = N the smallest detectable effect is ≈ Y' (80 % power)."""
    if test.mde is None:
        return f"n = {test.n}: no detectable effect can be stated"
    return (
        f"with a seed SD of the differences ≈ {test.sd:.2f}{unit} and n = {test.n} the smallest "
        f"detectable effect is ≈ {test.mde:.2f}{unit} (α = {ALPHA}, power {POWER:.0%})"
    )
