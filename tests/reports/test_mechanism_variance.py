"""The SPM-FL Fig. 2 variance table (fl_lightning.reports.mechanism_variance): draws of each
implemented mechanism match its closed form, and the paper's statements are read from them."""

import pytest

from fl_lightning.reports.mechanism_variance import markdown, measure, paper_formula


def test_draws_match_closed_forms_and_cited_formulas():
    cells = measure((0.6,), (0.5, 1.0), draws=40_000, seed=1)
    assert len(cells) == 5 * 2
    for c in cells:
        assert c.empirical == pytest.approx(c.closed_form, rel=0.05), c
        if c.label in ("PM", "Duchi et al.", "PNPM (reconstructed)"):
            assert c.paper == pytest.approx(c.closed_form, rel=1e-9), c


def test_debiased_spm_is_not_below_duchi_at_the_unit_weight():
    text = markdown(measure((0.6,), (1.0,), draws=2_000), 2_000)
    assert "ε = 0.6, SPM (debiased): not below Duchi et al. at w = 1 (11.97 vs 10.78)" in text
    assert "ε = 0.6, SPM (paper's Eq. A18): below every other at every w" in text


def test_paper_formula_of_spm_is_eq_a18_and_bad_draws_are_refused():
    assert paper_formula("spm", 1.0, 1.5) == pytest.approx(1.0603, abs=1e-4)
    assert paper_formula("laplace", 1.0, 1.5) is None
    with pytest.raises(ValueError, match="draws"):
        measure((0.6,), (1.0,), draws=1)
