"""What a run's ε covers and what it assumes: the seed clause of the one-line guarantee and the
run's ``privacy_statement.md`` (in the spirit of TF-Privacy's ``compute_dp_sgd_privacy_statement``).

The statement opens with its plain reading (:func:`plain_reading`: what an observer of
everything released can learn about one unit, where ε sits on the scale of Ponomareva et al.
2023, Sec. 5.2, and what the run did not protect), then is generated from
``privacy_ledger.json`` (the events behind the printed ε) and a
few facts of the run (:class:`RunFacts`): the unit and adjacency, the sampling and whether the ε
uses amplification by it, the accountant, δ against 1/N, what the run releases outside the
guarantee, the seed caveat and each event's parameters. docs/privacy.md explains each section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from fl_lightning.privacy.guarantee.observers import from_state

SIMULATION_CLAUSE = "simulation: noise and cohorts reproducible from the seed"
"""Appended to the guarantee of a run not in ``privacy.secure_mode``."""

SCALE_SOURCE = (
    'Ponomareva et al. 2023, "How to DP-fy ML: A Practical Guide to Machine Learning with '
    'Differential Privacy", JAIR 77, Sec. 5.2'
)
"""Where the ε scale of the statement's opening comes from."""

SCALE: tuple[tuple[float, str], ...] = (
    (1.0, "strong (ε ≤ 1)"),
    (10.0, "reasonable (1 < ε ≤ 10, typical of deployed models)"),
    (math.inf, "weak (ε > 10: a bound on the loss, better than no guarantee, but weak)"),
)
"""The tiers of Ponomareva et al. 2023, Sec. 5.2 (upper end inclusive, words)."""

NOT_COVERED: tuple[tuple[str, str], ...] = (
    ("`train/loss`", "the cohort's mean training loss, every round, without noise"),
    (
        "`clients/*`",
        "statistics of the cohort's uploads and training (update norms before clipping, "
        "clipped fraction, selected fraction, seconds), averaged without noise",
    ),
    (
        "`round/cohort_size`",
        "how many clients trained in each round (under Poisson sampling, a fact of the draw)",
    ),
    (
        "`client_times.csv`, `clients/seconds_*`",
        "which clients trained in which round, for how long, on how many examples: the cohorts, "
        "whose secrecy the amplification by sampling assumes",
    ),
    (
        "`label_histogram.csv`, `partition/*`",
        "every client's label counts (the partition), logged before training",
    ),
    ("`strategy/*`", "what the strategy reports about its own state, unless it says it is noised"),
)
"""Logged by every run without noise: outside the guarantee (docs/privacy.md)."""

WRITTEN_BY: dict[str, str] = {
    "`client_times.csv`, `clients/seconds_*`": "client_times.csv",
    "`label_histogram.csv`, `partition/*`": "label_histogram.csv",
}
"""The file a :data:`NOT_COVERED` entry needs: listed only when the run writes it."""

_NO_CLAIM = ("none", "nothing released", "no release yet")


def makes_claim(guarantee: str) -> bool:
    """False for sentences that claim nothing (no guarantee, nothing released yet)."""
    return not guarantee.startswith(_NO_CLAIM)


def with_seed_clause(guarantee: str, *, secure_mode: bool) -> str:
    """The guarantee with the simulation caveat appended, unless the run is in secure mode
    (seeds from the OS's entropy, kept only in the checkpoint) or the sentence claims
    nothing."""
    if secure_mode or not makes_claim(guarantee):
        return guarantee
    return f"{guarantee}; {SIMULATION_CLAUSE}"


@dataclass(frozen=True)
class RunFacts:
    """What the statement needs beyond the ledger.

    Attributes:
        num_clients: N, the clients of the federation.
        num_records: the records of all clients (N of a record-level guarantee).
        secure_mode: ``privacy.secure_mode``.
        accountant_name: the accountant in words.
        epsilon: the headline ε printed.
        guarantee: the one-line guarantee printed.
        strategy: the strategy's class name.
        files: the names of the files the run writes into its directory (None: unknown,
            every :data:`NOT_COVERED` entry is listed).
        loss_tail: P[privacy loss > ε] of the headline where the accountant computes it
            (``PrivacyAccountant.loss_tail``: PLD); None where it does not.
        one_more_round: under distributed DP, the ε after one more round like the last with
            the fewest survivors SecAgg accepts (``min_survivors``, ``survivors`` of them): the
            worst case of the budget stop in a deployment, which learns the survivors only at
            unmasking; None otherwise.
    """

    num_clients: int
    num_records: int
    secure_mode: bool
    accountant_name: str
    epsilon: float
    guarantee: str
    strategy: str
    files: tuple[str, ...] | None = None
    loss_tail: float | None = None
    one_more_round: tuple[int, float] | None = None


def _unit(ledger: dict[str, Any]) -> str:
    if ledger.get("no_guarantee"):
        return "none"
    if ledger.get("client_level") or ledger.get("distributed"):
        return "client"
    if ledger.get("record_level"):
        return "record"
    if ledger.get("local"):
        return "local"
    return "none"


def _runs(rows: list[tuple]) -> list[tuple[int, int, tuple]]:
    """Consecutive equal rows as (first round, last round, row), rounds counted from 1."""
    out, start = [], 1
    for row, group in groupby(rows):
        n = len(list(group))
        out.append((start, start + n - 1, row))
        start += n
    return out


def _gaussian_rows(events: list[list[Any]]) -> list[str]:
    rows = [(float(e[0]), float(e[1]), int(e[2]), int(e[3]) if len(e) > 3 else 0) for e in events]
    lines = []
    for first, last, (sigma, q, steps, population) in _runs(rows):
        how = (
            f"fixed-size, {round(q * population)} of {population}"
            if population
            else f"Poisson, q = {q:.6g}"
        )
        lines.append(
            f"| {first}–{last} | Gaussian, noise multiplier σ = {sigma:.6g} | {how} | "
            f"{steps} step(s) each |"
        )
    return lines


def _sampling(unit: str, ledger: dict[str, Any]) -> tuple[str, str]:
    """(sampling, whether amplification by it is used)."""
    if unit == "client" and ledger.get("distributed"):
        last = ledger["distributed"][-1]  # DistributedNoiseEvent.to_state()
        q, replace_one = float(last[8]), bool(last[9])
        if replace_one:
            return f"fixed-size cohorts of {int(last[10])} clients", "no (replace-one, 2× Δ)"
        if q < 1.0:
            return (
                f"Poisson cohorts, each client with probability q = {q:.6g}",
                "against a third party only (Zhu & Wang 2019's bound on RDP), from whom the "
                "cohorts are secret; not against the server, which draws them and learns the "
                "survivors: its ε is priced with q = 1 over the sums each client was in (Who "
                "observes what)",
            )
        return "every client in every round", "no (q = 1)"
    if unit == "client":
        last = ledger["client_level"][-1]
        q, population = float(last[1]), int(last[3]) if len(last) > 3 else 0
        if population:
            m = round(q * population)
            return (
                f"fixed-size cohorts, {m} of {population} clients without replacement",
                "against a third party (the headline ε), from whom the cohorts are secret; "
                "not against the server, which draws them (Who observes what)",
            )
        if q < 1.0:
            return (
                f"Poisson cohorts, each client with probability q = {q:.6g}",
                "against a third party (the headline ε), from whom the cohorts are secret; "
                "not against the server, which draws them (Who observes what)",
            )
        return "every client in every round", "no (q = 1)"
    if unit == "record":
        return (
            "Poisson batches on each client (DP-SGD); clients sampled by the server",
            "by batch sampling, yes (the batches stay secret); by client sampling, no claim",
        )
    if unit == "local":
        return (
            "each upload privatised on its client",
            "no: every upload is private on its own, whoever sees it",
        )
    return "n/a", "n/a"


def _adjacency(unit: str, ledger: dict[str, Any]) -> str:
    if unit == "client" and ledger.get("distributed"):
        return (
            "replace-one client (fixed-size cohorts): one client's encoded update changes, the "
            "other survivors' noise shares present in both worlds"
            if ledger["distributed"][-1][9]
            else "add/remove one client's encoded update, the other survivors' noise shares "
            "present in both worlds (Kairouz et al. 2021's analysis)"
        )
    if unit == "client":
        last = ledger["client_level"][-1]
        fixed = len(last) > 3 and int(last[3])
        return (
            "replace-one client (fixed-size cohorts): all of one client's data may change"
            if fixed
            else "add/remove one client: all of one client's data present or absent"
        )
    if unit == "record":
        return "add/remove one record (example) of one client's data"
    if unit == "local":
        return "any two inputs of one client (local DP): the upload alone protects the client"
    return "none: no guarantee"


def _events(unit: str, ledger: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if ledger.get("client_level"):
        lines += [
            "Client level (one event per round, on the aggregate):",
            "",
            "| rounds | mechanism | sampling | steps |",
            "|---|---|---|---|",
            *_gaussian_rows(ledger["client_level"]),
            "",
        ]
    if ledger.get("record_level"):
        histories: dict[tuple, list[str]] = {}
        for cid, events in sorted(ledger["record_level"].items(), key=lambda kv: int(kv[0])):
            histories.setdefault(tuple(tuple(e) for e in events), []).append(str(cid))
        head = (
            f"Record level: {len(histories)} distinct DP-SGD histories over "
            f"{len(ledger['record_level'])} clients (the ε is their maximum):"
        )
        lines += [head, ""]
        for k, (history, cids) in enumerate(histories.items()):
            if k == 5:
                lines.append(f"(and {len(histories) - 5} more histories)")
                break
            shown = ", ".join(cids[:8]) + (" …" if len(cids) > 8 else "")
            table = ["| participations | mechanism | sampling | steps |", "|---|---|---|---|"]
            lines += [f"Clients {shown}:", "", *table, *_gaussian_rows([list(h) for h in history])]
            lines.append("")
    if ledger.get("local"):
        kinds: dict[tuple, list[str]] = {}
        for cid, rows in sorted(ledger["local"].items(), key=lambda kv: int(kv[0])):
            kinds.setdefault(tuple(tuple(r) for r in rows), []).append(str(cid))
        lines += [
            f"Local (per client, every upload): {len(kinds)} distinct upload ledgers over "
            f"{len(ledger['local'])} clients:",
            "",
            "| clients | per-unit ε | per-unit δ | unit | units an upload | uploads "
            "| Gaussian σ/Δ |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, (rows, cids) in enumerate(kinds.items()):
            if k == 10:
                lines.append(f"| (and {len(kinds) - 10} more) | | | | | | |")
                break
            shown = ", ".join(cids[:6]) + (" …" if len(cids) > 6 else "")
            for eps, dlt, what, units, n, *multiplier in rows:  # σ/Δ: Gaussian uploads only
                z = f"{multiplier[0]:.4g}" if multiplier and multiplier[0] else "—"
                lines.append(f"| {shown} | {eps:.6g} | {dlt:g} | {what} | {units} | {n} | {z} |")
        lines.append("")
    if ledger.get("distributed"):
        lines += _distributed_lines(ledger["distributed"])
    if not lines:
        lines = ["No privacy event was recorded.", ""]
    return lines


def _distributed_lines(rows: list[list[Any]]) -> list[str]:
    """The distributed-DP rounds and the trust model behind them."""
    mech, clip, scale, var, _, dim, beta, bits, *_ = rows[0]
    survivors = [int(r[4]) for r in rows]
    cohorts = [int(r[10]) for r in rows]
    fewest = min((n for n in survivors if n > 0), default=0)  # 0 survivors: an aborted round
    lines = [
        "Client level, distributed DP behind secure aggregation (one event per round):",
        "",
        "| rounds | noise | bits | clip C | scale s | per-client variance (grid) | d (padded) "
        "| β | survivors / dispatched |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for first, last, (n, k) in _runs(list(zip(survivors, cohorts, strict=True))):
        lines.append(
            f"| {first}–{last} | {mech} | {bits} | {clip:.6g} | {scale:.6g} | {var:.6g} | {dim} "
            f"| {beta:.4g} | {n} / {k} |"
        )
    lines += [
        "",
        "**Trust model.** The server is honest but curious and sees only the modular sum of the "
        f"surviving clients' masked uploads (SecAgg, Bonawitz et al. 2017), at least {fewest} "
        "a round; every round is priced with the noise of the clients that survived, not the "
        "noise planned. It also draws the cohorts and learns who survived, so nothing is "
        "amplified by sampling against it: each client's ε against it composes the sums that "
        "client was in, with q = 1 (Who observes what). Key agreement and Shamir sharing are "
        "simulated: the pairwise mask seeds are derived from the run's seed (its secret in "
        "secure mode).",
        "",
        f"**If SecAgg is broken** (the server learns the masks, or colludes with all but one "
        "client of a round), it sees each client's encoded update with that client's own noise "
        f"share only: 1/m of the variance, for m the expected cohort size (here the sum of "
        f"{fewest} or more shares). Each client is then protected only by its share: about σ·√m "
        "times less noise relative to its update than the ε above assumes, i.e. local DP with "
        "noise multiplier σ/√m, which at these settings is a weak or vacuous guarantee.",
        "",
    ]
    return lines


def _delta_line(delta: float, unit: str, facts: RunFacts) -> str:
    if unit == "none":
        return f"δ = {delta:g}: no guarantee, so nothing to read it against"
    n = facts.num_records if unit == "record" else facts.num_clients
    what = "records" if unit == "record" else "clients"
    if n <= 0:
        return f"δ = {delta:g}"
    tail = (
        f"; here the privacy loss exceeds ε with probability {facts.loss_tail:.2g} "
        f"({facts.loss_tail / delta:.2g}·δ), computed from the accountant's PLD"
        if facts.loss_tail is not None
        else "; P[privacy loss > ε] is not computed by this accountant (the PLD accountant "
        "gives it)"
    )
    verdict = (
        "δ < 1/N, as it must be: δ is additive, the probability of any outcome changes by at "
        "most a factor e^ε, plus at most δ. It is not the probability that the e^ε bound "
        f"fails{tail}. δ is not a share of units exposed either (δ·N counts nothing), and "
        "publishing one unit chosen at random in the clear is already (0, 1/N)-DP"
        if delta < 1.0 / n
        else "δ ≥ 1/N: the guarantee permits publishing one unit chosen at random in the "
        "clear; lower δ"
    )
    return f"δ = {delta:g} against 1/N = 1/{n:,} {what} = {1.0 / n:.3g}: {verdict}"


def _seed_lines(secure_mode: bool) -> list[str]:
    if secure_mode:
        return [
            "Secure mode (`privacy.secure_mode: true`): the seed of every noise, cohort and "
            "batch generator was drawn from the operating system's entropy (63 bits) and is "
            "written nowhere but the checkpoint, **which is therefore a secret**: whoever holds "
            "it can regenerate the noise. The generators keyed by it (PyTorch's, numpy's SFC64 "
            "for the per-coordinate mechanisms) are fast, not cryptographically secure.",
        ]
    return [
        f"**{SIMULATION_CLAUSE}.** Every noise draw, cohort and batch comes from "
        "`generator_for(seed, round, purpose)` with the seed in `config.yaml` "
        "(`seed_everything`): anyone holding the config can regenerate the noise (against "
        "them ε = ∞) and the cohorts (no amplification by sampling). This is right for "
        "research simulation; a deployment sets `privacy.secure_mode: true`.",
    ]


def scale_tier(epsilon: float) -> str:
    """The tier of ``epsilon`` on the scale of :data:`SCALE_SOURCE`."""
    return next(words for top, words in SCALE if epsilon <= top)


_WHO = {
    "client": "a given client took part in training",
    "record": "a given record (example) was in some client's training data",
    "local": "a given client holds one dataset rather than another",
}


def _observer(unit: str, ledger: dict[str, Any]) -> str:
    """What is bounded for one unit, in plain words (replace-one: which of two clients)."""
    if unit == "client" and "replace-one" in _adjacency(unit, ledger):
        return "a given client, rather than another, took part in training"
    return _WHO[unit]


def plain_reading(unit: str, ledger: dict[str, Any], facts: RunFacts, delta: float) -> str:
    """The statement's opening: what an observer of everything released can learn about one
    unit (Dwork & Roth 2014, Def. 2.4 read as odds: Pr[M(D) ∈ S] ≤ e^ε·Pr[M(D') ∈ S] + δ),
    where ε sits on the published scale, and what the run did not protect."""
    if unit == "none" or math.isinf(facts.epsilon):
        reason = facts.guarantee.removeprefix("none: ")
        return (
            f"This run makes no privacy claim ({reason}): what it released can reveal anything "
            "about any client."
        )
    eps = facts.epsilon
    factor = f"{math.exp(eps):.3g}" if eps < 700 else "more than 10^300"
    who = (
        "Someone who sees every upload of a client"
        if unit == "local"
        else (
            "Someone who sees everything this run released (every global model and the final one)"
        )
    )
    seed = (
        ""
        if facts.secure_mode
        else ", nor against anyone holding `config.yaml`, who can regenerate its noise"
    )
    return (
        f"{who}, and knows everything else, can grow their odds that {_observer(unit, ledger)} "
        f"by at most a factor e^ε = {factor} (ε = {eps:.3g}), plus at most δ = {delta:g}: the "
        f"probability of any outcome changes by at most a factor e^ε, plus at most δ"
        f"{_tail_words(facts)}.{_others(ledger)} On the scale of {SCALE_SOURCE} "
        f"(ε ≤ 1 strong, ε ≤ 10 reasonable, "
        f"ε > 10 weak), this ε is {scale_tier(eps)}. The run does not protect what it logs "
        f"without noise (listed below){seed}."
    )


def _tail_words(facts: RunFacts) -> str:
    if facts.loss_tail is None:
        return ""
    return (
        f" (δ is not the probability that the bound fails: the privacy loss exceeds ε with "
        f"probability {facts.loss_tail:.2g})"
    )


def _others(ledger: dict[str, Any]) -> str:
    """A pointer to the observers who receive more than the released models."""
    rows = from_state(ledger.get("observers", []))
    if len(rows) < 2 or rows[1].epsilon == rows[0].epsilon:
        return ""
    server = rows[1]
    eps = "∞" if math.isinf(server.epsilon) else f"up to {server.epsilon:.3g}"
    return (
        f" That is the view of {rows[0].observer.words}; against {server.observer.words}, "
        f"which receives {server.receives}, ε is {eps} (Who observes what)."
    )


def _observer_lines(ledger: dict[str, Any]) -> list[str]:
    """The per-observer table (``privacy/guarantee/observers.py``)."""
    rows = from_state(ledger.get("observers", []))
    if not rows:
        return []
    lines = [
        "## Who observes what",
        "",
        "Each observer of the trust model, what it receives, and its ε at the run's δ "
        "(docs/privacy.md, Observers). The headline ε is the first row's.",
        "",
        "| observer | receives | ε | how it is priced |",
        "|---|---|---|---|",
    ]
    for r in rows:
        if math.isinf(r.epsilon):
            eps = "∞"
        elif r.epsilon_mean is not None:
            eps = (
                f"{r.epsilon_mean:.4g} for the mean client ({r.sums_mean:.3g} sums), "
                f"{r.epsilon:.4g} for the worst ({r.sums_worst} sums)"
            )
        else:
            eps = f"{r.epsilon:.4g}"
        lines.append(f"| {r.observer.words} | {r.receives} | {eps} | {r.priced} |")
    if any(r.epsilon_mean is not None for r in rows):
        lines += [
            "",
            "Each client's ε against the server composes, without amplification, the rounds "
            "whose sum it was in (`members`, the last field of each `distributed` row of "
            "privacy_ledger.json): "
            "`fl_lightning.privacy.guarantee.observers.secure_sum_epsilons`, or independently "
            "`fl_lightning.privacy.accounting.recompute.distributed_rows_rdp` of those rows "
            "with q = 1 (tests/privacy/test_observers.py).",
        ]
    return [*lines, ""]


def _not_covered(facts: RunFacts) -> list[tuple[str, str]]:
    """:data:`NOT_COVERED`, less the entries whose file the run does not write."""
    if facts.files is None:
        return list(NOT_COVERED)
    return [(n, w) for n, w in NOT_COVERED if WRITTEN_BY.get(n, "") in ("", *facts.files)]


def privacy_statement(ledger: dict[str, Any], facts: RunFacts) -> str:
    """The markdown statement of one run (module docstring)."""
    unit = _unit(ledger)
    delta = float(ledger.get("delta", 0.0))
    sampling, amplified = _sampling(unit, ledger)
    accountant = (
        "per client, the better of basic composition and the optimal composition "
        "(dp-accounting PLD) of its uploads"
        if unit == "local"
        else "RDP at integer orders 2-128 and 256 (privacy/distributed/accounting.py), whatever "
        "privacy.accountant names: the distributed mechanisms have no PLD here"
        if ledger.get("distributed")
        else facts.accountant_name
    )
    eps = "∞" if math.isinf(facts.epsilon) else f"{facts.epsilon:.6g}"
    lines = [
        "# Privacy statement",
        "",
        plain_reading(unit, ledger, facts, delta),
        "",
        f"Strategy `{facts.strategy}`, {int(ledger.get('rounds', 0))} rounds. "
        f"ε = {eps} at δ = {delta:g}.",
        "",
        f"Guarantee: {facts.guarantee}",
        "",
        "## What the ε is about",
        "",
        f"- Unit: {unit}",
        f"- Adjacency: {_adjacency(unit, ledger)}",
        f"- Sampling: {sampling}",
        f"- Amplification by sampling: {amplified}",
        f"- Accountant: {accountant}",
        f"- {_delta_line(delta, unit, facts)}",
    ]
    if facts.one_more_round is not None:
        n, worst = facts.one_more_round
        lines.append(
            "- Budget stop (with `privacy.target_epsilon`): exact here only because the "
            "simulation knows each round's survivors before the round (its dropouts are drawn "
            "from the seed). A deployment learns them at unmasking, after the clients trained: "
            f"its worst case is one more round with {n} survivors (the fewest SecAgg accepts), "
            f"which would take ε from {facts.epsilon:.4g} to {worst:.4g}"
        )
    if ledger.get("no_guarantee"):
        lines.append(f"- No guarantee: {ledger['no_guarantee']}")
    lines += [
        "",
        *_observer_lines(ledger),
        "## What is released, and what the guarantee does not cover",
        "",
        "Covered: nothing (no guarantee)."
        if unit == "none"
        else "Covered: the model the run releases (every round's global model and the final "
        "one) and what is computed from it alone (test metrics on the server's own split).",
        "",
        "Not covered (logged without noise):",
        "",
        *[f"- {name}: {why}" for name, why in _not_covered(facts)],
        "",
        "## Randomness",
        "",
        *_seed_lines(facts.secure_mode),
        "",
        "Samplers: Laplace noise is a discrete Laplace on a grid with the input snapped to it "
        "(every output reachable under every input; the grid adds at most 2⁻²⁰ to one "
        "release's ε); Gaussian noise is PyTorch's floating-point sampler, analysed as an "
        "ideal Gaussian, as in Opacus and TF-Privacy (docs/privacy.md, Samplers).",
        "",
        "## Events (from privacy_ledger.json)",
        "",
        *_events(unit, ledger),
        "Recompute the ε from the ledger with dp-accounting alone: "
        "`fl_lightning.privacy.accounting.recompute.headline_epsilon` "
        "(docs/privacy.md, The check).",
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "NOT_COVERED",
    "SCALE",
    "SCALE_SOURCE",
    "SIMULATION_CLAUSE",
    "RunFacts",
    "makes_claim",
    "plain_reading",
    "privacy_statement",
    "scale_tier",
    "with_seed_clause",
]
