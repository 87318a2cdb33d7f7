"""How often SecAgg+'s survivors' masking graph splits, exactly (issue 55).

A round whose survivors' masking graph has several connected components is aborted
(``privacy/distributed_dp.py``): the survivors' reveals would let the server unmask each
component's sum on its own (``protocol.py``). Bell et al. (CCS 2020, §3) choose the number of
neighbours k so that the graph stays connected with high probability for a bounded dropout
rate; this module gives that probability for the graph ``protocol.masking_graph`` builds, so a
configuration can say before any work how many of its rounds will abort.

The graph: the n clients of the round on a random ring, each joined to the h = ⌈k/2⌉ next
clients on each side (complete when k ≥ n − 1). Each client survives independently with
probability p = 1 − r. Between two survivors adjacent on the ring lie g dropped clients;
they are joined iff g < h, and no edge of the graph crosses a run of h or more dropped
clients. So the survivors' graph is connected iff at most one of the s cyclic gaps between
consecutive survivors is h or more (one such gap leaves a path; two cut the ring in two).

Counting: a string of survivors with a marked survivor is a start position (n) and the
composition (g_1, …, g_s) of the n − s dropped clients into the gaps that follow, so a gap
pattern is met by (n/s)·#compositions strings. Compositions of m into s parts, each < h, are
A(s, m) = Σ_j (−1)^j C(s, j) C(m − jh + s − 1, s − 1) (inclusion–exclusion), and those of at
most M into s parts are B(s, M) = Σ_j (−1)^j C(s, j) C(M − jh + s, s). With exactly one gap of
h or more (s choices of which, its size g ≥ h, the others < h): s·B(s − 1, m − h).

    P(split) = Σ_{s=2}^{n} p^s r^(n−s) [C(n, s) − (n/s)(A(s, n−s) + s·B(s−1, n−s−h))]

(exact integers, then one float per s).
"""

from __future__ import annotations

from math import comb


def _below(s: int, m: int, h: int) -> int:
    """A(s, m): compositions of m into s parts, each < h."""
    if m < 0:
        return 0
    return sum((-1) ** j * comb(s, j) * comb(m - j * h + s - 1, s - 1) for j in range(m // h + 1))


def _below_up_to(s: int, top: int, h: int) -> int:
    """B(s, top): compositions of at most ``top`` into s parts, each < h."""
    if top < 0:
        return 0
    return sum((-1) ** j * comb(s, j) * comb(top - j * h + s, s) for j in range(top // h + 1))


def split_probability(clients: int, neighbours: int | None, dropout_rate: float) -> float:
    """P(the survivors' masking graph of a round of ``clients`` clients has several
    components), each client dropping with probability ``dropout_rate`` (module docstring);
    0 for pairwise masking with everyone (``neighbours`` None) or k ≥ n − 1."""
    n, r = int(clients), float(dropout_rate)
    if neighbours is None or neighbours >= n - 1 or r <= 0.0 or n < 2:
        return 0.0
    h, p = -(-int(neighbours) // 2), 1.0 - r
    total = 0.0
    for s in range(2, n + 1):
        m = n - s
        connected = n * (_below(s, m, h) + s * _below_up_to(s - 1, m - h, h))
        split = comb(n, s) - connected // s
        if split:
            total += split * p**s * r**m
    return min(max(total, 0.0), 1.0)


def fewest_neighbours(clients: int, dropout_rate: float, *, at_most: float) -> int:
    """The smallest k whose split probability is ≤ ``at_most`` (n − 1, pairwise masking with
    everyone, when no smaller k is)."""
    n = int(clients)
    for k in range(2, max(n - 1, 2), 2):  # odd k builds the graph of k + 1 (h = ⌈k/2⌉)
        if split_probability(n, k, dropout_rate) <= at_most:
            return k
    return max(n - 1, 1)


__all__ = ["fewest_neighbours", "split_probability"]
