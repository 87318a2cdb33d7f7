"""How often SecAgg+'s survivors' masking graph splits, exactly (issue 55).

A round whose survivors' masking graph has several connected components is aborted
(``strategies/distributed_dp.py``): the survivors' reveals would let the server unmask each
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

Computing it: cut the ring at the first survivor, at position i (the i clients before it
dropped, probability r^i·p), and walk the n − 1 − i clients after it, keeping the run of
dropped clients since the last survivor (capped at h), the long gaps closed so far (0, 1, 2 or
more) and whether a second survivor came. The ring closes with the last run and the first i
dropped clients as one gap, long iff run + i ≥ h. One walk gives every i (the states after
L steps serve i = n − 1 − L), so the probability costs O(n·h).
"""

from __future__ import annotations

import numpy as np


def split_probability(clients: int, neighbours: int | None, dropout_rate: float) -> float:
    """P(the survivors' masking graph of a round of ``clients`` clients has several
    components), each client dropping with probability ``dropout_rate`` (module docstring);
    0 for pairwise masking with everyone (``neighbours`` None) or k ≥ n − 1."""
    n, r = int(clients), float(dropout_rate)
    if neighbours is None or neighbours >= n - 1 or r <= 0.0 or n < 2:
        return 0.0
    h, p = -(-int(neighbours) // 2), 1.0 - r
    # state[run, long, more]: run of dropped clients since the last survivor (capped at h),
    # long gaps closed (capped at 2), whether a survivor came after the first
    state = np.zeros((h + 1, 3, 2))
    state[0, 0, 0] = 1.0
    after = [state]
    for _ in range(n - 1):
        dropped = np.zeros_like(state)
        dropped[1:] = state[:-1]
        dropped[h] += state[h]
        survived = np.zeros_like(state)
        closed = state.sum(axis=2)  # a survivor: the run closes a gap, a second survivor came
        survived[0, :, 1] = closed[:h].sum(axis=0)
        survived[0, 1:, 1] += closed[h, :2]
        survived[0, 2, 1] += closed[h, 2]
        state = r * dropped + p * survived
        after.append(state)
    runs = np.arange(h + 1)[:, None]
    total = 0.0
    for i in range(n):  # the first survivor at position i
        last = after[n - 1 - i][:, :, 1]  # a second survivor came
        closing = (runs + i >= h).astype(float)  # the gap across the cut is long
        long_total = np.arange(3)[None, :] + closing
        total += r**i * p * float(last[long_total >= 2].sum())
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
