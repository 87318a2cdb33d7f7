"""``fl-lightning repro``: reproduce a paper's tables with one command.

The command line: read the arguments and the definition, run the tuning grid and then the
tables' points (resuming from the store), and write the documents from what finished
(:func:`write_documents`: cells, verdicts, JSON, figures, Markdown)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from fl_lightning.reports.repro.cells import ArmCells, CellResult, collect
from fl_lightning.reports.repro.claims import _positive, verdicts
from fl_lightning.reports.repro.definition import (
    Definition,
    ReproError,
    definition_path,
    load_definition,
)
from fl_lightning.reports.repro.documents import (
    build_json,
    copy_images,
    render_markdown,
    validate_document,
)
from fl_lightning.reports.repro.figures import plots
from fl_lightning.reports.repro.points import (
    ReproPoint,
    ReproRunner,
    TuneResult,
    choose,
    find_shared_data,
    plan,
    tuning_points,
    with_stored_seeds,
)
from fl_lightning.reports.repro.provenance import (
    DIRTY,
    ProvenanceStore,
    code_commit,
    dirty_files,
    migrate_store,
    report_commits,
    rerunnable,
)
from fl_lightning.reports.repro.registration import (
    RERUN,
    annotate,
    claim_plan,
    claim_points,
    load_registry,
    point_plans,
    register,
    register_reruns,
    registry_path,
)
from fl_lightning.reports.repro.rules import rules_id
from fl_lightning.reports.repro.stored import load_curves
from fl_lightning.reports.repro.verify import load_verification, verify
from fl_lightning.reports.tables import list_papers, load_paper
from fl_lightning.sweeps.store import ResultStore
from fl_lightning.utils.argparse_lines import OneLineParser, refuse_together


def _typed(v: str) -> Any:
    try:
        return yaml.safe_load(v)
    except yaml.YAMLError:
        return v


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fl-lightning repro", description=__doc__.split("\n")[0])
    p.add_argument("paper", help=f"paper id ({', '.join(list_papers())}) or name")
    p.add_argument("--table", action="append", default=[], help="only this table (repeatable)")
    p.add_argument("--profile", default="scaled", help="scaled (default) or paper")
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: profile's)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument(
        "--store",
        default=None,
        help="store folder (default docs/reproductions/store/<paper>-<profile>)",
    )
    p.add_argument("--out", default=None, help="output folder (default docs/reproductions)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for every run (part of the points' identity)",
    )
    p.add_argument(
        "--data-root",
        default=None,
        help="data.root for every run (default: the profile's; 'shared' finds "
        "shared/data as the tests do)",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        help="only this arm of the tables (repeatable; e.g. to try one setting)",
    )
    p.add_argument(
        "--definition",
        default=None,
        help="reproduction definition YAML (default: the shipped one of PAPER)",
    )
    p.add_argument(
        "--register",
        action="store_true",
        help="freeze every claim's analysis plan (arms, points, seeds, reading, test, scope) "
        "with its sha256, the commit and the time in <paper>.<profile>.plans.json beside the "
        "definition, then stop; commit that file before the runs (rows record the plan they ran "
        "under; a verdict is confirmatory only on runs made after its registration)",
    )
    p.add_argument(
        "--verify",
        type=int,
        default=None,
        metavar="K",
        help="re-run K stored cells drawn at random (the draw's seed is printed) with each row's "
        "threads, compare every stored metric, record it beside the store, write the documents",
    )
    p.add_argument("--verify-seed", type=int, default=None, help="the --verify draw's seed")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads of every run (OMP_NUM_THREADS; recorded in each row: a "
        "row re-runs to the last digit only with its own count; default 1)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run from a checkout with uncommitted code changes (rows then record +dirty and "
        "no plan: they can serve no confirmatory verdict)",
    )
    p.add_argument(
        "--rerun-unverifiable",
        action="store_true",
        help="run again the stored points of the chosen tables whose row records no threads or "
        "a +dirty commit (a new attempt that records both; with --register: register these "
        "re-runs as an exploratory plan first, then stop)",
    )
    p.add_argument(
        "--rerun-elsewhere",
        default=None,
        metavar="WHY",
        help="run again the stored points named by --point whose row was made on another "
        "machine (no `machine` recorded, or another one): a new attempt recording this "
        "machine and WHY; each point keeps its registered plan (same arm, seed and configs)",
    )
    p.add_argument(
        "--point",
        action="append",
        default=[],
        metavar="ID",
        help="with --rerun-unverifiable or --rerun-elsewhere: only these stored points "
        "(repeatable; e.g. the runs of one verdict)",
    )
    p.add_argument("--report-only", action="store_true", help="run nothing; write documents")
    p.add_argument("--dry-run", action="store_true", help="print the points to run and stop")
    p.add_argument(
        "--migrate-store",
        action="store_true",
        help="one-off: rewrite the store's rows with paths relative to the repository root and "
        "the commit that added each older row (store_commit); then stop",
    )
    p.add_argument(
        "--update-readme",
        default=None,
        metavar="README",
        help="after writing the documents, rewrite the results table of README (between its "
        "repro-results markers) from every <out>/<paper>.json",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    modes = ("--register", "--verify", "--report-only", "--dry-run", "--migrate-store")
    given = {m: getattr(args, m[2:].replace("-", "_")) not in (None, False) for m in modes}
    refuse_together(parser, given, modes)
    if args.verify_seed is not None and args.verify is None:
        parser.error("argument --verify-seed: only with --verify K (the seed of its draw)")
    try:
        if args.seeds is not None and args.seeds < 1:
            raise ReproError("--seeds: must be >= 1")
        if args.jobs < 1:
            raise ReproError("--jobs: must be >= 1")
        if args.threads < 1:
            raise ReproError("--threads: must be >= 1")
        if args.verify is not None and args.verify < 1:
            raise ReproError("--verify: must be >= 1")
        if args.rerun_elsewhere is not None:
            if not args.rerun_elsewhere.strip():
                raise ReproError("--rerun-elsewhere: give the reason (WHY) the rows re-run")
            if not args.point:
                raise ReproError("--rerun-elsewhere: name the stored points with --point ID")
            if args.rerun_unverifiable or args.register or args.verify or args.report_only:
                raise ReproError(
                    "--rerun-elsewhere: not with --rerun-unverifiable, --register, --verify "
                    "or --report-only"
                )
        defn = load_definition(
            args.paper, args.profile, Path(args.definition) if args.definition else None
        )
        extra = {}
        for item in args.set:
            if "=" not in item:
                raise ReproError(f"--set: expected KEY=VALUE, got {item!r}")
            k, v = item.split("=", 1)
            extra[k.strip()] = _typed(v.strip())
        tables = defn.tables
        if args.table:
            want = {t.lower() for t in args.table}
            tables = [t for t in defn.tables if {t.table.lower(), t.label.lower()} & want]
            if not tables or not want <= {
                x for t in tables for x in (t.table.lower(), t.label.lower())
            }:
                have = ", ".join(t.label for t in defn.tables)
                raise ReproError(f"--table: {args.table} not all defined for {defn.paper} ({have})")
        defn.tables = tables
        seeds = args.seeds or defn.seeds
        points = plan(defn, seeds=seeds, extra=extra, tables=tables, arm_seeds=not args.seeds)
        in_tables = {rp.arm.name for rp in points}
        if args.arm:
            unknown = sorted(set(args.arm) - in_tables)
            if unknown:
                raise ReproError(f"--arm: {unknown} not in the chosen tables")
        tuned_for = set(args.arm or in_tables)
        if defn.tune is not None:  # tune the arms whose value a chosen arm takes
            tuned_for = {
                name for name, heirs in defn.tune.inherit.items() if {name, *heirs} & tuned_for
            }
        tpoints = tuning_points(defn, extra=extra, arms=tuned_for)
        root = args.data_root or defn.data_root
        if root == "shared" and extra.get("data.dataset", "mnist_offline") != "mnist_offline":
            root = None  # `--set data.dataset=...` replaces the MNIST files: nothing to find
        if root == "shared":
            found = find_shared_data()
            if found is None and not (args.report_only or args.migrate_store or args.dry_run):
                raise ReproError(
                    "--data-root: shared/data (the MNIST test set) not found beside this "
                    "checkout; set FL_SHARED_DATA or pass --data-root DIR"
                )
            if found is None and args.dry_run:  # listing the points needs no data
                print(
                    "note: shared/data (the MNIST test set) is not beside this checkout; the "
                    "points below list without it, running them needs it (FL_SHARED_DATA or "
                    "--data-root DIR)"
                )
            root = str(found) if found else None
    except (ReproError, KeyError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {msg}", file=sys.stderr)
        return 2
    store_dir = Path(args.store or f"docs/reproductions/store/{defn.paper}-{defn.profile}")
    if args.migrate_store:
        try:
            n, changed = migrate_store(store_dir)
        except FileNotFoundError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"migrated {store_dir / 'results.jsonl'}: {changed} of {n} rows rewritten")
        return 0
    store = ProvenanceStore(store_dir)
    out_dir = Path(args.out or "docs/reproductions")
    name = f"repro-{defn.paper}-{defn.profile}"
    registry = registry_path(
        defn, Path(args.definition) if args.definition else definition_path(defn.paper)
    )
    try:
        entries = load_registry(registry)
    except ReproError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plans = point_plans(entries)
    runs_anything = not (args.report_only or args.dry_run or args.register or args.verify)
    if runs_anything and store.commit and store.commit.endswith(DIRTY):
        if not args.allow_dirty:
            files = dirty_files()
            print(
                f"error: the checkout has uncommitted changes ({', '.join(files[:3])}"
                f"{', ...' if len(files) > 3 else ''}): a row must name the commit that ran it; "
                "commit them, or pass --allow-dirty (rows then serve no confirmatory verdict)",
                file=sys.stderr,
            )
            return 2
        plans = {}  # a dirty run serves no registered plan
    kw = {"data_root": root, "parallel": args.jobs, "threads": args.threads, "plans": plans}
    rc = 0
    if tpoints:  # phase 1: the tuning grid, whose best values set the tables' arms
        trunner = ReproRunner(tpoints, store, name=name, **kw)
        ttodo, tdone, _ = trunner.pending([rp.point for rp in tpoints])
        if args.dry_run:
            print(f"tuning: {len(tpoints)} points, {tdone} finished, {len(ttodo)} to run")
            for p in ttodo:
                print(" ".join(trunner.command_for(p, store.root / "runs" / p.id / "a?")))
        elif ttodo and runs_anything:
            rc = _run(trunner, tpoints)
    tuning = choose(defn, tpoints, store)
    points = plan(  # at the chosen values
        defn, seeds=seeds, extra=extra, tables=defn.tables, arm_seeds=not args.seeds
    )
    if args.arm:
        points = [rp for rp in points if rp.arm.name in args.arm]
    plans_now = {
        str(c.get("claim")): claim_plan(defn, i, claim_points(defn, i, extra))
        for i, c in enumerate(defn.claims)
    }
    rerun: set[str] = set()
    if args.rerun_unverifiable or args.rerun_elsewhere is not None:
        latest = store.latest()  # the stored points (also seeds beyond the definition's)
        points = with_stored_seeds(defn, points, set(latest), extra)
        rerun = {
            rp.point.id
            for rp in points
            if latest.get(rp.point.id, {}).get("status") == "finished"
            and (args.rerun_elsewhere is not None or not rerunnable(latest[rp.point.id]))
        }
        if args.point:
            unknown = sorted(set(args.point) - {rp.point.id for rp in points})
            if unknown:
                print(
                    f"error: --point: {unknown[:3]} not stored points of the tables",
                    file=sys.stderr,
                )
                return 2
            points = [rp for rp in points if rp.point.id in set(args.point)]
            rerun &= set(args.point)
    if args.register and args.rerun_unverifiable:
        try:
            sha, n = register_reruns(defn, sorted(rerun), registry, code_commit() or "")
        except ReproError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"registered the re-run of {n} point(s) ({sha[:12] or 'none new'}) in {registry}")
        return 0
    if args.register:
        return _register(defn, registry, plans_now, out_dir)
    runner = ReproRunner(
        points, store, name=name, rerun=rerun, elsewhere=args.rerun_elsewhere, **kw
    )
    todo, done, _ = runner.pending([rp.point for rp in points])
    if args.dry_run:
        untuned = [r.arm for r in tuning if r.chosen is None]
        print(
            f"{len(points)} points, {done} finished, {len(todo)} to run"
            + (f" (untuned, at their configured value: {untuned})" if untuned else "")
        )
        for p in todo:
            print(" ".join(runner.command_for(p, store.root / "runs" / p.id / "a?")))
        return 0
    if args.verify and not args.report_only:
        if store.commit and store.commit.endswith(DIRTY) and not args.allow_dirty:
            print(
                "error: --verify: the checkout has uncommitted changes; commit them first",
                file=sys.stderr,
            )
            return 2
        try:
            verify(
                store,
                points + tpoints,
                args.verify,
                seed=args.verify_seed,
                name=name,
                data_root=root,
                commit=store.commit,
            )
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    elif todo and runs_anything and rc != 130:
        rc = _run(runner, points) or rc
    command = "fl-lightning repro " + " ".join(
        [defn.paper]
        + [
            f"--table {t.label!r}" if " " in t.label else f"--table {t.label}"
            for t in tables
            if args.table
        ]
        + [f"--profile {defn.profile}", f"--seeds {seeds}"]
        + [f"--arm {a}" for a in args.arm]
        + [f"--set {k}={v}" for k, v in extra.items()]
    )
    points = with_stored_seeds(defn, points, set(store.latest()), extra)
    write_documents(
        defn, points, store, out_dir, command, tuning=tuning, entries=entries, plans=plans_now
    )
    if args.update_readme:
        from fl_lightning.reports.repro.readme import update_readme

        update_readme(Path(args.update_readme), out_dir)
    return rc


def _run(runner: ReproRunner, points: list[ReproPoint]) -> int:
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return runner.run([rp.point for rp in points])
    except KeyboardInterrupt:
        print("interrupted; the documents are written from what finished")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _register(
    defn: Definition, registry: Path, plans_now: dict[str, dict[str, Any]], out_dir: Path
) -> int:
    """``--register``: every claim's plan into the registry (the old report's verdict kept
    beside a plan that changed)."""
    old: dict[str, dict[str, Any]] = {}
    report = out_dir / f"{defn.paper}.json"
    if report.exists():
        for v in json.loads(report.read_text()).get("verdicts") or []:
            t = v.get("test") or {}
            old[v["claim"]] = {
                "verdict": v.get("verdict"),
                "test": (
                    f"{t.get('estimate')} {t.get('ci95')}, n = {t.get('n')}"
                    if t
                    else v.get("reason")
                ),
                "runs": v.get("runs"),
            }
    try:
        new, same, superseded = register(
            defn, list(plans_now.values()), registry, code_commit() or "", old_verdicts=old
        )
    except ReproError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"registered {new} plan(s) in {registry} ({same} unchanged, {superseded} superseded); "
        "commit it before the runs"
    )
    return 0


def write_documents(
    defn: Definition,
    points: list[ReproPoint],
    store: ResultStore,
    out_dir: Path,
    command: str,
    tuning: list[TuneResult] | None = None,
    *,
    entries: list[dict[str, Any]] | None = None,
    plans: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    paper = load_paper(defn.paper)
    results = {}
    arm_cells: ArmCells = {}
    latest, curves = store.latest(), load_curves(store)
    registered = frozenset(  # the claims' registered plans (not the re-runs of old rows)
        str(e["sha256"])[:12]
        for e in entries or []
        if e.get("status") == "current" and (e.get("plan") or {}).get("kind") != RERUN
    )
    for t in defn.tables:
        ptab = paper.table(t.table)
        extras: dict[str, CellResult] = {}
        results[t.label] = collect(
            defn,
            points,
            store,
            t,
            ptab,
            ptab.metric,
            latest=latest,
            curves=curves,
            extras=extras,
            registered=registered,
        )
        arm_cells[t.label] = extras
    verdict_rows, merged = verdicts(defn, arm_cells, tuning or [])
    positive = {t.label: _positive(t, arm_cells) for t in defn.tables if t.kind == "attack"}
    ids = {i for cs in arm_cells.values() for c in cs.values() for i in c.ids}
    deviations = annotate(defn, verdict_rows, entries or [], plans or {}, latest)
    checked, replaced = load_verification(store.root, latest)
    top = {
        "rules": rules_id(),
        "plan_deviations": deviations,
        "verification": checked,
        "verification_replaced": replaced,
    }
    doc = build_json(
        defn,
        results,
        verdict_rows,
        command,
        tuning,
        arm_cells=arm_cells,
        merged=merged,
        commit=report_commits(store, ids),
        positive=positive,
        top=top,
        registered=registered,
    )
    problems = validate_document(doc)
    if problems:  # a defect of this module, not of the user's input
        raise RuntimeError(f"repro: the document breaks its schema: {problems[:3]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    attack = {t.label for t in defn.tables if t.kind == "attack"}  # a few rounds: no curves
    owner = {i: a for cs in arm_cells.values() for a, c in cs.items() for i in c.ids}
    hot = {owner[r] for v in verdict_rows for r in v.get("runs") or [] if r in owner}
    highlight = {t.label: hot for t in defn.tables}  # the arms some verdict compares
    ctrl = {
        t.label: [arm_cells[t.label][a] for a in t.controls if a in arm_cells[t.label]]
        for t in defn.tables
    }
    figs = plots(
        defn,
        {k: v for k, v in results.items() if k not in attack},
        out_dir,
        tuning,
        highlight=highlight,
        controls=ctrl,
    )
    for t in defn.tables:
        figs.setdefault(t.label, []).extend(
            copy_images(defn, t, results[t.label][0], store, out_dir)
        )
    (out_dir / f"{defn.paper}.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    )
    (out_dir / f"{defn.paper}.md").write_text(render_markdown(defn, doc, figs, out_dir))
    n = sum(len(c.values) for cs, _ in results.values() for c in cs)
    print(
        f"wrote {out_dir / (defn.paper + '.md')}, {defn.paper}.json and "
        f"{sum(len(v) for v in figs.values())} figures ({n} finished runs in the tables)"
    )
    return doc


if __name__ == "__main__":
    sys.exit(main())
