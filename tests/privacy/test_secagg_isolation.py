"""SecAgg+ cannot isolate a client (issue 55): with ``neighbours: k`` and dropouts, a survivor
whose neighbours all dropped reveals its self-mask seed and its pair seeds with the dropped,
so the server would unmask its encoded update with only its own noise share. A round whose
survivors' masking graph is split is aborted (no upload unmasked, no release, no spend) and
counted as aborted; the attack, run on what the server receives (masked uploads and reveals),
recovers the isolated client's update with the check removed and nothing with it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fl_lightning.privacy.accounting.events import CohortSampling, RoundPrivacy
from fl_lightning.privacy.distributed.accounting import round_rdp
from fl_lightning.privacy.distributed.secagg import protocol
from fl_lightning.privacy.distributed.secagg.encoding import wrap
from fl_lightning.privacy.distributed.secagg.protocol import (
    MaskedUpload,
    Reveal,
    SecAggClient,
    SecAggServer,
    mask_vector,
    survivor_components,
)
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import ClientUpdate
from fl_lightning.strategies.distributed_dp import SecAggDistributedDP
from fl_lightning.testing import round_context

CLIENTS, DIM, BITS = 20, 64, 16  # the audit's 20 clients a round, 30 % dropout
K = 4  # k = 2 is refused at set-up (98.7 % of its rounds split); k = 4 splits 37 %


@dataclasses.dataclass
class Spec:
    num_parameters: int = DIM
    num_clients: int = CLIENTS
    sampling: CohortSampling = CohortSampling("fixed", 1.0, CLIENTS)


def secagg_plus(neighbours: int = K) -> SecAggDistributedDP:
    dp = SecAggDistributedDP(
        bits=BITS, noise_multiplier=1.0, dropout_rate=0.3, neighbours=neighbours
    )
    dp.setup(Spec())
    return dp


def ctx_of(round_idx: int):
    return round_context(DIM, range(CLIENTS), round_idx=round_idx, seed=11)


def isolated_round() -> tuple[int, int]:
    """The first round (of 40) with a survivor whose neighbours all dropped, and that client."""
    dp = secagg_plus()
    for r in range(40):
        arrived, _ = dp.arrivals(ctx_of(r))
        parts = survivor_components(dp._round(ctx_of(r))["graph"], arrived)
        alone = [min(p) for p in parts if len(p) == 1]
        if alone:
            return r, alone[0]
    raise AssertionError("no isolated survivor in 40 rounds")


def server_round(dp: SecAggDistributedDP, ctx, monkeypatch):
    """One round as the clients and the server run it; returns what the server received
    (masked uploads, reveals), each client's encoded vector (client side), the release."""
    encoded: dict[int, torch.Tensor] = {}
    encode = dp.encode

    def spy_encode(delta, ctx, *, generator):
        out = encode(delta, ctx, generator=generator)
        encoded[len(encoded)] = out
        return out

    monkeypatch.setattr(dp, "encode", spy_encode)
    uploads: list[MaskedUpload] = []
    reveals: list[Reveal] = []
    receive, unmask = SecAggServer.receive, SecAggServer.unmask

    def spy_receive(self, upload):
        uploads.append(upload)
        return receive(self, upload)

    def spy_unmask(self, total, rs):
        rs = list(rs)
        reveals.extend(rs)
        return unmask(self, total, rs)

    monkeypatch.setattr(SecAggServer, "receive", spy_receive)
    monkeypatch.setattr(SecAggServer, "unmask", spy_unmask)
    g = torch.Generator().manual_seed(0)
    delivered = []
    for cid in ctx.cohort:
        delta = torch.randn(DIM, generator=g)
        update = ClientUpdate(cid, delta / delta.norm(), 10, 0.5)
        out = dp.on_client(update, ctx, generator=torch.Generator().manual_seed(100 + cid))
        delivered.append(dp.deliver(out, ctx))
    by_client = {cid: encoded[i] for i, cid in enumerate(ctx.cohort)}
    partial = dp.partial([u for u in delivered if u is not None], ctx)
    release = dp.release(partial, ctx, generator=torch.Generator())
    return uploads, reveals, by_client, release


def attack(graph, uploads: list[MaskedUpload], reveals: list[Reveal]) -> dict[int, torch.Tensor]:
    """The server's isolated-survivor attack on what it received: each survivor alone in its
    component of the masking graph whose reveal arrived, unmasked on its own."""
    ys = {u.client_id: u.vector for u in uploads}
    by = {r.client_id: r for r in reveals}
    out = {}
    for part in survivor_components(graph, ys):
        if len(part) != 1 or not part <= by.keys():
            continue
        (u,) = part
        x = ys[u] - mask_vector(by[u].self_seed, ys[u].numel(), BITS)
        for a, b, s in by[u].dropped_pairs:
            m = mask_vector(s, ys[u].numel(), BITS)
            x = x - m if a < b else x + m
        out[u] = torch.remainder(x, 1 << BITS)
    return out


def test_the_attack_recovers_an_isolated_survivor_without_the_check(monkeypatch):
    """The negative control: with the connectivity check removed (the code before issue 55),
    the server unmasks the isolated client's encoded update, its own noise share only."""
    r, victim = isolated_round()
    whole = lambda graph, survivors: [frozenset(int(s) for s in survivors)]  # noqa: E731
    monkeypatch.setattr("fl_lightning.strategies.distributed_dp.survivor_components", whole)
    monkeypatch.setattr(protocol, "survivor_components", whole)
    dp, ctx = secagg_plus(), ctx_of(r)
    uploads, reveals, encoded, (delta, observed) = server_round(dp, ctx, monkeypatch)
    recovered = attack(dp._round(ctx)["graph"], uploads, reveals)
    assert victim in recovered and observed["secagg_aborted"] == 0.0
    assert torch.equal(recovered[victim], wrap(encoded[victim], BITS))


def test_a_round_with_an_isolated_survivor_is_aborted_and_the_attack_recovers_nothing(
    monkeypatch,
):
    r, victim = isolated_round()
    dp, ctx = secagg_plus(), ctx_of(r)
    uploads, reveals, _, (delta, observed) = server_round(dp, ctx, monkeypatch)
    assert uploads == [] and reveals == []  # nothing unmasked, nothing summed
    assert attack(dp._round(ctx)["graph"], uploads, reveals) == {}
    assert not delta.any()  # no release
    assert observed["secagg_aborted"] == observed["secagg_split"] == 1.0
    assert observed["secagg_survivors"] == 0.0
    (event,) = dp.round_privacy(ctx).distributed
    assert event.survivors == 0 and not any(round_rdp(event))  # no spend


def test_a_survivor_refuses_to_reveal_into_a_split_graph():
    r, victim = isolated_round()
    dp, ctx = secagg_plus(), ctx_of(r)
    arrived, components = dp.arrivals(ctx)
    assert components > 1
    client = SecAggClient(victim, keys=dp._round(ctx)["keys"], graph=dp._round(ctx)["graph"],
                          bits=BITS)  # fmt: skip
    with pytest.raises(ValueError, match="does not reveal"):
        client.reveal(arrived)


def test_secagg_plus_at_k2_and_30_percent_is_refused_before_any_round():
    """The audit's setting (20 clients, k = 2, 30 % dropout) splits 98.7 % of its rounds: it
    would release (almost) nothing, so set-up refuses it in one line naming the field."""
    refusal = r"^strategy\.neighbours: 2 at strategy\.dropout_rate 0\.3 splits"
    with pytest.raises(ValueError, match=refusal):
        secagg_plus(2)


def test_secagg_plus_releases_no_sum_of_a_split_graph():
    """40 rounds of 20 clients at k = 4 (accepted: 37 % of rounds split): every round whose
    survivors' graph is split, isolated survivors included, is aborted and priced at nothing;
    every released round's survivors are one component."""
    dp = secagg_plus()
    isolated = split = 0
    for r in range(40):
        ctx = ctx_of(r)
        arrived, components = dp.arrivals(ctx)
        parts = survivor_components(dp._round(ctx)["graph"], arrived)
        isolated += sum(len(p) == 1 for p in parts)
        survivors = dp.survivors(ctx)
        if components > 1:
            split += 1
            assert survivors == [] and dp.round_privacy(ctx).distributed[0].survivors == 0
        else:
            assert len(survivor_components(dp._round(ctx)["graph"], survivors)) == 1
    assert isolated > 0 and split > 0


@pytest.mark.parametrize("neighbours", [4])
def test_aborted_rounds_are_counted_and_named_in_the_guarantee(neighbours):
    dp = SecAggDistributedDP(
        bits=BITS, noise_multiplier=1.0, dropout_rate=0.3, neighbours=neighbours
    )
    dp.setup(Spec())
    accountant = PrivacyAccountant("rdp", 1e-5)
    events = [dp.round_privacy(ctx_of(r)).distributed[0] for r in range(8)]
    released = [e.survivors for e in events if e.survivors > 0]
    aborted = len(events) - len(released)
    for e in events:
        accountant.record(RoundPrivacy(distributed=[e]))
    report = accountant.report()
    assert report["privacy/secagg_aborted_rounds"] == aborted > 0
    assert report["privacy/secagg_survivors_min"] == min(released, default=0)
    if released:  # k = 4: about 37 % of rounds abort
        words = f"n ≥ {min(released)} surviving clients in each round released, {aborted} of 8"
    else:  # k = 2: every round of 20 clients at 30 % dropout aborts
        words = "all 8 rounds aborted, nothing released"
    assert words in report["privacy/guarantee"]
