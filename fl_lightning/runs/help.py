"""``fl-lightning fit --help`` that fits a screen: the federated groups first (model, data,
client, strategy, privacy), one entry an option with its default and the first sentence of its
docstring, the model zoo and the strategies by name, and Lightning's Trainer behind
``--help-all`` (jsonargparse's full help, every ``--trainer.*`` flag and every known class).

Read from the source with :mod:`ast`, not by importing the classes or building the parser: the
help costs no more than starting Python (``benchmarks/startup_time.py``); a test checks that it
lists exactly the options the parser accepts (tests/test_help.py).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
WIDTH = 100

# (group, source file, class, what it is); the keys the CLI links in are left out.
GROUPS: tuple[tuple[str, str, str, str], ...] = (
    ("model", "server/module.py", "FederatedModule", "the federated round loop"),
    ("data", "data/datamodule.py", "FederatedDataModule", "the dataset and its clients"),
    ("client", "client/module.py", "ClientModule", "what each client trains, and how"),
    ("privacy", "privacy/guarantee/accountant.py", "PrivacyAccountant", "accounting: ε at δ"),
)
LINKED = {"model.client", "model.strategy", "model.privacy", "model.seed", "data.seed"}


@dataclass
class Option:
    key: str
    kind: str
    default: str | None
    about: str


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def arg_docs(doc: str) -> dict[str, str]:
    """``name -> text`` of a Google-style docstring's ``Args:`` section (continuations
    joined)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Args:")
    except StopIteration:
        return out
    indent = None
    current = None
    for ln in lines[start + 1 :]:
        if not ln.strip():
            continue
        lead = len(ln) - len(ln.lstrip())
        if indent is None:
            indent = lead
        if lead < indent:
            break
        m = re.match(r"(\w+)(?: \([^)]*\))?: ?(.*)", ln.strip())
        if lead == indent and m:
            current = m.group(1)
            out[current] = m.group(2)
        elif current is not None:
            out[current] += " " + ln.strip()
    return out


def first_sentence(text: str) -> str:
    text = re.sub(r"``([^`]*)``", r"\1", text).strip()
    m = re.search(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)(?<!\bal)\.(\s|$)", text)
    return text[: m.start() + 1] if m else text


def _shown(default: ast.expr) -> str:
    """A default as a YAML user writes it (null, true, auto), else as Python spells it."""
    try:
        value = ast.literal_eval(default)
    except ValueError:
        return ast.unparse(default)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return value if isinstance(value, str) else ast.unparse(default)


def _kind(annotation: ast.expr | None) -> str:
    if annotation is None:
        return "VALUE"
    src = ast.unparse(annotation)
    lit = re.fullmatch(r"Literal\[(.*)\]", src)
    if lit:
        return "{" + ",".join(v.strip().strip("'\"") for v in lit.group(1).split(",")) + "}"
    src = src.replace(" | None", "").replace("None | ", "")
    return {"bool": "{true,false}", "int": "INT", "float": "FLOAT", "str": "STR"}.get(src, src)


def group_options(group: str, rel: str, cls_name: str) -> list[Option]:
    """The options of one class-typed group, in signature order."""
    cls = _class(PACKAGE / rel, cls_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    docs = arg_docs(ast.get_docstring(cls) or "")
    docs.update(arg_docs(ast.get_docstring(init) or ""))
    args = [a for a in init.args.args if a.arg != "self"]
    defaults: list[ast.expr | None] = [None] * (len(args) - len(init.args.defaults))
    defaults += list(init.args.defaults)
    pairs = list(zip(args, defaults)) + list(zip(init.args.kwonlyargs, init.args.kw_defaults))
    out = []
    for arg, default in pairs:
        key = f"{group}.{arg.arg}"
        if key in LINKED:
            continue
        value = None if default is None else _shown(default)
        out.append(Option(key, _kind(arg.annotation), value, first_sentence(docs.get(arg.arg, ""))))
    return out


def subclasses_of(base: str, folder: str) -> list[str]:
    """Public classes under ``fl_lightning/<folder>`` that derive (by name) from ``base``."""
    bases: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]

    def derives(name: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            b == base or (b in bases and b not in seen and derives(b, seen | {b}))
            for b in bases.get(name, [])
        )

    return sorted(n for n in bases if not n.startswith("_") and not n.endswith(base) and derives(n))


def model_zoo() -> list[str]:
    tree = ast.parse((PACKAGE / "models" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _wrap(text: str, indent: int = 6, lines: int = 2) -> list[str]:
    pad = " " * indent
    out = textwrap.wrap(text, WIDTH - indent) or []
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: WIDTH - indent - 1].rstrip() + "…"
    return [pad + ln for ln in out]


def _entry(opt: Option) -> list[str]:
    head = f"  --{opt.key} {opt.kind}"
    if opt.default is not None:
        head += f"  (default {opt.default})"
    return [head, *_wrap(opt.about)] if opt.about else [head]


def short_help(subcommand: str = "fit") -> str:
    """The screenful ``fl-lightning <subcommand> --help`` prints."""
    what = {
        "fit": "Train a federated run.",
        "validate": "Evaluate a run's global model on the validation split (--ckpt_path).",
        "test": "Evaluate a run's global model on the test split (--ckpt_path).",
    }[subcommand]
    out = [
        f"usage: fl-lightning {subcommand} [--config FILE] [--GROUP FILE] [--GROUP.KEY VALUE ...]",
        "",
        *textwrap.wrap(
            what + " Every group also takes a YAML file (--client configs/client/digits_mlp.yaml); "
            "--config FILE takes a whole experiment (configs/experiment/quickstart.yaml); later "
            "flags override earlier ones. Defaults below are the built-in ones "
            "(configs/base.yaml restates them); --print_config shows what a command line "
            "resolves to.",
            WIDTH,
        ),
    ]
    for group, rel, cls, about in GROUPS:
        out += ["", f"{group}: {about} ({cls})"]
        if group == "client":
            zoo = ", ".join(model_zoo())
            out += [
                "  --client.net CLASS",
                *_wrap(
                    f"the network: a model-zoo name ({zoo}) or your own class path "
                    "with --import MODULE; --client.net.help NAME lists its arguments",
                    lines=4,
                ),
            ]
            opts = [o for o in group_options(group, rel, cls) if o.key != "client.net"]
        else:
            opts = group_options(group, rel, cls)
        for opt in opts:
            out += _entry(opt)
        if group == "client":  # model, data, client, strategy, privacy
            names = ", ".join(subclasses_of("Strategy", "strategies"))
            out += [
                "",
                "strategy: aggregation and its privacy mechanism (required)",
                "  --strategy NAME|CLASS_PATH|FILE  (--strategy.init_args.KEY VALUE)",
                *_wrap(
                    f"one of {names}; or your own Strategy subclass with --import MODULE. "
                    "--strategy.help NAME lists a strategy's arguments",
                    lines=5,
                ),
            ]
    out += [
        "",
        "run:",
        "  --seed_everything INT  (default 0)",
        *_wrap("seed of every generator of the run (the split, cohorts, batches, noise)"),
        "  --ckpt_path PATH",
        *_wrap("a checkpoint of this run to resume from (<run>/checkpoints/last.ckpt)"),
        "  --distributed_timeout FLOAT  (default 1800.0)",
        *_wrap("seconds a process waits in a collective for the others before the run fails"),
        "  --print_config",
        *_wrap("print the resolved configuration and exit"),
        "",
        "trainer: Lightning's Trainer (--trainer.max_steps is the number of rounds; also",
        "  --trainer.accelerator, --trainer.devices, --trainer.logger,",
        "  --trainer.default_root_dir). fl-lightning "
        f"{subcommand} --help-all lists every --trainer.*",
        "  flag and every option with its type.",
    ]
    return "\n".join(out) + "\n"
