"""Every shell command README.md and the docs show runs as shown (issue 48, item 2).

**What is read.** Every ```` ```bash ````, ```` ```sh ````, ```` ```shell ```` and
```` ```console ```` block of README.md and ``docs/**/*.md`` (the generated reports under
``docs/reproductions/`` and ``docs/reports/`` aside). In a ``bash``/``sh`` block every line is a
command (backslash continuations joined, ``#`` comments dropped); in a ``console`` block the lines
that start with ``$ `` are commands and the lines after one, up to the next, are the output the
page quotes for it (``...`` stands for lines left out). ``--8<--`` lines include a file into the
page (a tutorial's script): ``tests/test_tutorials.py`` runs those.

**The marker.** A command the page shows but does not expect this test to run ends with
``# not-run: <why>`` (the why is required: a GPU, a W&B account, hours of CPU, it is the test
suite itself); ``<!-- not-run: <why> -->`` on the line before a block's fence marks every command
of the block. The fast test below fails on a marker without a reason and on a skip list that
grows past a quarter of the commands.

**The fast test** (every run of the suite) checks each command, marked or not: its program
exists (a script, a file, a module, an installed tool) and an ``fl-lightning`` command's flags
parse (the subcommand's own parser; LightningCLI's for ``fit``/``validate``/``test`` and the
overrides of ``audit``), without running anything.

**The slow test** runs every unmarked command, in document order (README.md first, then the
docs pages by name), in a fresh ``git clone`` of this checkout (``tests/fresh_clone.py``): once
with the real MNIST test set (where this machine has it) and once without it. Each must exit 0,
and every number a ``console`` block quotes as its output must be in what it printed. Without the
MNIST files a command that needs them must end in the documented refusal instead: exit 2 and one
``error:`` line that names the missing MNIST files.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA
from tests.fresh_clone import clone_env, fresh_clone, seed_venv

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
GENERATED = ("docs/reproductions/", "docs/reports/")
NOT_RUN = re.compile(r"\s#\s*not-run:(?P<why>.*)$")
BLOCK_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(?P<why>.*?)-->\s*$")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass(frozen=True)
class DocCommand:
    file: str  # relative to the repository root
    line: int
    command: str  # one logical line, comment dropped
    not_run: str | None = None  # the marker's reason
    output: str | None = None  # what a console block quotes after it

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    docs = sorted(p for p in (REPO / "docs").rglob("*.md")
                  if not str(p.relative_to(REPO)).startswith(GENERATED))  # fmt: skip
    return [REPO / "README.md", *docs]


def _strip_comment(line: str) -> tuple[str, str | None]:
    """``(command, not-run reason)``: a ``#`` starting a word outside quotes begins a comment."""
    marker = NOT_RUN.search(line)
    why = marker["why"].strip() if marker else None
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: keep the line as it is
        return line.strip(), why
    if not words:
        return "", why
    # cut the original text at the comment, keeping its quoting
    cut = len(line)
    for m in re.finditer(r"(?:^|\s)#", line):
        head = line[: m.start() + (1 if m.group(0).startswith(" ") else 0)]
        try:
            if shlex.split(head) == words:
                cut = m.start()
                break
        except ValueError:
            continue
    return line[:cut].strip(), why


def parse_doc(path: Path) -> list[DocCommand]:
    rel = str(path.relative_to(REPO))
    lines = path.read_text().splitlines()
    out: list[DocCommand] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*(`{3,})(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        ticks, lang = fence.group(1), fence.group(2).lower()
        block_why = None
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (m := BLOCK_NOT_RUN.match(lines[j])):
            block_why = m["why"].strip()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        body = lines[i + 1 : end]
        if lang in SHELL_LANGS:
            out += _block_commands(rel, i + 2, body, console=lang == "console", why=block_why)
        i = end + 1
    return out


def _block_commands(
    rel: str, first: int, body: list[str], *, console: bool, why: str | None
) -> list[DocCommand]:
    cmds: list[DocCommand] = []
    k = 0
    while k < len(body):
        raw, lineno = body[k], first + k
        if console and not raw.startswith("$ "):
            if cmds:  # output quoted for the last command
                last = cmds[-1]
                text = (last.output or "") + raw + "\n"
                cmds[-1] = DocCommand(last.file, last.line, last.command, last.not_run, text)
            k += 1
            continue
        logical = raw[2:] if console else raw
        while logical.rstrip().endswith("\\") and k + 1 < len(body):
            k += 1
            logical = logical.rstrip()[:-1].rstrip() + " " + body[k].strip()
        k += 1
        command, line_why = _strip_comment(logical)
        if not command or command.startswith("--8<--"):
            continue
        cmds.append(DocCommand(rel, lineno, command, line_why if line_why is not None else why))
    return cmds


def doc_commands() -> list[DocCommand]:
    return [c for path in doc_files() for c in parse_doc(path)]


COMMANDS = doc_commands()


# -- the fast test: every program exists, every fl-lightning command parses ----------------------


def _words(command: str) -> list[str]:
    """The command's words, with leading ``VAR=value`` assignments and ``nice -n N`` dropped."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if words[:1] == ["nice"]:
        words = words[3:] if words[1:2] == ["-n"] else words[1:]
    return words


def _parser_of(module: str):
    mod = importlib.import_module(module)
    build = getattr(mod, "build_parser", None) or mod._parser
    return build()


def fl_lightning_problem(argv: list[str]) -> str | None:
    """Why ``fl-lightning argv`` would not parse (None if it does); runs nothing."""
    from fl_lightning.cli import import_user_modules
    from fl_lightning.extensions import _PROVIDERS
    from fl_lightning.runs.arguments import argument_problem

    if argv[:1] in (["--help"], ["-h"]) or "--help" in argv:
        return None
    rest = import_user_modules(list(argv))
    sub, args = rest[0], rest[1:]
    if sub in ("fit", "validate", "test"):
        return argument_problem([sub, *args])
    if sub not in _PROVIDERS:
        return f"unknown command {sub!r}"
    parser = _parser_of(_PROVIDERS[sub])
    try:
        if sub == "audit":
            known, overrides = parser.parse_known_args(args)
            return argument_problem(["fit", "--config", known.config, *overrides])
        parser.parse_args(args)
    except SystemExit:
        return f"fl-lightning {sub}: its parser refused {args}"
    return None


VENV_ACTIVATE = ".venv/bin/activate"  # a checkout has it once scripts/setup.sh ran


def program_problem(cmd: DocCommand) -> str | None:
    """Why the command's program or its files do not exist here (None if they do)."""
    words = _words(cmd.command)
    prog, args = words[0], words[1:]
    if prog == "fl-lightning":
        return fl_lightning_problem(args)
    if prog in ("bash", "sh", "source", "."):
        if args[0].startswith(".venv/"):  # made by the set-up command (scripts/setup.sh)
            made = (REPO / "scripts" / "setup.sh").is_file() and args[0] == VENV_ACTIVATE
            return None if made else f"no file {args[0]} (scripts/setup.sh makes {VENV_ACTIVATE})"
        return None if (REPO / args[0]).is_file() else f"no file {args[0]}"
    if prog == "sbatch":  # sbatch [options] SCRIPT [arguments]: the script must be here
        script = next((a for a in args if not a.startswith("-")), None)
        return None if script and (REPO / script).is_file() else f"no batch script {script}"
    if prog == "srun":  # srun [options] PROGRAM ...: PROGRAM on every node (a set-up check)
        inner = [a for a in args if not a.startswith("-")]
        known = ("bash", "python", "python3", "fl-lightning")
        return None if inner and inner[0] in known else f"srun runs {inner[:1]}, not one of {known}"
    if prog in ("python", "python3"):
        if args[0] == "-m":
            return None if importlib.util.find_spec(args[1]) else f"no module {args[1]}"
        return None if (REPO / args[0]).is_file() else f"no file {args[0]}"
    if prog == "pytest":
        paths = [a.split("::")[0] for a in args if a.startswith("tests")]
        missing = [p for p in paths if not (REPO / p).exists()]
        return f"no test path {missing}" if missing else None
    if prog == "git":
        return None
    tools = {"mkdocs": "mkdocs", "pre-commit": "pre_commit", "wandb": "wandb"}
    if prog in tools:
        return None if importlib.util.find_spec(tools[prog]) else f"{prog} is not installed"
    return f"unknown program {prog!r}: teach tests/test_docs_commands.py how to check it"


def test_the_docs_commands_are_found_and_marked_with_reasons() -> None:
    files = {c.file for c in COMMANDS}
    assert "README.md" in files and "docs/sweeps.md" in files, files
    readme = [c.command for c in COMMANDS if c.file == "README.md"]
    assert "bash scripts/quickstart.sh" in readme, readme
    for sub in ("fit", "sweep", "report", "audit", "repro"):
        assert any(c.startswith(f"fl-lightning {sub} ") for c in readme), sub
    assert any(c.output for c in COMMANDS if c.file == "README.md"), "the quickstart's output"
    unexplained = [c.id for c in COMMANDS if c.not_run is not None and len(c.not_run) < 10]
    assert not unexplained, f"a not-run marker needs its reason: {unexplained}"
    # A command another test runs names it (``tests/....py runs it``) or is the suite's own
    # (``scripts/test.sh``, ``pytest ...``); the others are what no test runs: few, or they hide.
    for c in COMMANDS:
        for path in re.findall(r"tests/[\w/]+\.py", c.not_run or ""):
            assert (REPO / path).is_file(), f"{c.id}: the marker names {path}, which is not here"
    elsewhere = [c for c in COMMANDS if c.not_run and _run_elsewhere(c)]
    nowhere = [c for c in COMMANDS if c.not_run and c not in elsewhere]
    assert len(nowhere) < len(COMMANDS) / 4, [c.id for c in nowhere]


def _run_elsewhere(cmd: DocCommand) -> bool:
    """Whether a not-run command is run by a test after all: a tutorial's script (its test
    named in the marker), the test suite itself, or the suite's own tests by pytest."""
    words = _words(cmd.command)
    return bool(
        re.search(r"tests/[\w/]+\.py runs it", cmd.not_run or "")
        or words[:2] == ["bash", "scripts/test.sh"]
        or words[:1] == ["pytest"]
    )


def test_the_parser_reads_blocks_markers_and_output(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nfl-lightning fit --config a.yaml \\\n    --trainer.max_steps 2   # two\n"
        "# a comment line\nbash x.sh  # not-run: needs a GPU to be useful\n```\n\n"
        "<!-- not-run: a W&B account -->\n```sh\nwandb login\n```\n"
        "```console\n$ fl-lightning --help\ncommands: 7\n$ echo '#not a comment'\n```\n"
        "```python\nprint('not shell')\n```\n"
    )
    import tests.test_docs_commands as me

    cmds = me._parse_for_test(page)
    assert [c.command for c in cmds] == [
        "fl-lightning fit --config a.yaml --trainer.max_steps 2",
        "bash x.sh",
        "wandb login",
        "fl-lightning --help",
        "echo '#not a comment'",
    ]
    assert [c.not_run for c in cmds] == [
        None, "needs a GPU to be useful", "a W&B account", None, None
    ]  # fmt: skip
    assert cmds[3].output == "commands: 7\n"
    assert quoted_numbers("ε = 12.353 (δ = 1e-05); q = 0.5, version_0") == [
        "12.353", "1e-05", "0.5"
    ]  # fmt: skip


def _parse_for_test(path: Path) -> list[DocCommand]:
    global REPO
    saved, REPO = REPO, path.parent
    try:
        return parse_doc(path)
    finally:
        REPO = saved


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_docs_command_program_and_flags_exist(cmd: DocCommand, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    problem = program_problem(cmd)
    assert problem is None, f"{cmd.id}: {cmd.command}\n  {problem}"


# -- the slow test: every command runs, in a fresh clone, with and without MNIST ------------------


def quoted_numbers(output: str) -> list[str]:
    """The numbers a page quotes as output, those in file names and paths aside."""
    text = re.sub(r"\S*[/_]\S*", " ", output)  # paths and names such as version_0
    return NUMBER.findall(text)


def needs_mnist_refusal(res: subprocess.CompletedProcess) -> bool:
    """The documented refusal of a command that needs the MNIST files, where they are absent."""
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    return (
        res.returncode == 2
        and len(errors) == 1
        and "MNIST" in errors[0]
        and ("not found" in errors[0] or "missing" in errors[0])
    )


RUNNABLE = [c for c in COMMANDS if not c.not_run]


def run_doc_command(cmd: DocCommand, root: Path, env: dict[str, str], *, with_mnist: bool) -> str:
    """Runs one command in the clone; what is wrong with the result ("" when nothing is)."""
    program = _words(cmd.command)[0]
    if program not in ("source", ".") and shutil.which(program, path=env["PATH"]) is None:
        return f"{cmd.id}: {cmd.command}\n  {program} is not installed"
    res = subprocess.run(
        ["bash", "-c", f"set -e\n{cmd.command}\n"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    printed = res.stdout + res.stderr
    tail = printed[-3000:]
    if res.returncode != 0 and not with_mnist and needs_mnist_refusal(res):
        return ""  # the documented refusal without the MNIST files
    if res.returncode != 0:
        return f"{cmd.id}: {cmd.command}\n  exit {res.returncode}\n{tail}"
    missing = [n for n in quoted_numbers(cmd.output or "") if n not in printed]
    if missing:
        return f"{cmd.id}: {cmd.command}\n  quoted but not printed: {missing}\n{tail}"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("with_mnist", [True, False], ids=["with MNIST", "without MNIST"])
def test_every_docs_command_runs_as_shown(with_mnist: bool, tmp_path) -> None:
    """Every unmarked command, in document order, in one fresh clone (the README's resume reads
    the quickstart's checkpoint, a report reads the sweep before it): one test a variant, so
    xdist cannot split the order. Minutes; ``-s`` shows each command as it runs."""
    if with_mnist and SHARED_DATA is None:
        pytest.skip("the real MNIST test set is not on this machine (FL_SHARED_DATA)")
    root = fresh_clone(tmp_path / "fl-lightning")
    seed_venv(root)
    env = clone_env(root, mnist=SHARED_DATA if with_mnist else None, tmp=tmp_path)
    failures = []
    for cmd in RUNNABLE:
        print(f"[{cmd.id}] {cmd.command}", flush=True)
        problem = run_doc_command(cmd, root, env, with_mnist=with_mnist)
        if problem:
            failures.append(problem)
    assert not failures, f"{len(failures)} of {len(RUNNABLE)} commands failed:\n\n" + (
        "\n\n".join(failures)
    )
