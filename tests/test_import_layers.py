"""The package's import graph keeps its layering: no upward arrow, no import circle.

Every ``import fl_lightning...`` / ``from fl_lightning... import`` in ``fl_lightning/`` is read
with ``ast`` (imports inside functions and under ``TYPE_CHECKING`` count: a lazy or type-only
import is still a dependency a reader has to follow). The layers, bottom to top, are written in
``LAYERS``; a module may import from its own layer or any layer below it. An arrow that points
up, or a circle between modules, fails the test unless it is in ``ALLOWED_UPWARD`` /
``ALLOWED_CYCLES``. Those lists record the debt of today (docs/architecture.md): they may only
shrink. An allow-listed entry that no longer exists also fails the test, so whoever removes an
arrow or breaks a circle deletes its entry in the same change.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fl_lightning"

# Bottom to top. A module's layer is that of its first package below fl_lightning (or of the
# module itself for top-level modules such as cli.py).
LAYERS: list[set[str]] = [
    {"utils"},  # pure helpers
    # mechanisms/accountants and their events, datasets/partitioners, networks
    {"privacy", "data", "models"},
    # the round's vocabulary (records.py: ClientUpdate, RoundContext, which carry privacy events)
    {"records"},
    {"client"},  # local training; never sees a strategy or the server
    {"strategies"},  # aggregation and privacy placement; never imports the server
    {"server", "callbacks"},  # the round loop, sampling, executors; callbacks on its hooks
    {
        "attacks",
        "reports",
        "sweeps",
        "runs",
        "extensions",
        "configs",
        "loggers",
        "first_contact",
        "testing",
    },  # tools
    {"cli"},  # the entry point: nothing in the library imports it
]

# Packages split by job (issue #38 item 4): every module of the package is named here, in one
# of its inner layers (bottom to top), and imports inside the package go one way only. A new
# file in these packages is placed here on purpose.
INNER_LAYERS: dict[str, list[set[str]]] = {
    "runs": [
        {"runs.help"},  # the screenful of `fit --help`, read from the source (imports nothing)
        # the parts: Trainer defaults, pre-flight checks, collectives, phase, one-line errors
        {
            "runs.defaults",
            "runs.preflight",
            "runs.distributed",
            "runs.phase",
            "runs.error_lines",
            "runs.slurm",
            "runs.interrupt",
        },
        {"runs.cli_class"},  # the LightningCLI class built from the parts
        {"runs.arguments"},  # does a command line parse (builds the class, parse only)
    ],
    "reports.paper_tables": [
        {"reports.paper_tables.notes_markdown"},  # reading the notes' Markdown tables
        {  # one paper's tables, captions and settings each
            "reports.paper_tables.p000_dp_fedasgp",
            "reports.paper_tables.p001_gcfl",
            "reports.paper_tables.p002_dpfl_agn",
            "reports.paper_tables.p003_spm_fl",
            "reports.paper_tables.p004_adp_fl",
        },
        {"reports.paper_tables.build"},  # every paper's JSON, and the command that writes it
    ],
}

# The privacy package by concern (issue #60): each sub-package and the siblings it may import
# (the one-paragraph docstring of its __init__.py says the same). Together with the circle test
# this keeps the sub-packages in layers: accounting and audit at the bottom, guarantee on top.
PRIVACY_PACKAGES: dict[str, set[str]] = {
    "accounting": set(),
    "audit": set(),
    "mechanisms": {"accounting"},
    "correlated": {"accounting"},
    "distributed": {"accounting"},
    "guarantee": {"accounting", "distributed"},
}
PRIVACY_MAX_ENTRIES = 8  # top-level entries of fl_lightning/privacy/, __init__.py included

# (importer, imported) module pairs that point up today. Only ever delete from this list.
ALLOWED_UPWARD: set[tuple[str, str]] = set()

# Import circles (strongly connected components of the module graph) that exist today, each
# as the exact set of modules in it. Only ever delete (or shrink) entries.
ALLOWED_CYCLES: list[set[str]] = []


def _modules() -> dict[str, Path]:
    """Module name (relative to fl_lightning, '' for the package itself) to its file."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest module of ours that ``dotted`` (relative to fl_lightning) names or lies in."""
    name = dotted
    while name not in modules:
        if "." not in name:
            return "" if "" in modules and not dotted else None
        name = name.rpartition(".")[0]
    return name


def import_graph() -> dict[str, set[str]]:
    """importer -> imported, both relative to fl_lightning (e.g. 'server.module')."""
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ["fl_lightning", *name.split(".")] if name else ["fl_lightning"]
                    if not is_package:
                        base = base[:-1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                # `from pkg import sub` imports the module pkg.sub where it is one.
                targets = [f"{source}.{a.name}" for a in node.names]
            for target in targets:
                if target != "fl_lightning" and not target.startswith("fl_lightning."):
                    continue
                resolved = _resolve(target.removeprefix("fl_lightning").lstrip("."), modules)
                if resolved is not None and resolved != name:
                    graph[name].add(resolved)
    return dict(graph)


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(
        f"fl_lightning.{module}: its package {top!r} has no layer; add it to LAYERS in "
        "tests/test_import_layers.py and to docs/architecture.md"
    )


def upward_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (src, dst)
        for src, targets in graph.items()
        if src  # the package's own __init__ sits outside the layers
        for dst in targets
        if dst and layer_of(dst) > layer_of(src)
    }


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {d for ts in graph.values() for d in ts})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_package_has_a_layer(graph):
    for module in graph:
        if module:
            layer_of(module)


def test_no_new_upward_arrow(graph):
    new = sorted(upward_arrows(graph) - ALLOWED_UPWARD)
    lines = "\n".join(f"  fl_lightning.{a} -> fl_lightning.{b}" for a, b in new)
    assert not new, f"upward imports (see LAYERS here and docs/architecture.md):\n{lines}"


def test_allowed_upward_arrows_still_exist(graph):
    gone = sorted(ALLOWED_UPWARD - upward_arrows(graph))
    assert not gone, "these arrows are gone; delete them from ALLOWED_UPWARD:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in gone
    )


def test_no_new_import_circle(graph):
    found = cycles(graph)
    new = [c for c in found if c not in ALLOWED_CYCLES]
    assert not new, "import circles:\n" + "\n".join(f"  {sorted(c)}" for c in new)


def test_allowed_import_circles_still_exist(graph):
    found = cycles(graph)
    gone = [c for c in ALLOWED_CYCLES if c not in found]
    assert not gone, "these circles changed or are gone; update ALLOWED_CYCLES:\n" + "\n".join(
        f"  {sorted(c)}" for c in gone
    )


@pytest.mark.parametrize("package", sorted(INNER_LAYERS))
def test_split_packages_keep_their_places(graph, package):
    layers = INNER_LAYERS[package]
    placed = {m: i for i, names in enumerate(layers) for m in names}
    present = {m for m in _modules() if m.startswith(f"{package}.")}
    assert present == set(placed), (
        f"fl_lightning.{package}: modules not placed in INNER_LAYERS (or placed but gone): "
        f"{sorted(present ^ set(placed))}"
    )
    up = sorted(
        (src, dst)
        for src in placed
        for dst in graph.get(src, ())
        if dst in placed and placed[dst] > placed[src]
    )
    assert not up, f"fl_lightning.{package}: imports that point up inside the package: {up}"
    assert not any(c & set(placed) for c in cycles(graph))


def test_privacy_sub_packages_import_only_what_they_declare(graph):
    """Every module of privacy/ lies in a declared sub-package, and imports of privacy/ from
    privacy/ go to its own sub-package or to one it declares, never to records or above."""
    subs = {m for m in _modules() if m.startswith("privacy.")}
    stray = sorted(m for m in subs if m.split(".")[1] not in PRIVACY_PACKAGES)
    assert not stray, f"fl_lightning.privacy: modules outside PRIVACY_PACKAGES: {stray}"
    bad = sorted(
        (src, dst)
        for src in subs
        for dst in graph.get(src, ())
        if (dst.startswith("privacy.") or dst == "privacy")
        and dst.split(".")[1:2] != src.split(".")[1:2]
        and (dst == "privacy" or dst.split(".")[1] not in PRIVACY_PACKAGES[src.split(".")[1]])
    )
    assert not bad, f"fl_lightning.privacy: imports a sub-package does not declare: {bad}"
    above = sorted(
        (src, dst)
        for src in subs
        for dst in graph.get(src, ())
        if not dst.startswith("privacy") and layer_of(dst) >= layer_of("records")
    )
    assert not above, f"fl_lightning.privacy imports records or above: {above}"


def test_privacy_has_few_top_level_entries():
    entries = sorted(p.name for p in (PACKAGE / "privacy").iterdir() if p.name != "__pycache__")
    assert len(entries) <= PRIVACY_MAX_ENTRIES, entries
    for name in PRIVACY_PACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / "privacy" / name / "__init__.py").read_text()))
        assert doc and "import" in doc, f"privacy/{name}/__init__.py: say what it may import"


def test_the_library_never_imports_the_entry_point(graph):
    assert {src for src, targets in graph.items() if "cli" in targets} == set()


# The checker itself, on graphs whose answer is known.
def test_checker_finds_an_upward_arrow_and_a_circle():
    graph = {
        "client.x": {"strategies.base", "utils.rng"},
        "strategies.base": {"client.x"},
        "utils.rng": set(),
    }
    assert upward_arrows(graph) == {("client.x", "strategies.base")}
    assert cycles(graph) == [{"client.x", "strategies.base"}]
    assert cycles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": set()}) == []


def test_checker_reads_relative_and_lazy_imports(graph):
    # attacks/pipeline.py imports runs/cli_class.py inside a method; strategies/__init__.py
    # imports base.
    assert "runs.cli_class" in graph["attacks.pipeline"]
    assert "strategies.base" in graph["strategies"]
