"""The statistics of a report and the verdict of each claim: Kendall τ against the paper's
order, Welch's test and CI (against the paper's margin), TOST closeness, the peak of a tuning
grid, the tracking of the λ_t quantile (Eq. 14 of paper 000), and the per-cell diagnostics
(rounds, ANR firings, final σ, cosines, budgets) that the evidence and the tables cite."""

from __future__ import annotations

import math
import statistics
from typing import Any

from fl_lightning.reports.repro.cells import CellResult, TableResults
from fl_lightning.reports.repro.definition import Definition, ReproError
from fl_lightning.reports.repro.points import TuneResult

VERDICTS = ("confirmed", "contradicted", "inconclusive")
ALPHA = 0.05


def kendall(cells: list[CellResult]) -> tuple[float | None, float | None, int]:
    """Kendall τ-b (ties counted as ties) between our means and the paper's, with its p-value
    (``scipy.stats.kendalltau``), over the cells that have both."""
    from scipy.stats import kendalltau

    both = [c for c in cells if c.mean is not None and c.paper is not None]
    if len(both) < 2:
        return None, None, len(both)
    res = kendalltau([round(float(c.mean or 0.0), 2) for c in both], [c.paper for c in both])
    tau, p = float(res.statistic), float(res.pvalue)
    return (tau if math.isfinite(tau) else None), (p if math.isfinite(p) else None), len(both)


def compare_methods(a: CellResult, b: CellResult, unit: str = " pt") -> tuple[str, str]:
    """Whether ``a`` beats ``b``: Welch's t-test over seeds (two-sided, α = 0.05)."""
    from scipy.stats import ttest_ind

    if len(a.values) < 2 or len(b.values) < 2:
        return "inconclusive", f"{a.arm.method} or {b.arm.method}: fewer than 2 seeds finished"
    diff = a.mean - b.mean  # type: ignore[operator]
    if statistics.pstdev(a.values) == 0 and statistics.pstdev(b.values) == 0:
        p = 0.0 if diff != 0 else 1.0
    else:
        p = float(ttest_ind(a.values, b.values, equal_var=False).pvalue)
    d = 2 if unit else 3
    text = f"{a.arm.method} {_ms(a, d)} vs {b.arm.method} {_ms(b, d)}: {diff:+.{d}f}{unit}"
    text += f", Welch p = {p:.3g}"
    if p < ALPHA:
        return ("confirmed" if diff > 0 else "contradicted"), text
    return "inconclusive", text + " (not significant at 0.05: a tie at this power)"


def difference_ci(a: CellResult, b: CellResult) -> tuple[float, float] | None:
    """The 95 % Welch confidence interval of mean(a) − mean(b), in points (None: < 2 seeds)."""
    from scipy.stats import t as student

    if len(a.values) < 2 or len(b.values) < 2:
        return None
    diff = statistics.fmean(a.values) - statistics.fmean(b.values)
    va = statistics.variance(a.values) / len(a.values)
    vb = statistics.variance(b.values) / len(b.values)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a.values) - 1) + vb**2 / (len(b.values) - 1))
    q = float(student.ppf(1 - ALPHA / 2, df))
    return diff - q * se, diff + q * se


def with_margin(
    kind: str, evidence: str, a: CellResult, b: CellResult, margin: float
) -> tuple[str, str]:
    """A pairwise verdict that also tests the paper's advantage ``margin`` (points): when the
    95 % Welch CI of our difference lies wholly below it, the published advantage is rejected
    and the pair counts as contradicted even if ``a`` is ahead."""
    ci = difference_ci(a, b)
    if ci is None:
        return kind, evidence
    lo, hi = ci
    if hi < margin:
        return "contradicted", (
            f"{evidence}; 95 % CI of the difference [{lo:+.2f}, {hi:+.2f}] pt excludes the "
            f"paper's {margin:+.2f} pt"
        )
    return kind, f"{evidence}; 95 % CI [{lo:+.2f}, {hi:+.2f}] pt includes the paper's {margin:+.2f}"


def compare_close(
    a: CellResult, b: CellResult, within: float, unit: str = " pt"
) -> tuple[str, str]:
    """Whether ``a`` is within ``within`` points of ``b`` (a claim such as "SPM ≈ NoDP"):
    two one-sided Welch tests (TOST, α = 0.05). Confirmed when both reject a gap of more than
    ``within``; contradicted when the gap is significantly larger than ``within``; otherwise
    inconclusive."""
    from scipy.stats import ttest_ind

    if len(a.values) < 2 or len(b.values) < 2:
        return "inconclusive", f"{a.arm.method} or {b.arm.method}: fewer than 2 seeds finished"
    diff = a.mean - b.mean  # type: ignore[operator]
    text = (
        f"{a.arm.method} {_ms(a)} vs {b.arm.method} {_ms(b)}: {diff:+.2f}{unit} "
        f"(margin ±{within:g}{unit})"
    )
    if statistics.pstdev(a.values) == 0 and statistics.pstdev(b.values) == 0:
        inside = abs(diff) <= within
        return ("confirmed" if inside else "contradicted"), text + " (no seed variance)"

    def p(shift: float, alternative: str) -> float:
        return float(
            ttest_ind(
                [v + shift for v in a.values], b.values, equal_var=False, alternative=alternative
            ).pvalue
        )

    above, below = p(within, "greater"), p(-within, "less")  # diff > -within, diff < within
    if max(above, below) < ALPHA:
        return "confirmed", text + f", TOST p = {max(above, below):.3g}"
    outside = min(p(within, "less"), p(-within, "greater"))  # diff < -within or > within
    if outside < ALPHA:
        return "contradicted", text + f", gap beyond the margin: one-sided Welch p = {outside:.3g}"
    return "inconclusive", text + f", TOST p = {max(above, below):.3g} (not within at 0.05)"


def _ms(c: CellResult, d: int = 2) -> str:
    if c.mean is None:
        return "—"
    std = f" ± {c.std:.{d}f}" if c.std is not None else ""
    return f"{c.mean:.{d}f}{std} (n={len(c.values)})"


def peak_verdict(
    res: TuneResult, value: Any, noise: float | None, among: list[Any] | None = None
) -> tuple[str, str]:
    """Whether ``value`` is the best of the arm's tuning grid (or of its values ``among``,
    e.g. the paper's own grid inside a wider one). With single-seed tuning the
    scale of a meaningful difference is ``noise``, the arm's seed std at its chosen value in
    the table: the claim is confirmed (contradicted) when the claimed value beats every other
    value (is beaten by the best) by more than 2 std; otherwise inconclusive."""
    means = {repr(v): res.mean(v) for v in res.values if among is None or v in among}
    if means.get(repr(value)) is None:
        return "inconclusive", f"{res.method}: no finished run at {value}"
    done = {k: m for k, m in means.items() if m is not None}
    text = f"{res.method}: " + ", ".join(f"{k}: {m:.2f}" for k, m in done.items())
    if noise is None:
        return "inconclusive", text + " (no seed std to judge the differences)"
    text += f" (seeds: {len(res.scores.get(repr(value), []))} per value; seed std {noise:.2f})"
    mine = done[repr(value)]
    best_k, best = max(done.items(), key=lambda kv: kv[1])
    others = [m for k, m in done.items() if k != repr(value)]
    if others and all(mine - m > 2 * noise for m in others):
        return "confirmed", text
    if best_k != repr(value) and best - mine > 2 * noise:
        return "contradicted", text + f"; best at {best_k}"
    return "inconclusive", text + f"; best at {best_k}, within 2 std of {value}"


def verdicts(
    defn: Definition,
    results: TableResults,
    tuning: list[TuneResult] | None = None,
) -> list[dict[str, Any]]:
    out = []
    for i, claim in enumerate(defn.claims):
        text = str(claim.get("claim", f"claim {i}"))
        t = str(claim.get("table"))
        if t not in results:
            continue
        cells = {c.arm.name: c for c in results[t][0]}
        peak = claim.get("peak")
        if isinstance(peak, dict):
            res = next((r for r in tuning or [] if r.arm == peak["arm"]), None)
            if res is None:
                raise ReproError(f"claims[{i}].peak: arm {peak['arm']!r} is not tuned")
            cell = cells.get(peak["arm"])
            verdict, evidence = peak_verdict(
                res, peak["value"], cell.std if cell else None, peak.get("among")
            )
            if claim.get("paper"):
                evidence += f". Paper: {claim['paper']}"
            if claim.get("reading"):
                evidence += f". Reading: {claim['reading']}"
            out.append({"claim": text, "verdict": verdict, "evidence": evidence, "table": t})
            continue
        if isinstance(claim.get("tracks"), dict):
            out.append(_tracking_verdict(text, t, claim, cells, i))
            continue
        percent = next((d.percent for d in defn.tables if d.label == t), True)
        unit = " pt" if percent else ""  # e.g. an SSIM difference is no percentage point
        close = claim.get("close")
        rule = claim.get("better") or claim.get("lower")
        if isinstance(close, dict):
            rule = {"arm": close["arm"], "than": [close["to"]]}
        if not isinstance(rule, dict):
            raise ReproError(
                f"claims[{i}]: expected 'better: {{arm, than}}', 'lower: {{arm, than}}', "
                "'close: {{arm, to, within}}', 'peak: {{arm, value}}' or 'tracks: {{arm}}'"
            )
        a = cells.get(rule["arm"])
        others = [cells.get(b) for b in rule["than"]]
        if a is None or any(o is None for o in others):
            raise ReproError(f"claims[{i}]: arms {rule} are not all in table {t}")
        if isinstance(close, dict):
            parts = [compare_close(a, others[0], float(close["within"]), unit)]  # type: ignore[arg-type]
        elif "better" in claim:
            parts = [compare_methods(a, o, unit) for o in others]  # type: ignore[arg-type]
        else:  # lower is the claim (e.g. attack accuracy): the others beat it on the value
            parts = [compare_methods(o, a, unit) for o in others]  # type: ignore[arg-type]
        margins = rule.get("margin")
        if margins is not None:
            if not isinstance(margins, list) or len(margins) != len(others):
                raise ReproError(f"claims[{i}].better.margin: one paper margin per 'than' arm")
            parts = [
                with_margin(kind, ev, a, o, float(m))  # type: ignore[arg-type]
                for (kind, ev), o, m in zip(parts, others, margins)
            ]
        kinds = {k for k, _ in parts}
        if kinds == {"confirmed"}:
            verdict = "confirmed"
        elif "contradicted" in kinds:
            verdict = "contradicted"
        else:
            verdict = "inconclusive"
        evidence = "; ".join(e for _, e in parts)
        notes = []
        for c in [a, *others]:
            if c is None:
                continue
            d = _diagnostics(c)
            if "anr_fired_mean" in d:
                notes.append(
                    f"{c.arm.method}: ANR fired {d['anr_fired_mean']:.1f} times a run, "
                    f"{d.get('rounds_mean', 0):.1f} rounds, final σ "
                    f"{d.get('final_noise_multiplier_mean', float('nan')):.2f}"
                )  # type: ignore[union-attr]
        if notes:
            evidence += " (" + "; ".join(notes) + ")"
        if claim.get("paper"):
            evidence += f". Paper: {claim['paper']}"
        if claim.get("reading"):
            evidence += f". Reading: {claim['reading']}"
        out.append({"claim": text, "verdict": verdict, "evidence": evidence, "table": t})
    return out


TRACK_CORR, TRACK_MAD = 0.9, 0.1  # "follows the quantile": correlation and mean |error|


def selection_tracking(curve: dict[str, list]) -> dict[str, float] | None:
    """How closely one run's selected fraction followed the λ_t quantile of Eq. (14).

    A noiseless test s(g'_j) ≥ λ_t selects 1 − r_t of the coordinates (r_t = the quantile
    level, ``strategy/threshold_level``). Returns the Pearson correlation of the logged
    ``clients/selected_fraction`` with 1 − r_t over rounds, their mean absolute difference and
    the mean recall (``clients/selection_recall``: of the coordinates above λ_t, the share
    selected); ``None`` without those columns."""
    levels = curve.get("strategy/threshold_level") or []
    fracs = curve.get("clients/selected_fraction") or []
    pairs = [(1.0 - r, f) for r, f in zip(levels, fracs) if r is not None and f is not None]
    if len(pairs) < 3:
        return None
    ideal, got = [p[0] for p in pairs], [p[1] for p in pairs]
    try:
        corr = statistics.correlation(ideal, got)
    except statistics.StatisticsError:  # constant series
        corr = float("nan")
    out = {"corr": corr, "mad": statistics.fmean(abs(a - b) for a, b in pairs)}
    recall = [x for x in curve.get("clients/selection_recall") or [] if x is not None]
    if recall:
        out["recall"] = statistics.fmean(recall)
    return out


def _tracking_verdict(
    text: str, t: str, claim: dict[str, Any], cells: dict[str, CellResult], i: int
) -> dict[str, Any]:
    arm = claim["tracks"].get("arm")
    c = cells.get(arm)
    if c is None:
        raise ReproError(f"claims[{i}]: arm {arm!r} is not in table {t}")
    stats = [x for x in (selection_tracking(cv) for cv in c.curves) if x is not None]
    if not stats:
        verdict, evidence = "inconclusive", f"{c.arm.method}: no run logged its selection"
    else:
        corr = statistics.fmean(x["corr"] for x in stats)
        mad = statistics.fmean(x["mad"] for x in stats)
        if math.isfinite(corr) and corr >= TRACK_CORR and mad <= TRACK_MAD:
            verdict = "confirmed"
        elif not math.isfinite(corr) or corr < 0.5 or mad > 0.25:
            verdict = "contradicted"
        else:
            verdict = "inconclusive"
        rec = [x["recall"] for x in stats if "recall" in x]
        evidence = (
            f"{c.arm.method} ({len(stats)} runs): selected fraction vs 1 − r_t over rounds, "
            f"correlation {corr:.2f}, mean |difference| {mad:.3f}"
            + (f", recall of the coordinates above λ_t {statistics.fmean(rec):.2f}" if rec else "")
            + f" (follows: correlation ≥ {TRACK_CORR} and |difference| ≤ {TRACK_MAD})"
        )
    if claim.get("paper"):
        evidence += f". Paper: {claim['paper']}"
    if claim.get("reading"):
        evidence += f". Reading: {claim['reading']}"
    return {"claim": text, "verdict": verdict, "evidence": evidence, "table": t}


def _diagnostics(c: CellResult) -> dict[str, Any]:
    rounds = [m["rounds"] for m in c.metrics if isinstance(m.get("rounds"), (int, float))]
    fired = [
        sum(x or 0 for x in cv["strategy/anr_fired"])
        for cv in c.curves
        if cv and "strategy/anr_fired" in cv
    ]
    sigma = []
    for cv in c.curves:
        used = [x for x in (cv or {}).get("strategy/noise_multiplier", []) if x is not None]
        if used:
            sigma.append(used[-1])
    out: dict[str, Any] = {}
    if rounds:
        out["rounds_mean"] = statistics.fmean(rounds)
    if fired:
        out["anr_fired_mean"] = statistics.fmean(fired)
    if sigma:
        out["final_noise_multiplier_mean"] = statistics.fmean(sigma)
    sound = [
        m["strategy/epsilon_sound"]
        for m in c.metrics
        if isinstance(m.get("strategy/epsilon_sound"), (int, float))
    ]
    if not sound:  # strategies that log it per round (async local DP, paper 004)
        sound = [v for v in (_last(cv, "strategy/epsilon_sound") for cv in c.curves) if v]
    if sound:
        out["epsilon_sound_mean"] = statistics.fmean(sound)
    for col, key in (
        ("strategy/abs_cos_mean", "abs_cos_mean"),
        ("strategy/mean_cosine", "cos_mean"),
        ("strategy/cos_negative_fraction", "cos_negative_fraction"),
        ("strategy/abs_cos_noise_only", "abs_cos_noise_only"),
        ("strategy/projected", "projected_per_round"),
    ):
        per_run = []
        for cv in c.curves:
            xs = [x for x in (cv or {}).get(col, []) if x is not None and math.isfinite(x)]
            if xs:
                per_run.append(statistics.fmean(xs))
        if per_run:
            out[key] = statistics.fmean(per_run)  # mean over rounds, then over seeds
    local = {  # local DP: the paper's per-coordinate ε beside the whole participation's
        "epsilon_local_per_coordinate_mean": "privacy/epsilon_local_per_coordinate",
        "epsilon_local_per_client_mean": "privacy/epsilon_local_per_client",
    }
    for key, metric in {**local, **c.extra_metrics}.items():
        vals = [
            float(m[metric])
            for m in c.metrics
            if isinstance(m.get(metric), (int, float)) and math.isfinite(m[metric])
        ]
        if vals:
            out[key] = statistics.fmean(vals)
    for col, key in (
        ("strategy/clients_exited", "clients_exited_mean"),
        ("strategy/dispatched", "last_round_dispatched_mean"),
        ("strategy/eps_paper_max", "epsilon_paper_max_mean"),
    ):
        vals = [v for v in (_last(cv, col) for cv in c.curves) if v is not None]
        if vals:
            out[key] = statistics.fmean(vals)
    # ADP-FL: the largest share one upload has in an aggregation (mean over rounds and seeds)
    # and how many uploads the accuracy-drop callback froze at the previous ε (per run)
    shares = [x for cv in c.curves for x in (cv or {}).get("strategy/weight_max", []) if x]
    if shares:
        out["weight_max_mean"] = statistics.fmean(shares)
    frozen = [v for v in (_last(cv, "strategy/frozen_total") for cv in c.curves) if v is not None]
    if frozen:
        out["epsilon_frozen_mean"] = statistics.fmean(frozen)
    if c.arm.paper_epsilon is not None:  # the runs' own ε beside the paper's (000)
        out["epsilon_infinite_runs"] = c.eps_infinite
    track = [x for x in (selection_tracking(cv) for cv in c.curves if cv) if x is not None]
    if track:
        out["selected_fraction_mean"] = statistics.fmean(
            statistics.fmean(x for x in cv["clients/selected_fraction"] if x is not None)
            for cv in c.curves
            if cv and cv.get("clients/selected_fraction")
        )
        out["selection_corr_mean"] = statistics.fmean(x["corr"] for x in track)
        out["selection_mad_mean"] = statistics.fmean(x["mad"] for x in track)
        rec = [x["recall"] for x in track if "recall" in x]
        if rec:
            out["selection_recall_mean"] = statistics.fmean(rec)
    return out


def _last(curve: dict[str, list], col: str) -> float | None:
    """The last logged value of ``col`` in a run's curve (None when never logged)."""
    vals = [x for x in (curve or {}).get(col, []) if x is not None]
    return vals[-1] if vals else None
