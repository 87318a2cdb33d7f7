"""Pairwise masking with dropout recovery (Bonawitz et al., CCS 2017, "Practical Secure
Aggregation for Privacy-Preserving Machine Learning", §4, the double-masking protocol), with
SecAgg+'s sparse masking graph as an option (Bell et al., CCS 2020, §3: each client masks with
k neighbours of a random k-regular Harary graph instead of every other client).

Client u of the round's roster U holds an encoded vector x_u ∈ ℤ_{2^b}^d and uploads

    y_u = x_u + PRG(b_u) + Σ_{v ∈ N(u), u < v} PRG(s_{u,v}) − Σ_{v ∈ N(u), u > v} PRG(s_{u,v})
          (mod 2^b)                                                     (Bonawitz et al., §4)

where b_u is its self-mask seed and s_{u,v} = s_{v,u} the seed it agreed with neighbour v.
Clients that drop after masking never deliver y_u. In the unmasking round each survivor
reveals what the protocol lets the server reconstruct: its own b_u, and s_{u,v} for each
dropped neighbour v (in the real protocol the server reconstructs these from t-out-of-n
Shamir shares; never both b_u and s_{u,·} of one client). The server subtracts them:

    Σ_{u ∈ S} y_u − Σ_{u ∈ S} PRG(b_u) − Σ_{u ∈ S, v ∈ N(u) ∖ S} ±PRG(s_{u,v}) = Σ_{u ∈ S} x_u
    (mod 2^b), exactly: pairs of survivors cancel, every other term was removed.

**A split survivors' graph unmasks a part.** Under SecAgg+ the survivors' pair masks cancel
only along edges of the masking graph restricted to the survivors S. When that graph falls
into several connected components, the uploads of one component A, minus A's self masks and
A's pair masks with dropped neighbours (all revealed), are Σ_{u ∈ A} x_u: the server reads
each component's sum on its own, and a survivor whose neighbours all dropped (a component of
one) hands it its encoded update plus only its own noise share. The guarantee prices the sum
over all of S, so a survivor reveals nothing unless S is one component
(:func:`survivor_components`; Bell et al. 2020 choose k so that this holds with high
probability for a bounded dropout rate); ``strategies/distributed_dp.py`` aborts such a round.

**What is simulated.** Key agreement (Diffie–Hellman) is replaced by seeds derived from the
run's keyed generators, ``derive_seed(seed, round, u, v, "secagg_pair")``: in
``privacy.secure_mode`` the first key is the run's secret, otherwise the public seed (research
simulation: whoever knows the seed can unmask). Shamir sharing of the seeds is not run: a
survivor's reveal hands the server the reconstructed seed directly. The server object
(:class:`SecAggServer`) is built so that it receives only :class:`MaskedUpload` and
:class:`Reveal` objects; the tests check that nothing it can reach is a client's unmasked
vector and that one masked vector is uniform.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from fl_lightning.utils.rng import derive_seed, generator_for


@dataclass(frozen=True)
class RoundKeys:
    """The round's key material, as the simulation derives it (module docstring).

    Attributes:
        seed: the first key of the run's generators (the secret in secure mode).
        round_idx: the round.
    """

    seed: int
    round_idx: int

    def pair_seed(self, u: int, v: int) -> int:
        """s_{u,v} = s_{v,u}: the seed clients u and v agree on (DH in the real protocol)."""
        a, b = (u, v) if u < v else (v, u)
        return derive_seed(self.seed, self.round_idx, a, b, "secagg_pair")

    def self_seed(self, u: int) -> int:
        """b_u: client u's self-mask seed."""
        return derive_seed(self.seed, self.round_idx, u, "secagg_self")


def mask_vector(seed: int, dim: int, bits: int) -> torch.Tensor:
    """PRG(seed): ``dim`` uniform integers in [0, 2^b) from a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1 << bits, (dim,), generator=g, dtype=torch.int64, device=g.device)


def masking_graph(
    roster: Sequence[int], neighbours: int | None, *, keys: RoundKeys
) -> dict[int, frozenset[int]]:
    """N(u) for every u of ``roster``: every other client (``neighbours`` None, Bonawitz et al.)
    or SecAgg+'s Harary graph H_{k,n} on a random ring (Bell et al. 2020, §3): the roster
    shuffled by a generator all parties share, each client joined to the ⌈k/2⌉ next clients on
    the ring, so to ⌈k/2⌉ on each side (k = ``neighbours``; k ≥ n − 1: every other client)."""
    ids = [int(c) for c in roster]
    n = len(ids)
    if neighbours is None or neighbours >= n - 1:
        return {u: frozenset(v for v in ids if v != u) for u in ids}
    g = generator_for(keys.seed, keys.round_idx, "secagg_graph")
    ring = [ids[i] for i in torch.randperm(n, generator=g, device=g.device).tolist()]
    graph: dict[int, set[int]] = {u: set() for u in ids}
    for i, u in enumerate(ring):
        for step in range(1, neighbours // 2 + neighbours % 2 + 1):
            v = ring[(i + step) % n]
            if v != u:
                graph[u].add(v)
                graph[v].add(u)
    return {u: frozenset(vs) for u, vs in graph.items()}


def survivor_components(
    graph: dict[int, frozenset[int]], survivors: Iterable[int]
) -> list[frozenset[int]]:
    """The connected components of the masking graph restricted to ``survivors`` (largest
    first, then by smallest id): the partial sums the survivors' reveals would let the server
    unmask, one per component (module docstring)."""
    alive = {int(s) for s in survivors}
    left, parts = set(alive), []
    while left:
        start = min(left)
        seen, stack = {start}, [start]
        while stack:
            for v in graph.get(stack.pop(), frozenset()):
                if v in alive and v not in seen:
                    seen.add(v)
                    stack.append(v)
        left -= seen
        parts.append(frozenset(seen))
    return sorted(parts, key=lambda p: (-len(p), min(p)))


@dataclass(frozen=True)
class MaskedUpload:
    """What one client sends the server: y_u, integers in [0, 2^b)."""

    client_id: int
    vector: torch.Tensor


@dataclass(frozen=True)
class Reveal:
    """What one survivor reveals in the unmasking round: its self-mask seed b_u and, for each
    dropped neighbour v, the pair seed s_{u,v} (signed as u applied it)."""

    client_id: int
    self_seed: int
    dropped_pairs: tuple[tuple[int, int, int], ...] = ()
    """(u, v, s_{u,v}) for each dropped neighbour v of u."""


class SecAggClient:
    """Client u's side of the protocol: masks its encoded vector and, if it survives,
    reveals what the unmasking round needs."""

    def __init__(
        self, client_id: int, *, keys: RoundKeys, graph: dict[int, frozenset[int]], bits: int
    ) -> None:
        self.client_id = int(client_id)
        self.keys = keys
        self.graph = graph
        self.neighbours = graph[self.client_id]
        self.bits = bits

    def mask(self, encoded: torch.Tensor) -> MaskedUpload:
        """y_u of the module docstring (``encoded`` int64, any integers: wrapped here)."""
        u, d, b = self.client_id, encoded.numel(), self.bits
        y = encoded.to(torch.int64) + mask_vector(self.keys.self_seed(u), d, b)
        for v in sorted(self.neighbours):
            m = mask_vector(self.keys.pair_seed(u, v), d, b)
            y = y + m if u < v else y - m
        return MaskedUpload(u, torch.remainder(y, 1 << b))

    def reveal(self, survivors: Iterable[int]) -> Reveal:
        """Its self seed and the pair seeds with its dropped neighbours; refused (``ValueError``)
        when the survivors' masking graph is split (:func:`survivor_components`), for the
        reveals would unmask each part on its own."""
        alive = {int(s) for s in survivors}
        u = self.client_id
        star = alive - {u} <= self.neighbours  # every survivor its neighbour: one component
        parts = [frozenset(alive)] if star else survivor_components(self.graph, alive)
        if len(parts) > 1:
            raise ValueError(
                f"secagg: client {u} does not reveal: the survivors' masking graph has "
                f"{len(parts)} components (sizes {[len(p) for p in parts]}), each of whose sums "
                "the server could unmask on its own"
            )
        pairs = tuple(
            (u, v, self.keys.pair_seed(u, v)) for v in sorted(self.neighbours) if v not in alive
        )
        return Reveal(u, self.keys.self_seed(u), pairs)


@dataclass
class SecAggServer:
    """The server's side: sums the masked uploads it receives mod 2^b and removes the masks
    the survivors' reveals allow. It is handed nothing else (no update, no encoded vector)."""

    bits: int
    dim: int
    total: torch.Tensor = field(init=False)
    received: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.total = torch.zeros(self.dim, dtype=torch.int64)

    def receive(self, upload: MaskedUpload) -> None:
        """Adds one masked upload to the running modular sum."""
        if not isinstance(upload, MaskedUpload):
            raise TypeError(f"SecAggServer.receive: a MaskedUpload, not {type(upload).__name__}")
        self.total = torch.remainder(self.total + upload.vector, 1 << self.bits)
        self.received.append(upload.client_id)

    def unmask(self, total: torch.Tensor, reveals: Iterable[Reveal]) -> torch.Tensor:
        """Σ_{u ∈ S} x_u mod 2^b from the modular sum of the survivors' uploads ``total``
        (this server's, or all processes' summed) and their reveals."""
        out = total.to(torch.int64).clone()
        for r in reveals:
            if not isinstance(r, Reveal):
                raise TypeError(f"SecAggServer.unmask: Reveal objects, not {type(r).__name__}")
            out -= mask_vector(r.self_seed, self.dim, self.bits)
            for u, v, s in r.dropped_pairs:
                m = mask_vector(s, self.dim, self.bits)
                out = out - m if u < v else out + m
        return torch.remainder(out, 1 << self.bits)


__all__ = [
    "MaskedUpload",
    "Reveal",
    "RoundKeys",
    "SecAggClient",
    "SecAggServer",
    "mask_vector",
    "masking_graph",
    "survivor_components",
]
