"""The shipped BLT and optimised-banded DP-FTRL configs run end to end (tiny: 4 rounds, 10
clients in cyclic blocks of 5) and print a guarantee that names the mechanism, whose ε equals
an independent recomputation: Δ by brute force over the dense C of the run's coefficients, and
the Gaussian mechanism's exact (ε, δ) curve (Balle & Wang 2018, Thm. 8) solved with scipy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm

from fl_lightning.privacy.correlated.matrix_mechanism import brute_force_sensitivity, factorization
from tests.conftest import REPO, TINY


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of a Gaussian mechanism with sensitivity/σ = mu at δ (Balle & Wang 2018, Thm. 8)."""

    def gap(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(gap, 0.0, 500.0)


@pytest.mark.slow
@pytest.mark.parametrize(("config", "words"), [
    ("quickstart_blt.yaml", "matrix mechanism (BLT, 4 buffers, optimised for mean error; Δ = "),
    ("quickstart_banded.yaml",
     "matrix mechanism (optimised banded Toeplitz, p = 2, optimised for mean error; Δ = "),
])  # fmt: skip
def test_config_runs_and_its_epsilon_is_recomputed_independently(run_cli, tmp_path, config, words):
    path = REPO / "configs" / "experiment" / "dp_ftrl" / config
    rc = run_cli(["fit", "--config", str(path), *TINY, "--trainer.max_steps", "4",
                  "--model.clients_per_round", "5"])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert words in summary["privacy/guarantee"]
    assert "2 participations ≥ 2 rounds apart (cyclic cohorts of 5)" in summary["privacy/guarantee"]
    ckpt = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)
    strategy_state = _find(ckpt, "noise_multiplier")
    kind = "blt" if "blt" in config else "banded"
    if kind == "blt":
        from fl_lightning.privacy.correlated.blt import blt_coefficients

        coefficients = blt_coefficients(*(np.asarray(p) for p in strategy_state["blt"]), 4)
    else:
        coefficients = np.asarray(strategy_state["coefficients"])
    _, c = factorization(kind, 4, coefficients=coefficients)
    delta_c = brute_force_sensitivity(c, 2, 2)  # 10 clients / 5: every 2 rounds, 2 times
    eps = _gaussian_epsilon(delta_c / strategy_state["noise_multiplier"], 1e-5)
    assert summary["privacy/epsilon"] == pytest.approx(eps, rel=2e-3)


@pytest.mark.slow
def test_amplified_banded_config_runs_and_its_epsilon_is_recomputed_independently(
    run_cli, tmp_path
):
    """4 rounds, 10 clients in 2 blocks of 5, q = 0.5: k = 2 Poisson-subsampled Gaussians of
    multiplier σ/ζ (Choquette-Choo et al. 2023, amplification of b-banded C), ζ the largest column
    norm of the run's C, composed by dp-accounting's PLD here."""
    import dp_accounting

    path = REPO / "configs" / "experiment" / "dp_ftrl" / "quickstart_amplified_banded.yaml"
    rc = run_cli(["fit", "--config", str(path), *TINY, "--trainer.max_steps", "4",
                  "--model.clients_per_round", "5"])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        "amplified banded matrix mechanism (optimised banded Toeplitz, p = 2"
        in (summary["privacy/guarantee"])
    )
    assert (
        "cyclic Poisson cohorts: blocks of 5, each client with q = 0.5"
        in (summary["privacy/guarantee"])
    )
    ckpt = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)
    state = _find(ckpt, "noise_multiplier")
    _, c = factorization("banded", 4, coefficients=np.asarray(state["coefficients"]))
    zeta = float(np.max(np.linalg.norm(c, axis=0)))
    pld = dp_accounting.pld.PLDAccountant()
    event = dp_accounting.GaussianDpEvent(state["noise_multiplier"] / zeta)
    pld.compose(dp_accounting.PoissonSampledDpEvent(0.5, event), 2)
    assert summary["privacy/epsilon"] == pytest.approx(pld.get_epsilon(1e-5), rel=2e-3)


def _find(tree, key):  # type: ignore[no-untyped-def]
    """The first dict in a nested checkpoint holding ``key``."""
    if isinstance(tree, dict):
        if key in tree:
            return tree
        for value in tree.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None


def test_cyclic_poisson_is_refused_for_a_strategy_that_does_not_account_for_it(
    run_cli, capsys, tmp_path
):
    from tests.conftest import QUICKSTART

    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--model.sampling", "cyclic_poisson",
                  "--model.client_rate", "0.5"])  # fmt: skip
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2
    assert line.startswith("error: model.sampling: cyclic_poisson is the cyclic Poisson sampling")
    assert not list(tmp_path.rglob("*.ckpt"))
