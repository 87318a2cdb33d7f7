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
- ``stored``: what a finished run leaves (its curve, its audit, ``curves.jsonl``);
- ``points``: the points to run (tables and tuning grid), the tuned values, the runner;
- ``cells``: a table's cells collected from the store beside the paper's values;
- ``claims``: the statistics and each claim's verdict, the per-cell diagnostics;
- ``figures``: the PNG plots;
- ``documents``: ``<paper>.json`` (schema-checked) and ``<paper>.md``;
- ``cli``: the command line (``main``) and :func:`write_documents`.
"""

from __future__ import annotations

from fl_lightning.reports.repro.cells import CellResult, collect
from fl_lightning.reports.repro.claims import (
    ALPHA,
    VERDICTS,
    compare_close,
    compare_methods,
    difference_ci,
    kendall,
    peak_verdict,
    selection_tracking,
    verdicts,
    with_margin,
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
    find_shared_data,
    plan,
    point_id,
    tuning_points,
)
from fl_lightning.reports.repro.stored import CURVE_COLUMNS, load_curves, read_audit, read_curve

__all__ = [
    "ALPHA",
    "CURVE_COLUMNS",
    "PROFILES",
    "REPO",
    "SEED_KEY",
    "VERDICTS",
    "Arm",
    "CellResult",
    "Definition",
    "PlotDef",
    "ReproError",
    "ReproPoint",
    "ReproRunner",
    "TableDef",
    "TuneDef",
    "TuneResult",
    "build_json",
    "build_parser",
    "cell_json",
    "choose",
    "collect",
    "compare_close",
    "compare_methods",
    "copy_images",
    "definition_path",
    "difference_ci",
    "find_shared_data",
    "kendall",
    "load_curves",
    "load_definition",
    "main",
    "peak_verdict",
    "plan",
    "plots",
    "point_id",
    "read_audit",
    "read_curve",
    "render_markdown",
    "selection_tracking",
    "tuning_json",
    "tuning_markdown",
    "tuning_points",
    "validate_document",
    "verdicts",
    "with_margin",
    "write_documents",
]
