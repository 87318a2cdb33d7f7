"""The tutorials show what their scripts print (issue 48, item 6).

Each page of ``docs/tutorials/`` shows its script's output in the ```` ```text ```` block under
``<!-- output of docs/tutorials/scripts/NAME -->`` (written by ``scripts/tutorial_outputs.py``).
The slow test runs each script in a fresh clone of this checkout, as the page tells a reader to
(from the repository root, ``fl-lightning`` and ``python`` on ``PATH``), and compares what it
printed with what the page shows, line by line, numbers included, on both streams: standard
error must be what the page's ``<!-- stderr of ... -->`` block shows, or empty where the page
shows none (issue 58 item 4: the first tutorial's step 3 printed 320 warning lines the page did
not show). The fast tests check that
every tutorial has a script and an output block, and that the comparison can fail.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from scripts.tutorial_outputs import (
    TUTORIALS,
    normalise,
    normalise_errors,
    run_script,
    shown_errors,
    shown_outputs,
    write_errors,
)
from tests.fresh_clone import fresh_clone

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted(TUTORIALS.glob("*.md"))
SHOWN = [(page, script) for page in PAGES for script in shown_outputs(page)]


def test_every_tutorial_shows_a_script_and_its_output() -> None:
    names = {p.stem for p in PAGES}
    assert {"first_private_run", "custom_strategy", "auditing", "reproducing_a_paper"} <= names
    for page in PAGES:
        outputs = shown_outputs(page)
        assert outputs, f"{page.name}: no output block"
        for script, body in outputs.items():
            assert (REPO / script).is_file(), f"{page.name}: {script} is not here"
            assert f'--8<-- "{script}"' in page.read_text(), f"{page.name} does not show {script}"
            assert body.strip(), (
                f"{page.name}: the output of {script} is empty: run "
                "python scripts/tutorial_outputs.py"
            )


def test_the_numbers_a_tutorial_reads_are_in_its_shown_output() -> None:
    """The prose after the output ("Reading it") quotes numbers from it: each must be there."""
    for page in PAGES:
        text = page.read_text()
        shown = "".join(shown_outputs(page).values()).replace("−", "-")
        reading = text[text.index("## Reading") :].replace("−", "-")
        numbers = set(re.findall(r"[-+]?\d+\.\d{2,}", reading)) - DEFINITIONS
        missing = sorted(n for n in numbers if n not in shown)
        assert not missing, f"{page.name} reads {missing}, which its output does not show"


DEFINITIONS = {"0.05"}  # α of the tests, in the text that explains them


def test_normalise_keeps_numbers_and_hides_temporary_folders() -> None:
    import tempfile

    tmp = tempfile.gettempdir()
    got = normalise(f"ε = 12.353  \ndetails: {tmp}/fl-audit-shadow-x1/privacy_statement.md\n\n")
    assert got == "ε = 12.353\ndetails: <tmp>/…/privacy_statement.md\n"
    assert normalise("accuracy 0.8719\n") != normalise("accuracy 0.8718\n")


def test_a_stderr_block_is_written_read_and_removed(tmp_path) -> None:
    script = "docs/tutorials/scripts/x.sh"
    page = tmp_path / "page.md"
    page.write_text(f"# x\n\n<!-- output of {script} -->\n```text\nout\n```\n\n## Reading it\n")
    assert shown_errors(page) == {script: ""}  # no block: the page says nothing is printed there
    write_errors(page, script, normalise_errors("warning: a\n\n"))
    assert shown_errors(page) == {script: "warning: a\n"}
    assert shown_outputs(page) == {script: "out\n"}
    write_errors(page, script, normalise_errors("warning: b\n"))
    assert shown_errors(page) == {script: "warning: b\n"}
    write_errors(page, script, normalise_errors("  \n"))
    assert shown_errors(page) == {script: ""} and "stderr of" not in page.read_text()
    assert page.read_text().endswith("```\n\n## Reading it\n")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return fresh_clone(tmp_path_factory.mktemp("tutorials") / "fl-lightning")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "script"), SHOWN, ids=[f"{p.stem}:{Path(s).name}" for p, s in SHOWN]
)
def test_tutorial_page_shows_what_its_script_prints(clone: Path, page: Path, script: str) -> None:
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PYTHONPATH": str(clone),  # the clone's package, before this checkout's editable one
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
    }
    res = run_script(script, clone, env)
    assert res.returncode == 0, f"{script} exited {res.returncode}\n{res.stderr[-3000:]}"
    errors = normalise_errors(res.stderr)
    assert errors == shown_errors(page)[script], (
        f"{page.relative_to(REPO)} does not show what {script} prints on standard error "
        f"(page: {shown_errors(page)[script][:500]!r}; printed: {errors[:1500]!r})"
    )
    printed = normalise(res.stdout).splitlines()
    shown = shown_outputs(page)[script].splitlines()
    diff = [
        f"  line {i + 1}:\n    page:    {a}\n    printed: {b}"
        for i, (a, b) in enumerate(zip(shown, printed))
        if a != b
    ]
    assert not diff and len(shown) == len(printed), (
        f"{page.relative_to(REPO)} does not show what {script} prints "
        f"({len(shown)} lines shown, {len(printed)} printed); regenerate with "
        "`python scripts/tutorial_outputs.py` and read the diff:\n" + "\n".join(diff[:10])
    )
