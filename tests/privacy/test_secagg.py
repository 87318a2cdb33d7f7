"""Secure aggregation (privacy/distributed/secagg/): the decoded sum is the survivors' encoded sum
exactly, one masked vector is uniform, the server is never handed an unmasked update, and the
encoding decodes to the clipped update up to its rounding."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from scipy import stats

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.privacy.distributed.secagg import protocol
from fl_lightning.privacy.distributed.secagg.encoding import (
    center,
    conditional_round,
    padded_dimension,
    rotate,
    rotation_signs,
    rounded_l2_bound,
    unrotate,
    walsh_hadamard,
    wrap,
)
from fl_lightning.privacy.distributed.secagg.protocol import (
    MaskedUpload,
    Reveal,
    RoundKeys,
    SecAggClient,
    SecAggServer,
    masking_graph,
)
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.distributed_dp import SecAggDistributedDP

BITS = 12


def run_protocol(encoded, dropout, *, neighbours=None, seed=3, round_idx=5):
    """Masks every client's vector, drops ``dropout`` of them after masking, unmasks."""
    ids = sorted(encoded)
    keys = RoundKeys(seed, round_idx)
    graph = masking_graph(ids, neighbours, keys=keys)
    uploads = {
        u: SecAggClient(u, keys=keys, graph=graph, bits=BITS).mask(x) for u, x in encoded.items()
    }
    g = torch.Generator().manual_seed(seed)
    dropped = set(
        torch.tensor(ids)[torch.randperm(len(ids), generator=g)][
            : round(dropout * len(ids))
        ].tolist()
    )
    survivors = [u for u in ids if u not in dropped]
    server = SecAggServer(BITS, next(iter(encoded.values())).numel())
    for u in survivors:
        server.receive(uploads[u])
    reveals = [
        SecAggClient(u, keys=keys, graph=graph, bits=BITS).reveal(survivors) for u in survivors
    ]
    return server.unmask(server.total, reveals), survivors, uploads


@pytest.mark.parametrize("neighbours", [None, 4])
@pytest.mark.parametrize("dropout", [0.0, 0.1, 0.3])
def test_decoded_sum_is_the_survivors_encoded_sum_exactly(dropout, neighbours):
    g = torch.Generator().manual_seed(1)
    encoded = {u: torch.randint(-3000, 3000, (257,), generator=g) for u in range(0, 40, 2)}
    total, survivors, _ = run_protocol(encoded, dropout, neighbours=neighbours)
    assert len(survivors) == 20 - round(dropout * 20)
    want = wrap(sum(encoded[u] for u in survivors), BITS)
    assert torch.equal(total, want)  # integer equality, not a tolerance
    # the reveals are needed: without the dropped clients' pair seeds the sum is not unmasked
    _, _, uploads = run_protocol(encoded, dropout, neighbours=neighbours)
    masked_sum = wrap(sum(uploads[u].vector for u in survivors), BITS)
    assert not torch.equal(masked_sum, want)
    if dropout:
        keys = RoundKeys(3, 5)
        self_only = [Reveal(u, keys.self_seed(u)) for u in survivors]
        assert not torch.equal(SecAggServer(BITS, 257).unmask(masked_sum, self_only), want)


def test_secagg_plus_graph_is_sparse_and_symmetric():
    keys = RoundKeys(0, 0)
    graph = masking_graph(list(range(50)), 6, keys=keys)
    assert all(len(n) == 6 for n in graph.values())
    assert all(u in graph[v] for u, ns in graph.items() for v in ns)
    full = masking_graph(list(range(5)), None, keys=keys)
    assert all(len(n) == 4 for n in full.values())


def test_one_masked_vector_is_uniform():
    """A chi-square test of one client's masked upload against U[0, 2^b), for a fixed and very
    non-uniform encoded input; the unmasked input (the negative control) fails the same test."""
    d, bits = 1 << 14, 6
    keys = RoundKeys(11, 2)
    graph = masking_graph([1, 2, 3], None, keys=keys)
    encoded = torch.zeros(d, dtype=torch.int64)
    encoded[: d // 2] = 5
    masked = SecAggClient(1, keys=keys, graph=graph, bits=bits).mask(encoded).vector

    def p_value(x):
        counts = torch.bincount(x, minlength=1 << bits).double().numpy()
        return stats.chisquare(counts).pvalue

    assert p_value(masked) > 1e-3
    assert p_value(wrap(encoded, bits)) < 1e-12
    # and it is uncorrelated with the input
    r = stats.pearsonr(masked.double().numpy(), encoded.double().numpy()).statistic
    assert abs(r) < 4 / math.sqrt(d)


def test_walsh_hadamard_is_orthonormal_and_rotation_inverts():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, dtype=torch.float64, generator=g)
    signs = rotation_signs(padded_dimension(300), generator=g)
    y = rotate(x, signs)
    assert y.numel() == 512
    assert torch.linalg.vector_norm(y).item() == pytest.approx(torch.linalg.vector_norm(x).item())
    torch.testing.assert_close(unrotate(y, signs, 300), x)
    e = torch.zeros(4, dtype=torch.float64)
    e[0] = 1
    torch.testing.assert_close(walsh_hadamard(e), torch.full((4,), 0.5, dtype=torch.float64))


def test_conditional_rounding_is_unbiased_and_within_its_bound():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, dtype=torch.float64, generator=g) * 10 - 5
    norm = float(torch.linalg.vector_norm(x))
    bound = rounded_l2_bound(norm, math.exp(-0.5), 64)
    draws = torch.stack([conditional_round(x, bound, generator=g) for _ in range(2000)]).double()
    assert float(torch.linalg.vector_norm(draws, dim=1).max()) <= bound
    # conditioning on the norm biases it slightly (Kairouz et al., Prop. 22); the mean stays close
    assert float((draws.mean(0) - x).abs().max()) < 0.08
    assert torch.equal(
        center(torch.tensor([0, 2047, 2048, 4095]), 12), torch.tensor([0, 2047, -2048, -1])
    )


# -- the component on a round: the server side never holds an unmasked update ---------------------
@dataclasses.dataclass
class Spec:
    num_parameters: int = 100
    num_clients: int = 10
    sampling: CohortSampling = CohortSampling("poisson", 0.5, 10)

    def cohort_noise_multiplier(self, sigma, *, target_epsilon=None):
        return sigma


def context(cohort, dim=100):
    return RoundContext(
        round_idx=3,
        total_rounds=5,
        seed=7,
        num_clients=10,
        cohort=cohort,
        expected_cohort_size=5.0,
        sample_rate=0.5,
        global_params=torch.zeros(dim),
        sampling=CohortSampling("poisson", 0.5, 10),
    )


def tensors_in(obj, seen=None):
    """Every tensor reachable from ``obj`` through attributes, dataclass fields and containers."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v, seen)]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [t for v in obj for t in tensors_in(v, seen)]
    if hasattr(obj, "__dict__"):
        return [t for v in vars(obj).values() for t in tensors_in(v, seen)]
    if dataclasses.is_dataclass(obj):
        return [t for f in dataclasses.fields(obj) for t in tensors_in(getattr(obj, f.name), seen)]
    return []


def leaks(t, secrets):
    """Whether ``t`` is (or is strongly correlated with) one of the client-side vectors."""
    for s in secrets:
        if t.numel() == s.numel():
            a, b = t.double().flatten(), s.double().flatten()
            if torch.equal(a, b) or abs(stats.pearsonr(a.numpy(), b.numpy()).statistic) > 0.5:
                return True
    return False


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_the_server_side_never_receives_an_unmasked_update(mechanism, monkeypatch):
    dp = SecAggDistributedDP(
        mechanism=mechanism, bits=16, clip_norm=1.0, noise_multiplier=0.1, dropout_rate=0.3
    )
    dp.setup(Spec())
    ctx = context([0, 2, 4, 6, 8, 9])
    g = torch.Generator().manual_seed(0)
    secrets, updates = [], []
    for cid in ctx.cohort:
        delta = torch.randn(100, generator=g)
        update = ClientUpdate(cid, delta.clone(), 10, 0.0)
        clipped = delta * min(1.0, 1.0 / float(delta.norm()))
        cg = torch.Generator().manual_seed(100 + cid)
        secrets += [
            clipped,
            dp.encode(clipped.clone(), ctx, generator=torch.Generator().manual_seed(100 + cid)),
        ]
        updates.append(dp.on_client(update, ctx, generator=cg))
    received: list = []
    for name in ("receive", "unmask"):
        original = getattr(SecAggServer, name)

        def spy(self, *args, _original=original, **kwargs):
            received.append(args)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(SecAggServer, name, spy)
    partial = dp.partial(updates, ctx)
    delta, observed = dp.release(partial, ctx, generator=torch.Generator())
    handed = tensors_in(updates) + tensors_in(received) + [partial]
    assert handed and not any(leaks(t, secrets) for t in handed)
    assert all(isinstance(a[0], MaskedUpload) for a in received if len(a) == 1)
    assert any(isinstance(r, Reveal) for a in received if len(a) == 2 for r in a[1])
    # what the server decodes is the survivors' sum, and that is all it gets
    survivors = dp.survivors(ctx)
    assert 2 <= len(survivors) < len(ctx.cohort) and observed["secagg_survivors"] == len(survivors)
    want = sum(s for i, s in enumerate(secrets[0::2]) if ctx.cohort[i] in survivors) / 5.0
    assert float((delta - want).abs().max()) < 0.2  # σ = 0.1 on the sum, over m = 5


def test_a_leaking_client_path_is_caught(monkeypatch):
    """The negative control: a component that uploads the encoded vector unmasked fails the
    same check."""
    monkeypatch.setattr(
        protocol.SecAggClient,
        "mask",
        lambda self, x: MaskedUpload(self.client_id, wrap(x, self.bits)),
    )
    dp = SecAggDistributedDP(mechanism="ddg", bits=16, noise_multiplier=0.1)
    dp.setup(Spec())
    ctx = context([0, 1, 2])
    delta = torch.randn(100, generator=torch.Generator().manual_seed(0))
    delta /= delta.norm()
    secret = dp.encode(delta.clone(), ctx, generator=torch.Generator().manual_seed(5))
    update = dp.on_client(
        ClientUpdate(0, delta.clone(), 1, 0.0), ctx, generator=torch.Generator().manual_seed(5)
    )
    assert leaks(update.delta, [secret])
