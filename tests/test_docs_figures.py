"""Every ε and audit figure README.md and the docs quote is what its command gives now (issue
46, item 5): the inventory below lists each one with how it is checked, and a guard fails on an
ε-looking figure that is not in it, so a new figure cannot be added unchecked.

Three kinds of check (``Figure.source`` names which and from what):

1. **Recomputed** (``accountant: …``): a figure that depends only on the mechanism's parameters
   (σ, cohort, rounds, δ, model size, read from the config the doc names where there is one) is
   computed here by the package's own accounting code (``PrivacyAccountant``, the strategy's
   setup, ``privacy/accounting/analysis.py``, the mechanisms), never typed in: the test fails when
   the code's ε changes.
2. **Stored** (``stored: <file>``): a figure that depends on a run (the cohorts a seed drew, an
   attack's scores, SVT selections, a benchmark's rows) is compared with the run output the doc
   names under ``benchmarks/results/`` (or ``docs/reports/``), which the doc's command wrote.
   Where the stored output is a ledger, the ε is recomputed from it by the accountant (kinds 1
   and 2 together).
3. **Named exceptions** (``EXCEPTIONS``, ``NamedException``): a figure no command prints now
   (a past observation, a table of a setting no longer shipped). Each names where the doc says
   it came from (a phrase the doc must keep) and why it is not re-run. Keep them rare.

``SETTINGS`` lists the ε-looking numbers that are inputs (a budget the doc chooses, a paper's
column), not figures the code computes. ``tests/test_docs_epsilon.py``'s quotes (docs/privacy.md,
docs/audit.md) count as inventory too.

Not read here: ``docs/reproductions/`` and README.md's generated results table (written by
``fl-lightning repro``, checked by ``../shared/tools/check_reproductions.py``),
``docs/privacy_table.md`` (``scripts/privacy_table.py``, ``tests/configs/test_experiments.py``).
The tutorials' output blocks are also run line by line by ``tests/test_tutorials.py`` (slow);
their ε and audit figures are checked here as well, fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fl_lightning.privacy.accounting import analysis
from fl_lightning.privacy.accounting.events import (
    CohortSampling,
    DistributedNoiseEvent,
    RoundPrivacy,
    SampledGaussian,
)
from fl_lightning.privacy.audit.one_run import planned_guess_fraction
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from tests.test_docs_epsilon import QUOTES, client_level, dp_fedavg, federation
from tests.test_docs_epsilon import dp_ftrl as dp_ftrl_report

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DELTA = 1e-5
QS, FTRL = "quickstart.yaml", "quickstart_ftrl.yaml"

# --------------------------------------------------------------------------------------------
# What the code gives now


def quickstart(accountant: str = "pld", mode: str = "poisson", sigma: float | None = None) -> dict:
    """The quickstart's report (its σ, cohorts and rounds from configs/experiment/quickstart.yaml;
    ``sigma`` overrides σ as ``--strategy.init_args.noise_multiplier`` does)."""
    return dp_fedavg(QS, accountant, mode, sigma)


def eps(report: dict) -> float:
    return float(report["privacy/epsilon"])


def tail() -> float:
    """P[privacy loss > ε] of the quickstart on PLD (``privacy/loss_tail``)."""
    return float(quickstart()["privacy/loss_tail"])


def dp_ftrl(rounds: int, accountant: str = "pld") -> float:
    """ε of the DP-FTRL quickstart (its whole-run event) planned for ``rounds`` rounds."""
    return eps(dp_ftrl_report(FTRL, accountant, rounds))


@cache
def quickstart_ledger_epsilon(accountant: str) -> float:
    """The first tutorial's step 3: the quickstart's ledger recomputed by dp-accounting alone."""
    from fl_lightning.privacy.accounting.recompute import headline_epsilon

    return headline_epsilon(quickstart()["ledger"], delta=DELTA, accountant=accountant)


def stored(path: str) -> Any:
    """A stored run output (JSON), by its path in the repository."""
    return json.loads((REPO / path).read_text())


AUDIT = "benchmarks/results/quickstart_audit.json"  # `fl-lightning audit` of docs/audit.md
CANARIES = "benchmarks/results/dp_ftrl_audit/quickstart.audit.json"  # docs/audit.md's table
ASGP = "benchmarks/results/asgp_methods_mnist_offline.json"  # docs/dp_fedasgp.md
DDP = "benchmarks/results/distributed_dp"  # docs/distributed_dp.md: the two runs' ledgers
SWEEP = "docs/reports/mnist_offline_dpsgd_methods/results.jsonl"  # docs/sweeps.md's store


def threshold(key: str) -> float:
    return float(stored(AUDIT)["attacks"]["threshold"][key])


def dlg(key: str) -> float:
    return float(stored(AUDIT)["attacks"]["dlg"][key])


def canary(key: str) -> float:
    return float(stored(CANARIES)["attacks"]["canaries"][key])


def asgp(method: str, key: str) -> float:
    """The latest recorded run of ``benchmarks/asgp_methods_mnist_offline.py``."""
    return float(stored(ASGP)[-1]["methods"][method][key])


def distributed(mechanism: str, dropped: bool = True) -> float:
    """ε of a stored distributed-DP run, recomputed from its ledger by the run's own accounting
    (``distributed_epsilon``); ``dropped=False``: the same cohorts had every client survived."""
    from fl_lightning.privacy.distributed.accounting import distributed_epsilon

    rows = stored(f"{DDP}/{mechanism}.privacy_ledger.json")["distributed"]
    events = [DistributedNoiseEvent.from_state(r) for r in rows]
    if not dropped:
        events = [dataclasses.replace(e, survivors=e.cohort) for e in events]
    return distributed_epsilon(events, DELTA)


@cache
def sweep_demo(target: float) -> float:
    """ε of a point of ``sweeps/mnist_offline_dpsgd_methods.yaml``: record-level DP-SGD with σ
    calibrated to ``target`` by the run's own rule (``resolve_client_noise``) for the config's
    clients (``configs/experiment/sweep_demo_dpsgd.yaml``: the 10,000 MNIST test images, 20 %
    held out, an IID split), then its rounds recorded. No training: ε depends on the data only
    through the clients' sizes."""
    from fl_lightning.client.config import DPSGDConfig, LocalTrainingConfig
    from fl_lightning.data.partitioners import iid
    from fl_lightning.privacy.accounting.budget import dp_sgd_event
    from fl_lightning.server.privacy_plan import resolve_client_noise

    c = yaml.safe_load((REPO / "configs" / "experiment" / "sweep_demo_dpsgd.yaml").read_text())
    privacy = yaml.safe_load((REPO / "configs" / "experiment" / c["privacy"]).read_text())
    train = round(10_000 * (1 - float(c["data"]["test_fraction"])))
    sizes = [int(s) for s in iid(np.zeros(train), int(c["data"]["num_clients"]), 0).sizes()]
    client = c["client"]
    local = LocalTrainingConfig(
        local_steps=int(client["local_steps"]),
        batch_size=int(client["batch_size"]),
        dp_sgd=DPSGDConfig(noise_multiplier=None, max_grad_norm=client["dp_sgd"]["max_grad_norm"]),
    )
    acc = PrivacyAccountant(privacy["accountant"], float(privacy["delta"]), target_epsilon=target)
    rounds = int(c["trainer"]["max_steps"])
    rate = int(c["model"]["clients_per_round"]) / len(sizes)
    params = resolve_client_noise(local, client_sizes=sizes, sampling=CohortSampling(
        "poisson", rate, len(sizes)), rounds=rounds, accountant=acc)  # fmt: skip
    assert params is not None and rate == 1.0  # every client every round: no cohort draw
    for _ in range(rounds):
        acc.record(RoundPrivacy(record_level={
            cid: [dp_sgd_event(params.noise_multiplier, batch_size=local.batch_size, size=n,
                               steps=int(client["local_steps"]))]
            for cid, n in enumerate(sizes)}))  # fmt: skip
    return eps(acc.report())


def dp_sgd_epsilon(client_yaml: str, examples: int, steps: int) -> float:
    """ε (RDP, the configs' accountant) of ``steps`` DP-SGD steps of a client holding
    ``examples`` with the batch and σ of ``configs/client/dpfl_agn/<client_yaml>``."""
    c = yaml.safe_load((REPO / "configs" / "client" / "dpfl_agn" / client_yaml).read_text())
    q = int(c["batch_size"]) / examples
    event = SampledGaussian(float(c["dp_sgd"]["noise_multiplier"]), q, steps)
    return analysis.epsilon([event], DELTA, "rdp")


AGN_DATA = (("mnist", 60_000), ("cifar10", 50_000))  # the training sets' sizes


def dpfl_agn_client(dataset: str, train: int) -> int:
    """Examples a client of the DPFL-AGN shards split holds (the full training set less the
    validation share, over the clients): ``configs/data/<dataset>/shards_400x40_10.yaml``."""
    c = yaml.safe_load((REPO / "configs" / "data" / dataset / "shards_400x40_10.yaml").read_text())
    return round(train * (1 - float(c["val_fraction"]))) // int(c["num_clients"])


SPM_RUN = REPO / "configs" / "experiment" / "spm_fl" / "quick_mnist_offline.yaml"


@cache
def spm_dimension() -> int:
    """d of the MLP of docs/spm_fl.md's runs (``configs/experiment/spm_fl/quick_mnist_offline``)."""
    from fl_lightning.models import MLP

    net = yaml.safe_load(SPM_RUN.read_text())["client"]["net"]["init_args"]
    return sum(p.numel() for p in MLP(**net).parameters())


def spm_epsilon() -> float:
    """The per-coordinate ε of those runs (their strategy file)."""
    strategy = yaml.safe_load(SPM_RUN.read_text())["strategy"]
    return float(yaml.safe_load((SPM_RUN.parent / strategy).read_text())["init_args"]["epsilon"])


def f(fmt: str, *values: Callable[[], float]) -> Callable[[], str]:
    """The figures ``values`` formatted as the doc prints them, joined by spaces."""
    return lambda: " ".join(format(v(), fmt) for v in values)


def comma(value: float) -> str:
    return f"{value:,.0f}"


# --------------------------------------------------------------------------------------------
# The inventory


@dataclass(frozen=True)
class Figure:
    """A figure a doc quotes: the text with ``{}`` for each figure compared and ``{*}`` for a
    number not compared here (an accuracy); ``now`` gives the compared figures, space-joined,
    as the code gives them now. Every occurrence of the text in the doc is checked."""

    doc: str
    quoted: str
    now: Callable[[], str]
    source: str


@dataclass(frozen=True)
class Printed:
    """Lines a command prints that a doc shows verbatim (a table it generates)."""

    doc: str
    lines: Callable[[], Sequence[str]]
    source: str


@dataclass(frozen=True)
class NamedException:
    """A figure no command prints now: ``origin`` is the doc's own words for where it came
    from (the doc must keep saying it), ``why`` why it is not re-run or recomputed."""

    doc: str
    quoted: str
    origin: str
    why: str


@dataclass(frozen=True)
class Setting:
    """An ε-looking number that is an input (a budget, a threshold, a paper's column)."""

    doc: str
    quoted: str


PLD_SENTENCE = QUOTES[0]  # docs/privacy.md's quickstart sentence, checked there
QS_EPS = f(".3f", lambda: eps(quickstart()))
QS_EPS3G = f(".3g", lambda: eps(quickstart()))

README = [
    Figure(
        "README.md",
        "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, 1e-05)-DP",
        lambda: f"{eps(quickstart()):.3f} {eps(quickstart()):.3g}",
        "accountant: PLD, configs/experiment/quickstart.yaml",
    ),
    Figure(
        "README.md",
        PLD_SENTENCE.quoted,
        PLD_SENTENCE.now,
        "accountant: PLD, configs/experiment/quickstart.yaml",
    ),
    Figure(
        "README.md",
        "| {*} | {} (client-level, add/remove one client, Poisson cohorts) |",
        f(".2f", lambda: eps(quickstart())),
        "accountant: PLD, the quickstart",
    ),
    Figure(
        "docs/index.md",
        "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, 1e-05)-DP",
        lambda: f"{eps(quickstart()):.3f} {eps(quickstart()):.3g}",
        "accountant: PLD, configs/experiment/quickstart.yaml",
    ),
    Figure(
        "docs/index.md",
        PLD_SENTENCE.quoted,
        PLD_SENTENCE.now,
        "accountant: PLD, configs/experiment/quickstart.yaml",
    ),
]

FIRST = "docs/tutorials/first_private_run.md"
CENTRAL = (
    "; against the server: ε = ∞ (central DP: it receives the clipped updates and adds the "
    "noise itself)"
)
FIXED = (
    "client-level ({}, 1e-05)-DP, replace-one client, fixed-size cohorts (20 of 40 without "
    "replacement) by their dominating pair (Zhu, Dong & Wang 2022), PLD accountant"
)
TUTORIALS = [
    Figure(
        FIRST,
        "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, 1e-05)-DP, "
        "add/remove one client, Poisson cohorts (q = 0.5), PLD accountant (dp-accounting, "
        "connect-the-dots); simulation: noise and cohorts reproducible from the seed"
        + CENTRAL
        + "; details: "
        "runs/tutorials/first_private_run/pld/",
        lambda: f"{eps(quickstart()):.3f} {eps(quickstart()):.3g}",
        "accountant: PLD",
    ),
    Figure(
        FIRST,
        "ε at δ = 1e-05 by pld: {}",
        f(".3f", lambda: quickstart_ledger_epsilon("pld")),
        "accountant: the ledger recomputed by dp-accounting's PLD "
        "(privacy/accounting/recompute.py)",
    ),
    Figure(
        FIRST,
        "ε at δ = 1e-05 by rdp: {}",
        f(".3f", lambda: quickstart_ledger_epsilon("rdp")),
        "accountant: the ledger recomputed by dp-accounting's RDP "
        "(privacy/accounting/recompute.py)",
    ),
    Figure(
        FIRST,
        "ε = {} (δ = 1e-05) against a third party; guarantee: " + FIXED,
        lambda: f"{eps(quickstart(mode='fixed')):.3f} {eps(quickstart(mode='fixed')):.3g}",
        "accountant: PLD, the quickstart with --model.sampling fixed",
    ),
    Figure(
        FIRST,
        "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, 1e-05)-DP, "
        "add/remove one client, Poisson cohorts (q = 0.5), PLD accountant (dp-accounting, "
        "connect-the-dots); simulation: noise and cohorts reproducible from the seed"
        + CENTRAL
        + "; details: "
        "runs/tutorials/first_private_run/sigma_0.75/",
        lambda: f"{eps(quickstart(sigma=0.75)):.3f} {eps(quickstart(sigma=0.75)):.3g}",
        "accountant: PLD, the quickstart at σ = 0.75",
    ),
    Figure(FIRST, "gives the printed ε = {} to the last digit", QS_EPS, "accountant: PLD"),
    Figure(
        FIRST,
        "the privacy loss exceeds ε with probability {} ({}·δ), computed from the accountant's PLD",
        lambda: f"{tail():.2g} {tail() / DELTA:.2g}",
        "accountant: PLD, the quickstart's composed PLD (privacy/loss_tail)",
    ),
    Figure(
        FIRST,
        "the privacy loss itself exceeds ε with probability {} here",
        lambda: f"{tail():.2g}",
        "accountant: PLD, the quickstart's composed PLD (privacy/loss_tail)",
    ),
    Figure(
        FIRST,
        "a looser bound for the same noise, gives {}.",
        f(".3f", lambda: quickstart_ledger_epsilon("rdp")),
        "accountant: dp-accounting RDP",
    ),
    Figure(
        FIRST,
        "the same noise ε = {} instead of {}:",
        f(".3f", lambda: eps(quickstart(mode="fixed")), lambda: eps(quickstart())),
        "accountant: PLD",
    ),
    Figure(
        FIRST,
        "costs ε = {}, the same ε as step 4",
        f(".3f", lambda: eps(quickstart(sigma=0.75))),
        "accountant: PLD, σ = 0.75",
    ),
    # the auditing tutorial's runs: the quickstart (PLD); its audit figures are the stored
    # `fl-lightning audit` run of docs/audit.md (same config, seed and attacks)
    Figure(
        "docs/tutorials/auditing.md",
        "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, "
        "1e-05)-DP, add/remove one client, Poisson cohorts (q = 0.5), PLD accountant",
        lambda: f"{eps(quickstart()):.3f} {eps(quickstart()):.3g}",
        "accountant: PLD",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "audit: accountant ε = {} (δ = 1e-05)",
        QS_EPS3G,
        "accountant: PLD",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "threshold AUC {} bal.acc {} TPR@0.1%FPR {} TPR@1%FPR {} ε_lb {} (≤ ε {})",
        lambda: " ".join(
            [
                *(
                    f"{threshold(k):.3f}"
                    for k in (
                        "auc",
                        "balanced_accuracy",
                        "tpr_at_0_1pct_fpr",
                        "tpr_at_1pct_fpr",
                        "epsilon_lower_bound",
                    )
                ),
                f"{eps(quickstart()):.3g}",
            ]
        ),
        f"stored: {AUDIT}; accountant: PLD",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "dlg recovered {}% of 4 batches (SSIM ≥ 0.8) median / mean: SSIM {} / {} PSNR {} / {} "
        "dB MSE {} / {} label acc {}",
        lambda: " ".join(
            [
                f"{100 * dlg('recovered_fraction'):.0f}",
                f"{dlg('ssim_median'):.3f}",
                f"{dlg('ssim_mean'):.3f}",
                f"{dlg('psnr_median'):.1f}",
                f"{dlg('psnr_mean'):.1f}",
                f"{dlg('mse_median'):.4f}",
                f"{dlg('mse_mean'):.4f}",
                f"{dlg('label_accuracy'):.2f}",
            ]
        ),
        f"stored: {AUDIT}",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "per-batch SSIM [{}, {}, {}, {}]",
        lambda: " ".join(f"{b['ssim']:.2f}" for b in stored(AUDIT)["attacks"]["dlg"]["per_batch"]),
        f"stored: {AUDIT}",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "members {}, non-members {}, shadow pool {}; accountant ε {}",
        lambda: " ".join(
            [
                *(str(stored(AUDIT)[k]) for k in ("num_members", "num_nonmembers", "shadow_pool")),
                f"{eps(quickstart()):.3f}",
            ]
        ),
        f"stored: {AUDIT}; accountant: PLD",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "threshold auc {}, tpr_at_1pct_fpr {}, epsilon_lower_bound {}",
        f(
            ".4f",
            lambda: threshold("auc"),
            lambda: threshold("tpr_at_1pct_fpr"),
            lambda: threshold("epsilon_lower_bound"),
        ),
        f"stored: {AUDIT}",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "observer all_models: 500 canary clients ({} inserted by fair coins, {} participations "
        "each on average): one-run estimate ε ≈ {} (95% bootstrap interval {}–{}; Andrew et al. "
        "2024), lower bound ε ≥ {} at 95% confidence ({} of {} guesses right",
        lambda: " ".join(
            format(table_row("quickstart")[k], ".3g")
            for k in (
                "inserted",
                "mean_participations",
                "epsilon_estimate",
                "epsilon_estimate_low",
                "epsilon_estimate_high",
                "epsilon_lower_bound",
                "correct_guesses",
                "guesses",
            )
        ),
        "stored: benchmarks/results/canary_audit.json (the table's quickstart row: the same run)",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "trade-off curve: μ ≥ {}, ε ≥ {}), δ = 1e-05; compared with ε = {}:",
        lambda: " ".join(
            format(table_row("quickstart")[k], ".3g")
            for k in ("gdp_mu_lower_bound", "epsilon_lower_bound_gdp", "compared_epsilon")
        ),
        "stored: benchmarks/results/canary_audit.json",
    ),
    Figure(
        "docs/tutorials/auditing.md",
        "Here the estimate is {} (interval {}–{})",
        lambda: " ".join(
            format(table_row("quickstart")[k], ".3g")
            for k in ("epsilon_estimate", "epsilon_estimate_low", "epsilon_estimate_high")
        ),
        "stored: benchmarks/results/canary_audit.json",
    ),
    # the custom-strategy tutorial: DPFedAvg σ = 1 on 8 clients, cohorts of 4 (Poisson q = 0.5),
    # the default PLD accountant, after each of its 5 rounds
    *[
        Figure(
            "docs/tutorials/custom_strategy.md",
            f"DPFedAvg σ=1 round {r}: cohort {{*}}, train/loss {{*}}, ε planned {{}}, spent {{}}",
            lambda r=r: " ".join(
                2
                * [f"{eps(client_level(1.0, CohortSampling('poisson', 0.5, 8), r + 1, 'pld')):.3f}"]
            ),
            "accountant: PLD, docs/tutorials/scripts/simulate_strategies.py's settings",
        )
        for r in range(5)
    ],
]

ASGP_SOUND = "DP-FedASGP (sound: noise everywhere, n_i/n)"
DP_FEDASGP = [
    Figure(
        "docs/dp_fedasgp.md",
        "| DP-FedASGP (published) | {}% |",
        f(".2f", lambda: 100 * asgp("DP-FedASGP (published)", "accuracy")),
        f"stored: {ASGP}",
    ),
    Figure(
        "docs/dp_fedasgp.md",
        "| DP-FedASGP (sound) | {}% | local ε = {} (basic composition, "
        "the worst client's {} rounds) |",
        lambda: (
            f"{100 * asgp(ASGP_SOUND, 'accuracy'):.2f} {asgp(ASGP_SOUND, 'privacy/epsilon'):.4g}"
            f" {asgp(ASGP_SOUND, 'privacy/uploads_max'):.0f}"
        ),
        f"stored: {ASGP}",
    ),
    Figure(
        "docs/dp_fedasgp.md",
        "| DP-FedAvg (local Laplace) | {}% | local ε = {} |",
        lambda: (
            f"{100 * asgp('DP-FedAvg (local Laplace)', 'accuracy'):.2f} "
            f"{asgp('DP-FedAvg (local Laplace)', 'privacy/epsilon'):.4g}"
        ),
        f"stored: {ASGP}",
    ),
    Figure(
        "docs/dp_fedasgp.md",
        "| cpSGD | {}% | local ({}, 1e-05)-DP (Theorem 1, {} per round) |",
        lambda: (
            f"{100 * asgp('cpSGD', 'accuracy'):.2f} {asgp('cpSGD', 'privacy/epsilon'):.3g} "
            f"{asgp('cpSGD', 'privacy/epsilon_local_per_upload'):.3g}"
        ),
        f"stored: {ASGP}",
    ),
    *[
        Figure(
            "docs/dp_fedasgp.md",
            f"| {row} | {{}}% |",
            f(".2f", lambda m=m: 100 * asgp(m, "accuracy")),
            f"stored: {ASGP}",
        )
        for row, m in (
            ("FedSMP top_k", "FedSMP top_k"),
            ("DP-FedSNLC (approx.)", "DP-FedSNLC (approx.)"),
            ("FedAvg (no privacy)", "FedAvg (no privacy)"),
        )
    ],
    Figure(
        "docs/dp_fedasgp.md",
        "Even non-private FedAvg is at {}% after 5 rounds",
        f(".2f", lambda: 100 * asgp("FedAvg (no privacy)", "accuracy")),
        f"stored: {ASGP}",
    ),
    Figure(
        "docs/dp_fedasgp.md",
        "CNN (|W| = {}M) at ε = 0.5 this is ≈ {} per round",
        lambda: (
            f"{mnist_cnn_parameters() / 1e6:.2f} "
            f"{comma(asgp_round_epsilon(mnist_cnn_parameters(), 0.5))}"
        ),
        "accountant: the strategy's defensible_round_epsilon (DPFedASGP, noise_unselected)",
    ),
]


def asgp_round_epsilon(parameters: int, epsilon: float) -> float:
    """DP-FedASGP's defensible ε of one upload of ``parameters`` coordinates (noise on every
    coordinate: ``noise_unselected``, the strategy's defaults otherwise), rounded to tens as the
    doc does."""
    from fl_lightning.strategies.dp_fedasgp import DPFedASGP

    s = DPFedASGP(epsilon=epsilon, noise_unselected=True)
    s.num_parameters = parameters
    return round(s.defensible_round_epsilon(), -1)


def mnist_cnn_parameters() -> int:
    """|W| of the default MnistCNN (``benchmarks/asgp_round_time.py``'s model)."""
    from fl_lightning.models import MnistCNN

    return sum(p.numel() for p in MnistCNN().parameters())


SWEEPS = [
    Figure(
        "docs/sweeps.md",
        "measured ε = {} / {} / {} for the targets 2 / 3 / 4 (record-level, RDP, δ = 1e-5)",
        f(".3f", *(lambda t=t: sweep_demo(t) for t in (2.0, 3.0, 4.0))),
        "accountant: RDP, sweeps/mnist_offline_dpsgd_methods.yaml's σ calibration",
    ),
    *[
        Figure(
            "docs/reports/mnist_offline_dpsgd_methods/report.md",
            f"| {method} | {t:g} | {{}} |",
            f(".3f", lambda t=t: sweep_demo(t)),
            "accountant: RDP, the sweep's σ calibration",
        )
        for method in ("DP-FedAvg", "DP-FedProx")
        for t in (2.0, 3.0, 4.0)
    ],
    *[
        Figure(
            "docs/reports/mnist_offline_dpsgd_methods/report.md",
            f"`privacy.target_epsilon={t}`, `seed_everything={{*}}` | {{*}} | {{}} |",
            f(".3f", lambda t=t: sweep_demo(t)),
            "accountant: RDP, the sweep's σ calibration",
        )
        for t in (2.0, 3.0, 4.0)
    ],
]

DDG_LINE = (
    "ε = {} (δ = 1e-05) against a third party; guarantee: client-level ({}, 1e-05)-DP, "
    "distributed DP: the server sees only the sum (SecAgg, honest-but-curious server, n ≥ {} "
    "surviving clients a round)"
)


def server_view(mechanism: str = "ddg") -> Any:
    """Each client's ε against the server of a stored distributed run, recomputed from its
    ledger's survivor sets (``observers.secure_sum_epsilons``)."""
    from fl_lightning.privacy.guarantee.observers import secure_sum_epsilons

    rows = stored(f"{DDP}/{mechanism}.privacy_ledger.json")["distributed"]
    return secure_sum_epsilons([DistributedNoiseEvent.from_state(r) for r in rows], DELTA)


def in_sums(k: int) -> list[float]:
    """The ε against the server of the stored DDG run's clients that were in ``k`` sums."""
    view = server_view()
    return sorted(e for c, e in view.epsilon.items() if view.sums[c] == k)


def ddg_events(rounds: int, **change: Any) -> list[DistributedNoiseEvent]:
    """The stored DDG run's first ``rounds`` rounds, the last with ``change`` applied."""
    rows = stored(f"{DDP}/ddg.privacy_ledger.json")["distributed"][:rounds]
    events = [DistributedNoiseEvent.from_state(r) for r in rows]
    return [*events[:-1], dataclasses.replace(events[-1], **change)]


def all_sums() -> float:
    """ε against the server of a client of the stored DDG run had it been in all 40 sums."""
    return distributed_of([dataclasses.replace(e, sample_rate=1.0) for e in ddg_events(40)])


def distributed_of(events: list[DistributedNoiseEvent]) -> float:
    from fl_lightning.privacy.distributed.accounting import distributed_epsilon

    return distributed_epsilon(events, DELTA)


DISTRIBUTED = [
    Figure(
        "docs/distributed_dp.md",
        "| `distributed_dp/ddg.yaml` | {} | {} | {} |",
        lambda: (
            f"{stored(f'{DDP}/ddg.summary.json')['test/accuracy']:.4f} "
            f"{distributed('ddg'):.3f} {distributed('ddg', dropped=False):.2f}"
        ),
        f"stored: {DDP}/ddg.*.json; accountant: distributed RDP of the stored ledger",
    ),
    Figure(
        "docs/distributed_dp.md",
        "| `distributed_dp/skellam.yaml` | {} | {} | {} |",
        lambda: (
            f"{stored(f'{DDP}/skellam.summary.json')['test/accuracy']:.4f} "
            f"{distributed('skellam'):.3f} {distributed('skellam', dropped=False):.2f}"
        ),
        f"stored: {DDP}/skellam.*.json; accountant: distributed RDP of the stored ledger",
    ),
    Figure(
        "docs/distributed_dp.md",
        "| {} (RDP), {} (PLD) | — |",
        f(".2f", lambda: eps(quickstart("rdp")), lambda: eps(quickstart())),
        "accountant: RDP (Opacus) and PLD, the quickstart",
    ),
    Figure(
        "docs/distributed_dp.md",
        DDG_LINE,
        lambda: (
            f"{distributed('ddg'):.3f} {distributed('ddg'):.3g} "
            f"{stored(f'{DDP}/ddg.summary.json')['privacy/secagg_survivors_min']:.0f}"
        ),
        f"stored: {DDP}/ddg.privacy_ledger.json",
    ),
    Figure(
        "docs/distributed_dp.md",
        "against the server: ε = {} for the mean client ({} sums), {} for the worst ({} sums)",
        lambda: (
            f"{server_view().mean_epsilon:.3g} {server_view().mean_sums:.3g} "
            f"{server_view().epsilon[server_view().worst]:.3g} "
            f"{server_view().sums[server_view().worst]}"
        ),
        f"stored: {DDP}/ddg.privacy_ledger.json (survivor sets); accountant: RDP, q = 1",
    ),
    Figure(
        "docs/distributed_dp.md",
        "i.e. ε = {} on average over the clients (a client was in {} sums on average) and {} for "
        "the worst client ({} sums), against the third party's {}:",
        lambda: (
            f"{server_view().mean_epsilon:.4g} {server_view().mean_sums:.4g} "
            f"{server_view().epsilon[server_view().worst]:.4g} "
            f"{server_view().sums[server_view().worst]} {distributed('ddg'):.3f}"
        ),
        f"stored: {DDP}/ddg.privacy_ledger.json (survivor sets); accountant: RDP, q = 1",
    ),
    Figure(
        "docs/distributed_dp.md",
        "the six clients in 18 sums have ε = {} to {}, and a client in all 40 sums would have had "
        "ε = {}.",
        lambda: f"{in_sums(18)[0]:.2f} {in_sums(18)[-1]:.2f} {all_sums():.2f}",
        f"stored: {DDP}/ddg.privacy_ledger.json (survivor sets); accountant: RDP, q = 1",
    ),
    Figure(
        "docs/distributed_dp.md",
        "The headline ε ({} above)",
        lambda: f"{distributed('ddg'):.3f}",
        f"stored: {DDP}/ddg.privacy_ledger.json",
    ),
    Figure(
        "docs/distributed_dp.md",
        "after 10 rounds ε = {}; an 11th round with 2 survivors would take it to {} (its actual "
        "11th round, with {} survivors: {}).",
        lambda: (
            f"{distributed_of(ddg_events(10)):.3f} "
            f"{distributed_of([*ddg_events(10), ddg_events(10, survivors=2)[-1]]):.2f} "
            f"{ddg_events(11)[-1].survivors} {distributed_of(ddg_events(11)):.2f}"
        ),
        f"stored: {DDP}/ddg.privacy_ledger.json; accountant: distributed RDP",
    ),
    Figure(
        "docs/distributed_dp.md",
        "the 10 % dropouts ({} against {} with every client surviving)",
        f(".3g", lambda: distributed("ddg"), lambda: distributed("ddg", dropped=False)),
        f"stored: {DDP}/ddg.privacy_ledger.json",
    ),
    Printed(
        "docs/distributed_dp.md",
        lambda: printed_by("dropout_epsilon"),
        "accountant: benchmarks/dropout_epsilon.py (distributed RDP)",
    ),
    Figure(
        "docs/distributed_dp.md",
        "the Gaussian regime: 1 → {} at 60 %, 1/√0.4 = {})",
        lambda: f"{dropout_row(1.0)[-1]:.3g} {1 / math.sqrt(0.4):.3g}",
        "accountant: benchmarks/dropout_epsilon.py",
    ),
    Printed(
        "docs/distributed_dp.md",
        lambda: printed_by(
            "distributed_dp_mnist_offline",
            "--store",
            "benchmarks/results/distributed_dp_mnist_offline.jsonl",
            "--report",
        ),
        "stored: benchmarks/results/distributed_dp_mnist_offline.jsonl (its --report)",
    ),
    Figure(
        "docs/distributed_dp.md",
        "**cannot reach the target at any σ** (ε ≥ {} at σ = 10⁴:",
        lambda: refused_floor("ddg_12", 2.0),
        "stored: benchmarks/results/distributed_dp_mnist_offline.jsonl (the refusal's line)",
    ),
    Figure(
        "docs/distributed_dp.md",
        "(floors {} and {} over the 40 rounds)",
        lambda: f"{refused_floor('ddg_10', 8.0)} {refused_floor('ddg_8', 8.0)}",
        "stored: benchmarks/results/distributed_dp_mnist_offline.jsonl (the refusals' lines)",
    ),
]


def refused_floor(arm: str, target: float) -> str:
    """The ε at σ = 10⁴ that the stored refusal of ``arm`` at ``target`` printed."""
    path = RESULTS / "distributed_dp_mnist_offline.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    (floor,) = {
        re.search(r"\(([\d.e+-]+) there\)", r["error"])[1]  # type: ignore[index]
        for r in rows
        if r["arm"] == arm and r["epsilon_target"] == target and "error" in r
    }
    return floor


@cache
def printed_by(benchmark: str, *args: str) -> tuple[str, ...]:
    """The lines ``benchmarks/<benchmark>.py`` prints (its ``main``, in this process)."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        module = importlib.import_module(benchmark)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    out = io.StringIO()
    argv, sys.argv = sys.argv, [benchmark, *args]
    takes_args = bool(inspect.signature(module.main).parameters)  # main(folder) or argparse
    try:
        with contextlib.redirect_stdout(out):
            module.main(*args) if takes_args else module.main()
    finally:
        sys.argv = argv
    return tuple(line for line in out.getvalue().splitlines() if line.strip())


@cache
def dropout_row(initial: float) -> tuple[float, ...]:
    row = next(r for r in printed_by("dropout_epsilon") if r.startswith(f"| {initial:g} |"))
    return tuple(float(x) for x in row.strip("| ").split(" | ")[1:])


def upload_charged(epsilon: float) -> float:
    """What the ledger charges one classic-Gaussian upload at ``epsilon`` (δ = 1e-5, C = 1):
    max(ε, ε_PLD(σ)), ``UploadMechanism.charged_epsilon``."""
    from fl_lightning.privacy.mechanisms.local_budget import UploadMechanism

    return UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=DELTA).charged_epsilon(
        epsilon=epsilon
    )


def local_gaussian_uploads() -> float:
    """docs/privacy.md's example: ``LocalGaussian`` at ε = 1 a coordinate, d = 1,000, 200
    uploads, composed as Gaussian events at δ = 1e-5 (PLD)."""
    from fl_lightning.privacy.mechanisms.ldp import LocalGaussian

    mech = LocalGaussian(epsilon=1.0, delta=DELTA)
    acc = PrivacyAccountant("pld", delta=DELTA)
    for _ in range(200):
        acc.record(RoundPrivacy(local={0: [mech.local_release(1000)]}))
    return eps(acc.report())


def adaptive_clipping() -> float:
    """ε of configs/experiment/adaptive_clipping/mnist_offline.yaml: its σ, Poisson cohorts of
    the expected size over the clients, its rounds, its accountant (every arm the same)."""
    c = yaml.safe_load(
        (REPO / "configs" / "experiment" / "adaptive_clipping" / "mnist_offline.yaml").read_text()
    )
    n, m = int(c["data"]["num_clients"]), int(c["model"]["clients_per_round"])
    sigma = float(c["strategy"]["init_args"]["central_dp"]["init_args"]["noise_multiplier"])
    rounds = int(c["trainer"]["max_steps"])
    return eps(client_level(sigma, CohortSampling("poisson", m / n, n), rounds,
                            c["privacy"]["accountant"]))  # fmt: skip


def replace_one_poisson_pld() -> float:
    """dp-accounting's PLD ``REPLACE_ONE`` Poisson event for the quickstart (the pair
    docs/privacy.md says is not valid for fixed-size cohorts), 40 rounds."""
    import dp_accounting

    sampling, rounds, strategy = federation(QS, "poisson")
    sigma = float(strategy["init_args"]["noise_multiplier"])
    acc = dp_accounting.pld.PLDAccountant(
        dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3
    )
    event = dp_accounting.PoissonSampledDpEvent(sampling.rate, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(event, rounds)
    return float(acc.get_epsilon(DELTA))


def fixed_pair_at(rate: float) -> float:
    """The fixed-size dominating pair (σ/2, Poisson, add/remove) at ``rate``, 40 rounds, PLD."""
    _, rounds, strategy = federation(QS, "fixed")
    sigma = float(strategy["init_args"]["noise_multiplier"])
    return analysis.epsilon([SampledGaussian(sigma / 2, rate, rounds)], DELTA, "pld")


# the regression pair of tests/privacy/test_budget_property.py (docs/reliability.md)
PAIR_A, PAIR_B = SampledGaussian(0.7, 0.02, 5), SampledGaussian(4.0, 0.5, 20)
OPACUS_BELOW = SampledGaussian(1.19, 0.74, 15)  # at δ = 1e-3 (docs/reliability.md)


def dp_accounting_rdp(event: SampledGaussian, delta: float) -> float:
    from fl_lightning.privacy.accounting.recompute import gaussian_history_epsilon

    return gaussian_history_epsilon(
        [(event.noise_multiplier, event.sample_rate, event.steps)], delta, "rdp"
    )


def canary_run(name: str) -> dict:
    return stored(f"benchmarks/results/dp_ftrl_audit/{name}.audit.json")


def estimate_vs_accountant(name: str) -> str:
    run = canary_run(name)
    return f"{run['attacks']['canaries']['epsilon_estimate']:.2g} {run['accountant_epsilon']:.2g}"


def historical_quickstart(rounds: int) -> float:
    """docs/audit.md's offline-MNIST quickstart of 2026-11-21 (no longer shipped; its setting
    is stated there): 20 clients, 5 a round (Poisson), σ = 1, RDP, ``rounds`` rounds."""
    return eps(client_level(1.0, CohortSampling("poisson", 5 / 20, 20), rounds, "rdp"))


def dp_sgd_epsilon_at(client_yaml: str, examples: int, *, epochs: int) -> float:
    """ε (RDP) of ``epochs`` DP-SGD epochs (n/B steps each) of a client holding ``examples``,
    at the batch and σ of ``configs/client/<client_yaml>``."""
    c = yaml.safe_load((REPO / "configs" / "client" / client_yaml).read_text())
    batch = int(c["batch_size"])
    event = SampledGaussian(
        float(c["dp_sgd"]["noise_multiplier"]), batch / examples, epochs * examples // batch
    )
    return analysis.epsilon([event], DELTA, "rdp")


def steinke(canaries: int, guesses: int) -> float:
    """The largest lower bound ``canaries`` canaries and ``guesses`` guesses can show (all
    right), at 95 % confidence and δ = 1e-5."""
    from fl_lightning.privacy.audit.one_run import steinke_epsilon

    return steinke_epsilon(canaries, guesses, guesses, DELTA)


@cache
def sigma_for(target: float, accountant: str, mode: str) -> float:
    """σ calibrated to ``target`` over the quickstart's rounds and cohorts."""
    sampling, rounds, _ = federation(QS, mode)
    history = [SampledGaussian.for_cohort(1.0, sampling, rounds)]
    return analysis.calibrate_noise_multiplier(
        [history], target_epsilon=target, delta=DELTA, accountant=accountant
    )


def table_row(name: str) -> dict[str, Any]:
    """Row ``name`` of docs/audit.md's stored canary table."""
    return dict(stored("benchmarks/results/canary_audit.json")[name])


def canary_row(name: str) -> float:
    """The accountant ε the stored canary table's row ``name`` compares with."""
    return float(table_row(name)["compared_epsilon"])


def canary_table() -> list[str]:
    """``benchmarks/dp_ftrl_audit_table.py`` on the stored runs, the guarantee without the
    simulation clause (docs/audit.md says the runs are simulations once)."""
    from tests.test_docs_epsilon import SIMULATION

    lines = printed_by("dp_ftrl_audit_table", "benchmarks/results/dp_ftrl_audit")
    return [line.replace(SIMULATION, "") for line in lines]


PRIVACY = [
    Figure(
        "docs/privacy.md",
        "the quickstart's ({}, 1e-5)-DP has it at {}, {}·δ",
        lambda: f"{eps(quickstart()):.2f} {tail():.2g} {tail() / DELTA:.2g}",
        "accountant: PLD, the quickstart's composed PLD (privacy/loss_tail)",
    ),
    Figure(
        "docs/privacy.md",
        'the offline ADP-FL config printed "ε = {} (δ = 1e-05); guarantee: local ({}, 3e-05)-DP"',
        lambda: f"{3 * upload_charged(3.316):.3f} {3 * upload_charged(3.316):.3g}",
        "accountant: basic composition of its 3 uploads' charged ε (what the code did then)",
    ),
    Figure(
        "docs/privacy.md",
        "Now that run prints ε ≈ {} at δ = 10⁻⁵",
        lambda: comma(round(local_gaussian_uploads(), -2)),
        "accountant: PLD",
    ),
    Figure(
        "docs/privacy.md",
        "costs ε = {} in one round",
        f(".3g", lambda: analysis.epsilon([SampledGaussian(1.0, 0.561, 1)], DELTA, "rdp")),
        "accountant: RDP (the §5.1 config's), one DP-SGD step at the q and σ the message prints",
    ),
    Figure(
        "docs/privacy.md",
        "so every arm prints client-level ε = {} at δ = 1e-5, RDP",
        f(".2f", adaptive_clipping),
        "accountant: RDP, configs/experiment/adaptive_clipping/",
    ),
    Figure(
        "docs/privacy.md",
        "| {*} / {*} / {*} | {*} ± {*} | {} |",
        f(".2f", adaptive_clipping),
        "accountant: RDP, configs/experiment/adaptive_clipping/mnist_offline.yaml",
    ),
    Figure(
        "docs/privacy.md",
        "printed ε {} where a fresh 40-round run prints {} (both PLD).",
        f(".3g", lambda: dp_ftrl(10), lambda: dp_ftrl(40)),
        "accountant: PLD, DP-FTRL quickstart planned for 10 and for 40 rounds",
    ),
    Figure(
        "docs/privacy.md",
        "| Poisson, q = 0.5 | {} (dp-accounting PLD, `REPLACE_ONE`) | **{}** (printed) |",
        f(".2f", replace_one_poisson_pld, lambda: eps(quickstart())),
        "accountant: dp-accounting PLD REPLACE_ONE; PLD",
    ),
    Figure(
        "docs/privacy.md",
        "| fixed-size, 20 of 40 | **{}** (printed; dominating pair, PLD) "
        "| {} (same pair with q = m/(N+1) = 20/41",
        f(".2f", lambda: eps(quickstart(mode="fixed")), lambda: fixed_pair_at(20 / 41)),
        "accountant: PLD",
    ),
    *[
        Figure(
            "docs/privacy.md",
            f"| {e:g} | {arm} | {{*}} | {{*}} ± {{*}} | {{}} |",
            lambda e=e, arm=arm: f"{ftrl_store_epsilon(e, arm):.3g}",
            "stored: benchmarks/results/dp_ftrl_mnist_offline.jsonl",
        )
        for e in (2.0, 8.0)
        for arm in ("dp_fedavg", "tree", "bsr")
    ],
    Printed(
        "docs/privacy.md",
        lambda: printed_by(
            "dp_ftrl_mnist_offline",
            "--store",
            "benchmarks/results/dp_ftrl_mnist_offline.jsonl",
            "--report",
        ),
        "stored: benchmarks/results/dp_ftrl_mnist_offline.jsonl (its --report)",
    ),
    Figure(
        "docs/privacy.md",
        "Calibrating σ to ε = 8 over the quickstart's 40 rounds gives σ = {} (Poisson) and {} "
        "(fixed-size;",
        f(".2f", lambda: sigma_for(8.0, "pld", "poisson"), lambda: sigma_for(8.0, "pld", "fixed")),
        "accountant: PLD calibration (analysis.calibrate_noise_multiplier)",
    ),
    Figure(
        "docs/privacy.md",
        "| σ for ε = 8, Poisson / fixed-size | {} / {} | {} / {} | {} / {} |",
        lambda: " ".join(
            f"{sigma_for(8.0, a, m):.2f}"
            for a in ("pld", "prv", "rdp")
            for m in ("poisson", "fixed")
        ),
        "accountant: each accountant's calibration (analysis.calibrate_noise_multiplier)",
    ),
    Figure(
        "docs/privacy.md",
        "fixed-size cohorts cost about {}× the ε of Poisson cohorts under replace-one and {}× "
        "under add/remove",
        f(
            ".2g",
            lambda: eps(quickstart(mode="fixed")) / replace_one_poisson_pld(),
            lambda: fixed_pair_at(20 / 41) / eps(quickstart()),
        ),
        "accountant: PLD, the table above",
    ),
]


def ftrl_store_epsilon(target: float, arm: str) -> float:
    rows = [
        json.loads(line)
        for line in (RESULTS / "dp_ftrl_mnist_offline.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return max(r["epsilon"] for r in rows if r["epsilon_target"] == target and r["arm"] == arm)


AUDIT_MD = [
    Printed(
        "docs/audit.md",
        canary_table,
        "stored: benchmarks/results/dp_ftrl_audit/*.audit.json (dp_ftrl_audit_table.py)",
    ),
    Printed(
        "docs/audit.md",
        lambda: printed_by("canary_audit_table"),
        "stored: benchmarks/results/canary_audit.json (benchmarks/canary_audit_table.py)",
    ),
    Figure(
        "docs/audit.md",
        "{} at 1,000 canaries, {} at 2,000, {} at 4,000 and {} at 8,000 (`planned_guess_fraction`)",
        lambda: " ".join(
            f"{planned_guess_fraction(m, canary_row('full_participation'), 1e-5)[1]:.3g}"
            for m in (1000, 2000, 4000, 8000)
        ),
        "accountant: one_run.planned_guess_fraction at the stored full-participation ε",
    ),
    Figure(
        "docs/audit.md",
        "then the default: ε {} for the same noise.)",
        f(".3g", lambda: eps(quickstart("rdp"))),
        "accountant: RDP (Opacus), the quickstart",
    ),
    Figure(
        "docs/audit.md",
        "| DP-FedAvg (σ=1, C=1) | {} (1e-05) | lira | 0.509 |",
        f(".3g", lambda: historical_quickstart(5)),
        "accountant: RDP, the 2026-11-21 quickstart's setting (5 rounds)",
    ),
    Figure(
        "docs/audit.md",
        "5 rounds; ε = {} at δ = 1e-5 from the RDP accountant",
        f(".3g", lambda: historical_quickstart(5)),
        "accountant: RDP",
    ),
    Figure(
        "docs/audit.md",
        "| DP-FedAvg (σ=1, C=1) | {} (1e-05) | lira | 0.494 |",
        f(".3g", lambda: historical_quickstart(10)),
        "accountant: RDP, the same setting over 10 rounds",
    ),
    Figure(
        "docs/audit.md",
        "DP-FTRL with BSR on MNIST ({} against {};",
        lambda: estimate_vs_accountant("mnist_ftrl_bsr_eps8"),
        "stored: benchmarks/results/dp_ftrl_audit/mnist_ftrl_bsr_eps8.audit.json",
    ),
    Figure(
        "docs/audit.md",
        "the DP-FTRL quickstart ({} against {})",
        lambda: estimate_vs_accountant("quickstart_ftrl"),
        "stored: benchmarks/results/dp_ftrl_audit/quickstart_ftrl.audit.json",
    ),
    Figure(
        "docs/audit.md",
        "the gap grows with ε ({} vs {}, {} vs {}, {} vs {})",
        lambda: " ".join(
            [
                f"{canary_run('mnist_dp_fedavg_eps1')['attacks']['canaries']['epsilon_estimate']:.2g}",
                f"{canary_run('mnist_dp_fedavg_eps1')['accountant_epsilon']:.1f}",
                *(
                    f"{canary_run(n)['attacks']['canaries']['epsilon_estimate']:.2g} "
                    f"{canary_run(n)['accountant_epsilon']:.1f}"
                    for n in ("mnist_dp_fedavg_eps4", "mnist_dp_fedavg_eps16")
                ),
            ]
        ),
        "stored: benchmarks/results/dp_ftrl_audit/mnist_dp_fedavg_eps*.audit.json",
    ),
    Figure(
        "docs/audit.md",
        "it cannot exceed {} even when every guess is right (1,000 canaries and 200 guesses: {})",
        f(".2g", lambda: steinke(200, 40), lambda: steinke(1000, 200)),
        "accountant: fl_lightning.privacy.audit.one_run.steinke_epsilon, every guess right",
    ),
]


def nbafl_published_guarantee() -> str:
    from fl_lightning.strategies.nbafl import PUBLISHED_GAP

    acc = PrivacyAccountant("pld", DELTA)
    acc.private_run = True
    acc.record(RoundPrivacy(no_guarantee=PUBLISHED_GAP))
    return str(acc.report()["privacy/guarantee"])


NBAFL_SAYS = "none: NbAFL as published: Theorem 1 calibrates to sensitivity 2C/m"
MLP_D = spm_dimension
SPM_EPS = spm_epsilon()


def spm_magnitude_factor(epsilon: float) -> float:
    from fl_lightning.privacy.mechanisms.spm import SymmetricPiecewiseMechanism

    return float(SymmetricPiecewiseMechanism(epsilon=epsilon).bound)


def spm_shrink(epsilon: float) -> float:
    """E[M(w)]/w of SPM as published (Algorithm 2's bias)."""
    from fl_lightning.privacy.mechanisms.spm import SymmetricPiecewiseMechanism

    return float(SymmetricPiecewiseMechanism(epsilon=epsilon).mean(1.0))


def hm_epsilon_star() -> float:
    from fl_lightning.privacy.mechanisms.hm import EPSILON_STAR

    return EPSILON_STAR


METHODS = [
    Figure(
        "docs/reliability.md",
        "so PLD ε {} was reported instead of {};",
        f(
            ".2f",
            lambda: analysis.epsilon([PAIR_A], DELTA, "pld"),
            lambda: max(analysis.epsilon([e], DELTA, "pld") for e in (PAIR_A, PAIR_B)),
        ),
        "accountant: PLD, the regression pair of tests/privacy/test_budget_property.py",
    ),
    Figure(
        "docs/reliability.md",
        "RDP ranks them {} and {}, so",
        f(
            ".2f",
            lambda: analysis.epsilon([PAIR_A], DELTA, "rdp"),
            lambda: analysis.epsilon([PAIR_B], DELTA, "rdp"),
        ),
        "accountant: RDP (Opacus)",
    ),
    Figure(
        "docs/reliability.md",
        "at exactly σ 1.19, q 0.74, δ 1e-3, 15 rounds: {} vs {}",
        f(
            ".4f",
            lambda: analysis.epsilon([OPACUS_BELOW], 1e-3, "rdp"),
            lambda: dp_accounting_rdp(OPACUS_BELOW, 1e-3),
        ),
        "accountant: Opacus' RDP vs dp-accounting's RDP",
    ),
    Figure(
        "docs/adp_fl.md",
        "(ε_t = 10 → ≈ {})",
        f(".3g", lambda: upload_charged(10.0)),
        "accountant: PLD of the classic σ (UploadMechanism.charged_epsilon)",
    ),
    Figure(
        "docs/adp_fl.md",
        "(e.g. {} vs {} for the baseline at ε = 10;",
        lambda: " ".join(
            format(
                next(
                    r
                    for r in stored("benchmarks/results/adp_fl_mnist_offline.json")[-1]["rows"]
                    if r["method"] == "even budget" and r["epsilon"] == 10
                )[k],
                ".3g",
            )
            for k in ("eps_basic", "eps_paper")
        ),
        "stored: benchmarks/results/adp_fl_mnist_offline.json",
    ),
    Figure(
        "docs/dpfl_agn.md",
        "1000 one-step rounds reach ε ≈ 2 (notes §2.6; on the RDP "
        "accountant, record level, δ = 1e-5, {} / {} examples a client after the 10 % "
        "validation share: {} / {} on MNIST, {} / {} on CIFAR-10)",
        lambda: " ".join(
            [
                *(comma(dpfl_agn_client(d, n)) for d, n in AGN_DATA),
                *(
                    f"{dp_sgd_epsilon(f'{d}_sigma{s}.yaml', dpfl_agn_client(d, n), 1000):.3g}"
                    for d, n in AGN_DATA
                    for s in ("1_sgd", "4_sgd")
                ),
            ]
        ),
        "accountant: RDP, configs/client/dpfl_agn/*_sgd.yaml and the shards split",
    ),
    Figure(
        "docs/dpfl_agn.md",
        NBAFL_SAYS,
        lambda: nbafl_published_guarantee()[: len(NBAFL_SAYS)],
        "accountant: the report of a NbAFL (published) round",
    ),
    Figure(
        "docs/spm_fl.md",
        "For the {}-parameter MLP at ε = 0.3 one upload is {}-LDP",
        lambda: f"{comma(MLP_D())} {comma(MLP_D() * SPM_EPS)}",
        "d·ε, fl_lightning.models.MLP",
    ),
    Figure(
        "docs/spm_fl.md",
        "By basic composition one upload is d·ε = {}-LDP and five are {}.",
        lambda: f"{comma(MLP_D() * SPM_EPS)} {comma(5 * MLP_D() * SPM_EPS)}",
        "d·ε·reports",
    ),
    Figure(
        "docs/spm_fl.md",
        "|w| to within a factor C ({} at ε = 0.3)",
        f(".3g", lambda: spm_magnitude_factor(SPM_EPS)),
        "SPMMechanism(ε = 0.3).C",
    ),
    Figure(
        "docs/spm_fl.md",
        "e^ε/(e^ε+1) ({} at ε = 0.3)",
        f(".3f", lambda: spm_shrink(SPM_EPS)),
        "SymmetricPiecewiseMechanism.mean (published)",
    ),
    Figure(
        "docs/spm_fl.md",
        "for ε > ε* ≈ {} |",
        f(".4f", hm_epsilon_star),
        "fl_lightning.privacy.mechanisms.hm.EPSILON_STAR",
    ),
    Figure(
        "docs/spm_fl.md",
        "per client it is about {} (d = {} coordinates, ~15 uploads)",
        lambda: f"{round(MLP_D() * SPM_EPS * 15, -5):.0f} {comma(MLP_D())}".replace(
            "900000", "9·10⁵"
        ),
        "d·ε·15",
    ),
    Figure(
        "docs/spm_fl.md",
        "| ∞ (sign only) | {} |",
        f("g", lambda: 5 * SPM_EPS),
        "basic composition of the 5 reports the table's header states, ε = 0.3 each",
    ),
    Figure(
        "docs/spm_fl.md",
        "| {} per coordinate | {} |",
        f("g", lambda: 5 * SPM_EPS, lambda: 5 * SPM_EPS),
        "basic composition of the 5 reports the table's header states, ε = 0.3 each",
    ),
    Figure(
        "docs/attacks.md",
        "dlg recovered {}% of 4 batches (SSIM ≥ 0.8) median / mean: SSIM {} / {}",
        lambda: (
            f"{100 * dlg('recovered_fraction'):.0f} {dlg('ssim_median'):.3f} {dlg('ssim_mean'):.3f}"
        ),
        f"stored: {AUDIT}",
    ),
    Figure(
        "docs/gcfl.md",
        "ε is already about 2 after one epoch on a 4,000-example client (mnist_offline; {} on the "
        "RDP accountant, δ = 1e-5)",
        f(".3g", lambda: dp_sgd_epsilon_at("gcfl_mnist_cnn.yaml", 4000, epochs=1)),
        "accountant: RDP, configs/client/gcfl_mnist_cnn.yaml (σ, B)",
    ),
    Figure(
        "docs/gcfl.md",
        "reaches ε = 2 after about 40 epochs ({};",
        f(".3g", lambda: dp_sgd_epsilon_at("gcfl_mnist_cnn.yaml", 30_000, epochs=40)),
        "accountant: RDP, configs/client/gcfl_mnist_cnn.yaml (σ, B)",
    ),
]


SETTINGS = [
    Setting("docs/dp_fedasgp.md", "ε = 0.5"),  # the runs' per-coordinate budget
    Setting("docs/spm_fl.md", "ε = 0.3"),  # the runs' and Table 2's per-coordinate budget
    Setting("docs/spm_fl.md", "ε = 0.6"),  # where Figure 2's curves are compared
    Setting("docs/sweeps.md", "t.value(epsilon=0.1,"),  # a paper table's column
    Setting("docs/performance.md", "Table VI ε = 0.1"),  # a reproduction's column
    Setting("docs/adp_fl.md", "ε_t ≈ 1"),  # the paper's smallest per-upload budget
]

EXCEPTIONS = [
    NamedException(
        "docs/audit.md",
        "gave ε ≈ 0.9 for a mechanism of ε = 0.06 in our tests",
        origin="in our tests",
        why="an observation made while testing the unequal-variance fit "
        "(fl_lightning/privacy/audit/one_run.py says so too); no command or stored run prints it",
    ),
    NamedException(
        "docs/audit.md",
        "every attack sits at AUC ≈ 0.5 and the empirical ε lower bound is 0",
        origin="the table below is its recorded output",
        why="reads the 2026-11-21 tables of benchmarks/audit_table.py on a setting no longer "
        "shipped (hours of CPU; the tables are its recorded output, their ε recomputed above)",
    ),
    NamedException(
        "docs/audit.md",
        "attacks reach AUC 0.82 (threshold), 0.82 (ML-Leaks), 0.78 (CS-MIA) and "
        "0.74 (LiRA, 6 shadows), and drop to 0.44-0.47 under DP-SGD with ε = 1",
        origin="(tests/attacks, digits)",
        why="measured on tests/attacks' over-fitted digits models, whose tests assert bounds "
        "(AUC ≥ 0.7, < 0.6), not these values; nothing prints them",
    ),
    NamedException(
        "docs/audit.md",
        "every membership attack is at chance (AUC 0.49–0.52)",
        origin="Re-run with DP-FedASGP and SPM (lead, 2026-11-21",
        why="reads the recorded 2026-11-21 table of benchmarks/audit_table.py --rounds 10 "
        "(hours of CPU), kept as a dated record",
    ),
]

INVENTORY: list[Figure | Printed] = [
    *(Figure(f"docs/{q.doc}", q.quoted, q.now, "tests/test_docs_epsilon.py") for q in QUOTES),
    *README,
    *TUTORIALS,
    *DP_FEDASGP,
    *SWEEPS,
    *DISTRIBUTED,
    *PRIVACY,
    *AUDIT_MD,
    *METHODS,
]

# --------------------------------------------------------------------------------------------
# Reading the docs

# a compared figure: a number (1,234 / 1e-05 / .5), ∞, or docs/spm_fl.md's "9·10⁵"
FIELD = r"([-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?|[-+]?\.\d+|∞|inf|9·10⁵)"
ANY = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"


def text_of(doc: str) -> str:
    """The doc with its whitespace collapsed (a quote may wrap across lines), less what other
    tests own: README.md's generated reproduction table."""
    text = (REPO / doc).read_text()
    text = re.sub(r"<!-- repro-results:start.*?<!-- repro-results:end -->", "", text, flags=re.S)
    return " ".join(text.split())


def pattern(quoted: str) -> re.Pattern[str]:
    return re.compile(re.escape(quoted).replace(r"\{\}", FIELD).replace(r"\{\*\}", ANY))


def occurrences(item: Figure | Printed | NamedException | Setting, text: str) -> list[re.Match]:
    if isinstance(item, Printed):
        lines = [" ".join(line.split()) for line in item.lines()]
        return [m for line in lines for m in re.finditer(re.escape(line), text)]
    return list(pattern(item.quoted).finditer(text))


def said_and_now(figure: Figure, text: str) -> list[tuple[str, str]]:
    """(what the doc says, what the code gives now) at each place the doc quotes ``figure``."""
    found = occurrences(figure, text)
    assert found, f"{figure.doc} no longer quotes: {figure.quoted}"
    now = figure.now()
    return [(" ".join(m.groups()) if m.groups() else m.group(0), now) for m in found]


# The guard: what looks like an ε or audit figure. Integers after "=" are budgets the doc
# chooses (ε = 2, ε ∈ {2, 3, 4}); a computed ε or score is printed with decimals, or stated
# approximately (≈), or as an (ε, δ)-DP pair.
DECIMAL = r"\d[\d,]*\.\d+"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
EPS = r"(?:ε|\beps(?:ilon)?)(?:_\w+|[₀-₉*])?"
GUARD = re.compile("|".join([
    rf"{EPS}\s?(?:=|≈|≥|≤|<|>|~|:)\s?{DECIMAL}",
    rf"{EPS}\s?≈\s?{NUMBER}",
    rf"{EPS}(?: lower bound| of| is| planned| spent| measured)? {DECIMAL}",
    rf"\({NUMBER}, (?:δ|\d[\d.e-]*)\)-L?DP",
    rf"{NUMBER}-LDP",
    rf"\b(?i:AUC|SSIM|PSNR|TPR@[\d.]+%\s?FPR|bal\.\s?acc\.?)(?: =| ≈| median| mean)? {DECIMAL}",
]))  # fmt: skip


def guarded_docs() -> list[str]:
    """README.md and docs/**/*.md, less the generated pages other tests check."""
    docs = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))
    skip = ("docs/reproductions/", "docs/privacy_table.md")
    return ["README.md", *(d for d in docs if not d.startswith(skip))]


def unchecked(doc: str, text: str) -> list[str]:
    """The ε-looking figures of ``text`` (``doc``'s) that no inventory entry covers."""
    items = [*INVENTORY, *SETTINGS, *EXCEPTIONS]
    spans = [m.span() for item in items if item.doc == doc for m in occurrences(item, text)]
    return [m.group(0) for m in GUARD.finditer(text)
            if not any(a <= m.start() and m.end() <= b for a, b in spans)]  # fmt: skip


# --------------------------------------------------------------------------------------------
# The tests

FIGURES = [item for item in INVENTORY if isinstance(item, Figure)]


@pytest.mark.parametrize("figure", FIGURES, ids=lambda q: f"{q.doc}:{q.quoted[:40]}")
def test_a_quoted_figure_is_what_its_command_gives_now(figure: Figure) -> None:
    for said, now in said_and_now(figure, text_of(figure.doc)):
        assert said == now, f"{figure.doc}: quotes {said!r}, {figure.source} gives {now!r}"


PRINTED = [item for item in INVENTORY if isinstance(item, Printed)]


@pytest.mark.parametrize("printed", PRINTED, ids=lambda p: f"{p.doc}:{p.source[:40]}")
def test_a_table_a_command_prints_is_shown_as_it_prints_it(printed: Printed) -> None:
    text = text_of(printed.doc)
    for line in printed.lines():
        assert " ".join(line.split()) in text, f"{printed.doc} does not show: {line}"


@pytest.mark.parametrize("item", [*EXCEPTIONS, *SETTINGS], ids=lambda e: f"{e.doc}:{e.quoted[:40]}")
def test_an_exception_or_setting_is_still_quoted_and_says_where_it_came_from(item) -> None:
    text = text_of(item.doc)
    assert occurrences(item, text), f"{item.doc} no longer quotes {item.quoted!r}: drop it here"
    if isinstance(item, NamedException):
        assert item.origin in text, f"{item.doc} must say where {item.quoted!r} came from"
        assert item.why


def test_exceptions_stay_rare() -> None:
    assert len(EXCEPTIONS) <= 0.1 * len(INVENTORY), "recompute or store figures instead"


@pytest.mark.parametrize("doc", guarded_docs())
def test_every_epsilon_looking_figure_is_in_the_inventory(doc: str) -> None:
    missing = unchecked(doc, text_of(doc))
    assert not missing, (
        f"{doc} quotes figures no test checks: {missing}; add each to tests/test_docs_figures.py "
        "(recomputed, stored, a setting, or a named exception)"
    )


@pytest.mark.parametrize("line", [
    "A new run prints ε = 3.21 (δ = 1e-05).",
    "It is client-level (3.2, 1e-05)-DP.",
    "The estimate is ε ≈ 7 at best.",
    "The audit gives AUC 0.73 and SSIM median 0.91.",
    "local ε 419.5 after two rounds",
    "it logs privacy/epsilon: 2.5 at the end",
    "threshold auc 0.61, bal. acc. 0.55",
    "one upload is 1,234-LDP",
])  # fmt: skip
def test_the_guard_catches_a_new_unchecked_figure(line: str) -> None:
    text = text_of("docs/dp_fedasgp.md") + " " + line
    assert unchecked("docs/dp_fedasgp.md", text), line


def test_the_guard_passes_budgets_and_thresholds() -> None:
    text = "Targets ε = 2, 3 and 4; success means SSIM ≥ 0.8 and AUC ≥ 0.7."
    assert not unchecked("docs/dp_fedasgp.md", text)


def test_a_changed_figure_is_caught() -> None:
    """A figure whose code moved (here: the README's quickstart ε, as if it printed 6.1) fails."""
    readme = next(q for q in FIGURES if q.doc == "README.md" and "{}" in q.quoted)
    wrong = dataclasses.replace(readme, now=lambda: "6.100 6.1")
    said_now = said_and_now(wrong, text_of(wrong.doc))
    assert said_now and all(said != now for said, now in said_now)


def test_the_sweeps_stored_runs_are_the_epsilon_recomputed() -> None:
    """docs/reports' store (the sweep's runs as they finished) holds the ε the calibration
    gives now (to six decimals; the report prints three)."""
    rows = [json.loads(line) for line in (REPO / SWEEP).read_text().splitlines()]
    done = [r for r in rows if r.get("status") == "finished"]
    assert len(done) == 12
    for r in done:
        target = float(r["params"]["privacy.target_epsilon"])
        assert f"{r['epsilon']:.6f}" == f"{sweep_demo(target):.6f}", r["id"]


def test_the_stored_distributed_runs_print_the_epsilon_of_their_ledger() -> None:
    for mechanism in ("ddg", "skellam"):
        summary = stored(f"{DDP}/{mechanism}.summary.json")
        assert summary["privacy/epsilon"] == pytest.approx(distributed(mechanism), rel=1e-9)
