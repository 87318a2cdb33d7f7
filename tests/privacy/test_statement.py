"""``privacy_statement.md`` (privacy/guarantee/statement.py): built from the ledger, it names the
unit, adjacency, sampling and amplification, accountant, δ against 1/N, what is not covered, the
seed caveat and each event's parameters; the seed clause of the sentence."""

from __future__ import annotations

from fl_lightning.privacy.accounting.events import LocalRelease, RoundPrivacy, SampledGaussian
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.privacy.guarantee.statement import (
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
    assert "Amplification by sampling: against a third party (the headline ε)" in text
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


def test_the_statement_opens_with_the_plain_reading_and_the_scale():
    from fl_lightning.privacy.guarantee.statement import SCALE_SOURCE, scale_tier

    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.5, 1, 0)]))
    text = privacy_statement(_ledger(acc), _facts(acc))
    opening = text.split("\n\n")[1]
    eps = acc.report()["privacy/epsilon"]
    assert opening.startswith("Someone who sees everything this run released")
    assert "odds that a given client took part in training by at most a factor e^ε" in opening
    assert (
        "plus at most δ = 1e-05: the probability of any outcome changes by at most a factor e^ε, "
        f"plus at most δ. On the scale of {SCALE_SOURCE}" in opening
    )
    assert f"this ε is {scale_tier(eps)}" in opening and "nor against anyone holding" in opening
    assert opening.count("\n") == 0 and opening.endswith("who can regenerate its noise.")
    assert scale_tier(1.0).startswith("strong") and scale_tier(1.01).startswith("reasonable")
    assert scale_tier(10.0).startswith("reasonable") and scale_tier(35.8).startswith("weak")
    fixed = PrivacyAccountant("rdp", 1e-5, secure_mode=True)
    fixed.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.25, 1, 40)]))
    text = privacy_statement(_ledger(fixed), _facts(fixed, secure=True))
    assert "a given client, rather than another, took part" in text
    assert "nor against anyone holding" not in text


def test_delta_is_not_read_as_an_expected_count():
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.5, 1, 0)]))
    text = privacy_statement(_ledger(acc), _facts(acc))
    assert "expected number" not in text and "δ·N counts nothing" in text
    assert "It is not the probability that the e^ε bound fails" in text
    assert "P[privacy loss > ε] is not computed by this accountant" in text  # RDP


def test_only_files_the_run_writes_are_listed():
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, 0.5, 1, 0)]))
    without = _facts(acc).__class__(**{**_facts(acc).__dict__, "files": ("label_histogram.csv",)})
    text = privacy_statement(_ledger(acc), without)
    assert "client_times.csv" not in text and "label_histogram.csv" in text
    timed = without.__class__(**{**without.__dict__, "files": ("client_times.csv",)})
    text = privacy_statement(_ledger(acc), timed)
    assert "client_times.csv" in text and "label_histogram.csv" not in text


def test_a_run_without_a_guarantee_claims_nothing():
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.private_run = False
    acc.not_private_reason = "FedAvg uploads and aggregates updates without noise"
    acc.record(RoundPrivacy())
    text = privacy_statement(_ledger(acc), _facts(acc))
    assert "This run makes no privacy claim (not private" in text
    assert "e^ε" not in text.split("\n\n")[1] and "Covered: nothing" in text
