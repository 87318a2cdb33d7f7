"""A distributed-DP run that can release nothing useful is refused before round 0 in one line
naming the field (issue 58 item 1): rounds that cannot reach ``strategy.min_survivors``, too
few ``strategy.bits`` for the planned noise, an unbounded horizon; a run in which rounds abort
says so (progress line, summary: rounds aggregated / planned), and one in which none
aggregated ends with one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_lightning.privacy.distributed import release_check
from fl_lightning.privacy.distributed.release_check import (
    aggregate_probability,
    bits_problem,
    survivors_problem,
)
from tests.conftest import REPO, TINY

DDG = REPO / "configs" / "experiment" / "distributed_dp" / "ddg.yaml"


def test_aggregate_probability_is_the_binomial_tail():
    # P(n >= 2), n ~ Binomial(40, 0.005): 1 - 0.995^40 - 40 * 0.005 * 0.995^39
    want = 1 - 0.995**40 - 40 * 0.005 * 0.995**39
    assert aggregate_probability(40, 0.005, 2) == pytest.approx(want, rel=1e-9)
    assert aggregate_probability(10, 0.9, 11) == 0.0


def test_survivors_problem_names_the_field_that_makes_rounds_abort():
    cohort = "cohorts of 20 clients"
    assert survivors_problem(trials=20, survive=0.9, stays=0.9, min_survivors=2,
                             dropout_rate=0.1, cohort=cohort) is None  # fmt: skip
    larger = survivors_problem(trials=20, survive=1.0, stays=1.0, min_survivors=50,
                               dropout_rate=0.0, cohort=cohort)  # fmt: skip
    assert larger and larger.startswith("strategy.min_survivors: 50 is more than any round")
    dropped = survivors_problem(trials=20, survive=0.01, stays=0.01, min_survivors=2,
                                dropout_rate=0.99, cohort=cohort)  # fmt: skip
    assert dropped and dropped.startswith("strategy.dropout_rate: at 0.99, a round reaches 2")
    # Poisson cohorts of about 20 of 40: 30 survivors are rare even without dropouts
    high = survivors_problem(trials=40, survive=0.45, stays=0.9, min_survivors=30,
                             dropout_rate=0.1, cohort=cohort)  # fmt: skip
    assert high and high.startswith("strategy.min_survivors: at 30, a round reaches 30")


def test_bits_problem_says_how_far_and_which_bits_would_do():
    # ε falling with the bits like the rounding's inflation: 100 at 4 bits, 10 from 10 bits up
    def eps(b: int) -> float:
        return 10.0 * max(1.0, 10.0 ** ((10 - b) / 6))

    line = bits_problem(eps, bits=4, target=None, rounds=40)
    assert line is not None
    assert line.startswith("strategy.bits: 4 bits round the encoded updates so coarsely")
    assert "ε = 100, 10× the 10 the same σ gives without rounding" in line
    assert line.endswith("strategy.bits 9 would spend ε = 14.68")
    assert bits_problem(eps, bits=10, target=None, rounds=40) is None
    over = bits_problem(eps, bits=9, target=12.0, rounds=40)
    assert over and "above privacy.target_epsilon 12" in over and "strategy.bits 10" in over


def _fit(tmp_path: Path, *extra: str) -> list[str]:
    return ["fit", "--config", str(DDG), *TINY, "--trainer.max_steps", "2",
            "--trainer.default_root_dir", str(tmp_path), *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "start"),
    [
        (["--strategy.init_args.mechanism", "skellam", "--strategy.init_args.bits", "4"],
         "strategy.bits: 4 bits round the encoded updates so coarsely that 2 rounds"),
        (["--strategy.init_args.dropout_rate", "0.99"], "strategy.dropout_rate: at 0.99,"),
        (["--strategy.init_args.min_survivors", "50"],
         "strategy.min_survivors: 50 is more than any round can have"),
        (["--trainer.max_steps", "-1"], "trainer.max_steps: -1 (no last round)"),
    ],
)  # fmt: skip
def test_a_run_that_releases_nothing_useful_is_refused(tmp_path, capsys, override, start):
    from fl_lightning.cli import main

    rc = main(_fit(tmp_path, *override))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {start}"), err
    assert not any(p.is_file() for p in tmp_path.rglob("*")), "nothing may be written"


def test_aborted_rounds_are_counted_and_a_run_with_none_aggregated_fails(
    tmp_path, capsys, monkeypatch
):
    """With the pre-flight bound lowered, a 0.5 dropout aborts some of 4 rounds (3-client
    cohorts, min_survivors 2): the progress line and the summary say how many aggregated; at
    0.99 none does, and the run ends with one line and exit 1, its files kept."""
    from fl_lightning.cli import main

    monkeypatch.setattr(release_check, "MIN_AGGREGATE_PROBABILITY", 0.0)
    some = tmp_path / "some"
    rc = main(_fit(some, "--trainer.max_steps", "4", "--strategy.init_args.dropout_rate", "0.5",
                   "--trainer.enable_progress_bar", "true"))  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads((some / "summary.json").read_text())
    aborted = summary["rounds_aborted"]
    assert 0 < aborted < 4, summary
    assert summary["rounds_aggregated"] == 4 - aborted and summary["rounds_planned"] == 4
    assert f"({4 - aborted} aggregated, {aborted} aborted: nothing released)" in out
    assert f"aggregated={4 - aborted}/4" in out  # the progress line
    none = tmp_path / "none"
    rc = main(_fit(none, "--strategy.init_args.dropout_rate", "0.99"))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].startswith("error: strategy: none of the 2 rounds aggregated"), lines
    assert "Finished" not in out
    assert json.loads((none / "summary.json").read_text())["rounds_aggregated"] == 0
