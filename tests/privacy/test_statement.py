"""``privacy_statement.md`` (privacy/statement.py): built from the ledger, it names the unit,
adjacency, sampling and amplification, accountant, δ against 1/N, what is not covered, the
seed caveat and each event's parameters; the seed clause of the sentence."""

from __future__ import annotations

from fl_lightning.privacy.accountant import PrivacyAccountant
from fl_lightning.privacy.events import LocalRelease, RoundPrivacy, SampledGaussian
from fl_lightning.privacy.statement import (
    NOT_COVERED,
    SIMULATION_CLAUSE,
    RunFacts,
    privacy_statement,
    with_seed_clause,
)


def _facts(acc: PrivacyAccountant, *, clients: int = 40, secure: bool = False) -> RunFacts:
    report = acc.report()
    return RunFacts(
        num_clients=clients,
        num_records=clients * 100,
        secure_mode=secure,
        accountant_name="RDP accountant (Opacus)",
        epsilon=report["privacy/epsilon"],
        guarantee=report["privacy/guarantee"],
        strategy="DPFedAvg",
    )


def _ledger(acc: PrivacyAccountant) -> dict:
    return {"accountant": acc.accountant, "delta": acc.delta, **acc.state_dict()}


def test_client_level_statement_names_everything_and_every_event():
    acc = PrivacyAccountant("rdp", 1e-5)
    for _ in range(3):
        acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.5, 1, 0)]))
    acc.record(RoundPrivacy(client_level=[SampledGaussian(2.0, 0.5, 1, 0)]))
    text = privacy_statement(_ledger(acc), _facts(acc))
    assert "- Unit: client" in text
    assert "add/remove one client" in text
    assert "Poisson cohorts, each client with probability q = 0.5" in text
    assert "Amplification by sampling: yes" in text
    assert "RDP accountant (Opacus)" in text
    assert "1/N = 1/40 clients = 0.025: δ < 1/N" in text
    assert "| 1–3 | Gaussian, noise multiplier σ = 1.5 | Poisson, q = 0.5 |" in text
    assert "| 4–4 | Gaussian, noise multiplier σ = 2 | Poisson, q = 0.5 |" in text
    for name, _ in NOT_COVERED:
        assert name in text
    assert "`train/loss`" in text and "`round/cohort_size`" in text
    assert SIMULATION_CLAUSE in text
    secure_acc = PrivacyAccountant("rdp", 1e-5, secure_mode=True)
    secure_acc.load_state_dict(acc.state_dict())
    secure = privacy_statement(_ledger(secure_acc), _facts(secure_acc, secure=True))
    assert SIMULATION_CLAUSE not in secure and "which is therefore a secret" in secure


def test_local_statement_lists_upload_ledgers_and_flags_a_large_delta():
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(RoundPrivacy(local={3: [LocalRelease(0.5, 0.0, "coordinate", 100)]}))
    acc.record(RoundPrivacy(local={3: [LocalRelease(0.5, 0.0, "coordinate", 100)]}))
    text = privacy_statement(_ledger(acc), _facts(acc))
    assert "- Unit: local" in text and "Amplification by sampling: no" in text
    assert "| 3 | 0.5 | 0 | coordinate | 100 | 2 |" in text
    big = PrivacyAccountant("rdp", 0.1)
    big.record(RoundPrivacy(local={0: [LocalRelease(1.0, 0.0, "upload", 1)]}))
    assert "δ ≥ 1/N" in privacy_statement(_ledger(big), _facts(big, clients=40))


def test_seed_clause_only_on_claims_and_only_in_simulation():
    claim = "client-level (1, 1e-05)-DP, add/remove one client"
    assert with_seed_clause(claim, secure_mode=False) == f"{claim}; {SIMULATION_CLAUSE}"
    assert with_seed_clause(claim, secure_mode=True) == claim
    for nothing in ("none: not private (x)", "no release yet, ε = 0", "nothing released: no"):
        assert with_seed_clause(nothing, secure_mode=False) == nothing
    acc = PrivacyAccountant("rdp", 1e-5, secure_mode=True)
    acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.5, 1, 0)]))
    assert SIMULATION_CLAUSE not in acc.report()["privacy/guarantee"]
