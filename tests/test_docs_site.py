"""The documentation site builds offline and renders (issue 48, item 6).

``mkdocs build --strict`` (mkdocs.yml at the repository root: Material theme, the API reference
by mkdocstrings) into a temporary folder; the built pages ask for nothing on the network (no
web fonts: ``theme.font: false``, no social cards); and a headless Chromium takes a screenshot of
the landing page and of a tutorial, which must not be blank: the picture varies, ink covers a
fair share of it, and Material's header colour is there (its stylesheet loaded).

Without a browser the screenshot test skips, saying so; ``.ci/run`` installs Debian's
``chromium`` and sets ``FL_REQUIRE_BROWSER=1``, under which a missing browser fails instead.
``FL_BROWSER`` names another Chromium-compatible binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MATERIAL_INDIGO = np.array([0x40, 0x51, 0xB5])  # the header of Material's default palette


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stderr[-4000:]}"
    return out


def test_the_site_builds_strict_with_every_section(site: Path) -> None:
    for page in (
        "index.html",
        "tutorials/first_private_run.html",
        "tutorials/custom_strategy.html",
        "tutorials/auditing.html",
        "tutorials/reproducing_a_paper.html",
        "reference/api/testing.html",
        "privacy.html",
    ):
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    for section in ("Tutorials", "How-to guides", "Reference", "Explanations"):
        assert section in home, section
    api = (site / "reference" / "api" / "testing.html").read_text()
    assert "RoundResult" in api and "planned_epsilon" in api  # rendered from the docstrings
    tutorial = (site / "tutorials" / "first_private_run.html").read_text()
    assert "headline_epsilon" in tutorial  # the script, included by the snippet


def test_the_site_fetches_nothing(site: Path) -> None:
    """No page loads a font, stylesheet or script from another host."""
    for page in site.rglob("*.html"):
        html = page.read_text()
        remote = re.findall(r"<(?:link|script)[^>]+(?:href|src)=\"(https?://[^\"]+)\"", html)
        assert not remote, f"{page.relative_to(site)} loads {remote}"
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page


def _browser() -> str | None:
    named = os.environ.get("FL_BROWSER")
    if named:
        return shutil.which(named) or named
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


def _chromium(browser: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium call with its own profile under ``tmp``; ``args`` end with the URL."""
    res = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={tmp / 'profile'}",
            *args,
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, f"{browser} failed:\n{res.stderr[-2000:]}"
    return res


def _screenshot(browser: str, url: str, out: Path, tmp: Path, *extra: str) -> np.ndarray:
    """A 1280 x 900 screenshot of ``url`` (``extra``: more flags, e.g. a virtual-time budget)."""
    _chromium(browser, tmp, *extra, "--window-size=1280,900", f"--screenshot={out}", url)
    assert out.is_file(), f"{browser} wrote no screenshot"
    import matplotlib.image

    img = matplotlib.image.imread(out)  # floats in [0, 1], H x W x (3|4)
    return (img[..., :3] * 255).round().astype(np.int16)


def blank_reasons(img: np.ndarray) -> list[str]:
    """Why a screenshot looks blank or unstyled (empty when it does not)."""
    reasons = []
    if img.std() < 20:
        reasons.append(f"pixel standard deviation {img.std():.1f} < 20")
    background = np.median(img.reshape(-1, 3), axis=0)
    ink = (np.abs(img - background).sum(axis=-1) > 60).mean()
    if ink < 0.03:
        reasons.append(f"only {ink:.1%} of the pixels differ from the background")
    header = (np.abs(img - MATERIAL_INDIGO).sum(axis=-1) < 30).mean()
    if header < 0.02:
        reasons.append(f"Material's header colour covers {header:.1%} (the theme did not load)")
    return reasons


def test_blank_reasons_can_fail() -> None:
    white = np.full((90, 128, 3), 255, dtype=np.int16)
    assert len(blank_reasons(white)) == 3
    page = white.copy()
    page[:8] = MATERIAL_INDIGO
    page[20:80:4, 10:100] = 0  # lines of text
    assert blank_reasons(page) == []


def _browser_or_skip() -> str:
    browser = _browser()
    if browser is None:
        if os.environ.get("FL_REQUIRE_BROWSER") == "1":
            pytest.fail("FL_REQUIRE_BROWSER=1 but no Chromium is installed (.ci/run installs it)")
        pytest.skip(
            "no headless browser (chromium): `apt-get install chromium` or set FL_BROWSER; "
            ".ci/run installs it"
        )
    return browser


@pytest.mark.parametrize("page", ["index.html", "tutorials/first_private_run.html"])
def test_the_site_renders_in_a_headless_browser(site: Path, page: str, tmp_path) -> None:
    browser = _browser_or_skip()
    img = _screenshot(browser, (site / page).as_uri(), tmp_path / "shot.png", tmp_path)
    assert img.shape[0] >= 800 and img.shape[1] >= 1200, img.shape
    reasons = blank_reasons(img)
    assert not reasons, f"{page} looks blank: {reasons}"


def _search_dom(browser: str, url: str, tmp: Path) -> str:
    """The page's DOM after its scripts ran (``--virtual-time-budget``: timers and the search
    worker get 10 s of page time), as Chromium serialises it."""
    return _chromium(browser, tmp, "--virtual-time-budget=10000", "--dump-dom", url).stdout


def search_results(dom: str) -> int:
    """How many documents Material's search says match (0 when it shows no count)."""
    found = re.search(r'md-search-result__meta">\s*(\d+) matching document', dom)
    return int(found.group(1)) if found else 0


def test_search_results_can_fail() -> None:
    assert search_results('<div class="md-search-result__meta">Initializing search</div>') == 0
    assert search_results('<div class="md-search-result__meta">12 matching documents</div>') == 12


@pytest.mark.parametrize("page", ["index.html", "tutorials/first_private_run.html"])
def test_the_site_opened_from_disk_searches(site: Path, page: str, tmp_path) -> None:
    """A page opened from the file system (no server, no network) answers a search: Material's
    offline plugin inlines the index (``search/search_index.js``) and the worker runs through the
    vendored iframe-worker shim; ``?q=`` opens the search with a query. The DOM must list
    matching documents, and a screenshot of the open search must not be blank."""
    browser = _browser_or_skip()
    url = (site / page).as_uri() + "?q=accountant"
    dom = _search_dom(browser, url, tmp_path)
    assert search_results(dom) >= 3, f"{page}: the search found nothing from disk"
    assert "md-search-result__item" in dom
    img = _screenshot(
        browser, url, tmp_path / "search.png", tmp_path / "shot", "--virtual-time-budget=10000"
    )
    assert not search_open_reasons(img), search_open_reasons(img)


def search_open_reasons(img: np.ndarray) -> list[str]:
    """Why a 1280 x 900 screenshot does not show Material's search open with results (empty
    when it does): the open search dims the page on its left, and its results panel on the right
    is white with lines of text."""
    reasons = []
    page = np.median(img[100:900, 0:550].reshape(-1, 3), axis=0)
    if page.mean() > 200:
        reasons.append(f"the page is not dimmed (median {page.mean():.0f}): the search is closed")
    panel = img[80:700, 600:1230]
    if np.median(panel.reshape(-1, 3), axis=0).mean() < 240:
        reasons.append("the results panel is not white")
    ink = (np.abs(panel - 255).sum(axis=-1) > 60).mean()
    if ink < 0.03:
        reasons.append(f"only {ink:.1%} of the results panel is text")
    return reasons


def test_search_open_reasons_can_fail() -> None:
    white = np.full((900, 1280, 3), 255, dtype=np.int16)
    assert len(search_open_reasons(white)) == 2
    shot = white.copy()
    shot[:, :560] = 117  # the dimmed page
    shot[100:680:6, 610:1200] = 0  # lines of results
    assert search_open_reasons(shot) == []


def test_the_served_site_answers_its_search_index(site: Path) -> None:
    """A served site (any static server: here ``python -m http.server --directory site``) serves
    what the search of every page loads when it is not opened from disk:
    ``search/search_index.json`` with the pages' text."""
    import json
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--directory", str(site), "--bind", "127.0.0.1",
         str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/search/search_index.json"
        for _ in range(100):  # the server is up when it answers
            try:
                with urllib.request.urlopen(url, timeout=2) as res:
                    index = json.loads(res.read())
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"python -m http.server did not answer {url}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    pages = {doc["location"].split("#")[0] for doc in index["docs"]}
    assert "tutorials/first_private_run.html" in pages
    assert any("headline_epsilon" in doc["text"] for doc in index["docs"])
