"""Privacy noise and DP events are made in ``fl_lightning/privacy/`` only (issue 34).

A release whose noise is drawn by hand in a strategy, or whose accounting event is written by
hand beside it, can drift apart from what was actually added (``privacy/accounting/events.py``:
events are never built by hand in a strategy). This reads every module of ``strategies/``,
``server/`` and ``client/`` and fails on a line that draws Gaussian noise (``torch.randn``,
``torch.normal``, ``.normal_(``), calls one of ``privacy/``'s samplers directly (a mechanism's
``release`` draws and gives the event) or builds a DP event (``LocalRelease(``,
``SampledGaussian(``, a ``dp_accounting`` event) itself, unless the (file, pattern) pair is in
``ALLOWED``: the debt of today, which may only shrink (it is empty). An entry that no longer matches
fails too, so whoever moves a site into ``privacy/`` deletes its entry in the same change.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fl_lightning"
CHECKED = ("strategies", "server", "client")
PATTERNS = {
    "randn": re.compile(r"\btorch\.randn\("),
    "normal": re.compile(r"\btorch\.normal\(|\.normal_\("),
    "LocalRelease": re.compile(r"\bLocalRelease\("),
    "SampledGaussian": re.compile(r"\bSampledGaussian\("),
    "DpEvent": re.compile(r"\bdp_accounting\.\w*DpEvent\("),
    # the privacy samplers themselves: a strategy asks a mechanism, which also gives the event
    "sampler": re.compile(
        r"\b(sample_gaussian|sample_laplace|add_laplace|discrete_laplace|sample_binomial)\(|"
        r"\btorch\.binomial\("
    ),
}

# (file relative to fl_lightning, pattern): sites still outside privacy/. Only ever delete: every
# strategy's noise and event now come from a mechanism (privacy/mechanisms/base.py: release).
ALLOWED: set[tuple[str, str]] = set()


def offenders() -> set[tuple[str, str]]:
    found = set()
    for layer in CHECKED:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            for line in path.read_text().splitlines():
                code = line.split("#", 1)[0]
                for name, pattern in PATTERNS.items():
                    if pattern.search(code):
                        found.add((rel, name))
    return found


def test_no_privacy_noise_or_event_is_made_outside_privacy():
    new = offenders() - ALLOWED
    assert not new, (
        f"privacy noise or DP events made outside fl_lightning/privacy/: {sorted(new)}; draw "
        "the noise through a mechanism (privacy/mechanisms) and let it give the event"
    )


def test_the_allow_list_only_names_sites_that_still_exist():
    gone = ALLOWED - offenders()
    assert not gone, f"delete these entries of ALLOWED, the sites are gone: {sorted(gone)}"


def test_the_check_can_fail():
    """The patterns match the forms they are meant to catch."""
    lines = {
        "randn": "noise = torch.randn(x.shape, generator=g) * std",
        "normal": "x.normal_(0, std, generator=g)",
        "LocalRelease": "RoundPrivacy(local={c: [LocalRelease(eps)]})",
        "SampledGaussian": "ev = SampledGaussian(1.0, 0.1)",
        "DpEvent": "dp_accounting.GaussianDpEvent(z)",
        "sampler": "noise = sample_gaussian(x.shape, std=s, generator=g)",
    }
    for name, line in lines.items():
        assert PATTERNS[name].search(line), name
