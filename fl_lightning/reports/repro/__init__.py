"""``fl-lightning repro``: reproduce a paper's tables with one command.

Usage::

    fl-lightning repro PAPER [--table T] [--profile scaled|paper] [--seeds N] [--jobs J]
        [--store DIR] [--out DIR] [--set KEY=VALUE ...] [--report-only] [--dry-run]

A paper's reproduction is defined in ``fl_lightning/reports/repro_specs/<paper>.yaml``: its
*arms* (a method label, config files and overrides, per profile), its *tables* (which arms, the
paper's table in ``paper_tables/<paper>.json``, the non-private reference arm), its *claims*
(how a verdict is computed) and its *deviations* from the paper. The command

1. runs every (arm, seed) point of the chosen tables as ``fl-lightning fit`` subprocesses through
   the sweep runner, against an append-only store (``docs/reproductions/store/<paper>-<profile>/
   results.jsonl``); a point already finished there is not run again, a killed command resumes
   where it stopped, and each finished point's per-round curve is appended to ``curves.jsonl``
   beside the store (the run folders under ``runs/`` are not needed afterwards);
2. writes ``<out>/<paper>.json`` (the machine-readable result), ``<out>/<paper>.md`` and PNG
   plots beside them (accuracy vs round per method; ε vs round; accuracy vs ε where the table has
   an ε axis).

A point's id hashes its parameters, its arm and the text of its config files, so a changed arm
never reuses (or pools with) results of another setting. With every point finished the command
only regenerates the documents (seconds).

The package, one module a job; each imports only the modules listed before it (no circle):

- ``definition``: the YAML definition read into :class:`Definition` (:class:`ReproError`);
- ``stats``: the statistics, one of each for every paper: the paired test by seed, the
  minimum detectable effect, the verdict label rule, Kendall τ within a column;
- ``stored``: what a finished run leaves (its curve, its audit, ``curves.jsonl``);
- ``provenance``: the code's commit and relative paths in store rows, the store migration;
- ``points``: the points to run (tables and tuning grid), the tuned values, the runner;
- ``registration``: each claim's analysis plan, registered (sha256, commit, time) before its
  runs; whether a verdict is confirmatory;
- ``verify``: ``--verify K``, re-running stored cells and comparing every stored metric;
- ``cells``: a table's cells collected from the store beside the paper's values;
- ``setting``: an arm's flattened setting, where a reference differs from the private arms;
- ``claims``: each claim's verdict (or why it is untestable), the per-cell diagnostics;
- ``figures``: the PNG plots;
- ``documents``: ``<paper>.json`` (schema-checked) and ``<paper>.md``;
- ``readme``: the README's results table generated from the reports;
- ``cli``: the command line (``main``) and :func:`write_documents`.
"""

from __future__ import annotations

from fl_lightning.reports.repro.cells import CellResult, collect
from fl_lightning.reports.repro.claims import (
    privacy_unit,
    selection_tracking,
    untestable_reasons,
    verdicts,
)
from fl_lightning.reports.repro.cli import build_parser, main, write_documents
from fl_lightning.reports.repro.definition import (
    PROFILES,
    Arm,
    Definition,
    PlotDef,
    ReproError,
    TableDef,
    TuneDef,
    definition_path,
    load_definition,
)
from fl_lightning.reports.repro.documents import (
    build_json,
    cell_json,
    copy_images,
    render_markdown,
    tuning_json,
    tuning_markdown,
    validate_document,
)
from fl_lightning.reports.repro.figures import plots
from fl_lightning.reports.repro.points import (
    REPO,
    SEED_KEY,
    ReproPoint,
    ReproRunner,
    TuneResult,
    choose,
    claim_points,
    find_shared_data,
    plan,
    point_id,
    tuning_points,
    with_stored_seeds,
)
from fl_lightning.reports.repro.provenance import (
    ProvenanceStore,
    code_commit,
    migrate_store,
    relative_row,
    report_commits,
)
from fl_lightning.reports.repro.setting import flat_setting, same_setting_except
from fl_lightning.reports.repro.stats import (
    ALPHA,
    KENDALL_MIN,
    VERDICTS,
    Test,
    kendall,
    label,
    mde,
    mean_test,
    paired_test,
)
from fl_lightning.reports.repro.stored import CURVE_COLUMNS, load_curves, read_audit, read_curve

__all__ = [
    "ALPHA",
    "CURVE_COLUMNS",
    "KENDALL_MIN",
    "PROFILES",
    "REPO",
    "SEED_KEY",
    "VERDICTS",
    "Arm",
    "CellResult",
    "Definition",
    "PlotDef",
    "ProvenanceStore",
    "ReproError",
    "ReproPoint",
    "ReproRunner",
    "TableDef",
    "Test",
    "TuneDef",
    "TuneResult",
    "build_json",
    "build_parser",
    "cell_json",
    "choose",
    "claim_points",
    "code_commit",
    "collect",
    "copy_images",
    "definition_path",
    "find_shared_data",
    "flat_setting",
    "kendall",
    "label",
    "load_curves",
    "load_definition",
    "main",
    "mde",
    "mean_test",
    "migrate_store",
    "paired_test",
    "plan",
    "plots",
    "point_id",
    "privacy_unit",
    "read_audit",
    "read_curve",
    "relative_row",
    "render_markdown",
    "report_commits",
    "same_setting_except",
    "selection_tracking",
    "tuning_json",
    "tuning_markdown",
    "tuning_points",
    "untestable_reasons",
    "validate_document",
    "verdicts",
    "with_stored_seeds",
    "write_documents",
]
