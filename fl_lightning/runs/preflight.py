"""Checks before the Trainer starts: the output directories (a file in the way, a directory
that already holds a run) and the checkpoint to resume (readable, from this model, rounds left).
Each returns one line naming the field, or None."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", "hparams.yaml")


def not_a_directory(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a directory."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def output_problem(trainer: Any) -> str | None:
    """Why the run may not write where it would (one line naming the field), or None.

    Checked before the Trainer starts: Lightning's CSV logger deletes an existing
    ``metrics.csv`` as soon as its experiment is created (in ``Trainer.fit``'s setup), so a
    check any later would come after the loss.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    root = Path(trainer.default_root_dir).absolute()
    log_dir = Path(trainer.log_dir or root).absolute()

    def field_of(path: Path) -> str:
        return "trainer.default_root_dir" if path.is_relative_to(root) else "trainer.logger"

    dirs = [root, log_dir]
    dirs += [Path(lg.save_dir).absolute() for lg in trainer.loggers if lg.save_dir]
    explicit_ckpt_dirs = [
        Path(cb.dirpath).absolute()
        for cb in trainer.callbacks
        if isinstance(cb, ModelCheckpoint) and cb.dirpath
    ]
    for d in [*dirs, *explicit_ckpt_dirs]:
        blocker = not_a_directory(d)
        if blocker is not None:
            field = field_of(d) if d not in explicit_ckpt_dirs else "trainer.callbacks"
            return f"{field}: {blocker} is a file, not a directory; choose another output path"
    held = [log_dir / name for name in _RUN_FILES if (log_dir / name).exists()]
    for d in [log_dir / "checkpoints", *explicit_ckpt_dirs]:
        held += sorted(d.glob("*.ckpt")) if d.is_dir() else []
    if held:
        return (
            f"{field_of(log_dir)}: {log_dir} already holds a run ({held[0].name}); choose "
            "another directory (or logger version) so nothing is overwritten"
        )
    return None


_CKPT_ALIASES = ("last", "best", "hpc", "registry")


def resolve_last(root: str | Path) -> tuple[str | None, str | None]:
    """``ckpt_path: last`` as (the newest ``last.ckpt`` under ``root``, None), or (None, one
    line naming the field) when there is none.

    Lightning resolves ``last`` in the checkpoint directory of the run being started, which for
    a new run (every fl-lightning run writes to a new ``fl/version_N``) holds nothing: it then
    warns and trains from round 0, so the "resumed" run silently restarts. Resolved here, before
    anything is written, among the runs under ``trainer.default_root_dir`` instead.
    """
    root = Path(root).absolute()
    found = [p for p in root.glob("**/last*.ckpt") if p.is_file()] if root.is_dir() else []
    if not found:
        return None, (
            f"ckpt_path: last, but no last.ckpt under {root} (trainer.default_root_dir); give "
            "the checkpoint's path, e.g. <run>/checkpoints/last.ckpt"
        )
    return str(max(found, key=lambda p: (p.stat().st_mtime, str(p)))), None


def resolve_alias(alias: str, trainer: Any) -> tuple[str | None, str | None]:
    """``ckpt_path: hpc | best | registry[:...]`` as (the file it names, None), or (None, one
    line naming the field), before anything is written: Lightning resolves these only inside
    ``Trainer.fit``, after ``config.yaml``, ``hparams.yaml`` and a W&B run exist, so a refusal
    there (or a horizon refusal of the file it finds) came too late.

    ``hpc``: the newest ``hpc_ckpt_<n>.ckpt`` in ``trainer.default_root_dir`` (Lightning's
    rule); ``best``: the best checkpoint of the run being started, which a new run (every
    fl-lightning run is one) does not have; ``registry``: Lightning's model registry, which this
    command does not reach (offline runs, no credentials)."""
    root = Path(trainer.default_root_dir).absolute()
    if alias == "hpc":
        found = trainer._checkpoint_connector._hpc_resume_path
        if found:
            return str(found), None
        return None, (
            f"ckpt_path: hpc, but no hpc_ckpt_<n>.ckpt in {root} (trainer.default_root_dir); "
            "give the checkpoint's path"
        )
    if alias == "best":
        return None, (
            "ckpt_path: best names the best checkpoint of the run being started, and a new run "
            "has none; give the checkpoint's path, e.g. <run>/checkpoints/last.ckpt"
        )
    return None, (
        f"ckpt_path: {alias} (Lightning's model registry) is not supported here; download the "
        "checkpoint and give its path"
    )


def is_alias(path: str) -> bool:
    """Whether ``ckpt_path`` is one of Lightning's names rather than a file."""
    return path in _CKPT_ALIASES or path.startswith("registry:")


def checkpoint_problem(path: str, model: Any, *, max_steps: int | None) -> str | None:
    """Why ``ckpt_path`` cannot resume this run (one line naming the field), or None: missing,
    unreadable, not a Lightning checkpoint, saved from another model, planned for fewer rounds
    than ``max_steps`` by a run whose accounting is bound to them
    (``privacy/accounting/horizon.py``), or already at ``max_steps`` rounds (resuming would train
    nothing)."""
    import torch

    if "://" in path:
        return None  # a remote file: Lightning's filesystem layer reads it
    if not Path(path).is_file():
        return f"ckpt_path: {path} does not exist or is not a file"
    from fl_lightning.utils.atomic import checkpoint_error

    try:
        # Loaded the way AtomicCheckpointIO will load it: weights_only, so nothing in it runs.
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to unpickle means the same thing
        return str(checkpoint_error(path, err))
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        return f"ckpt_path: {path} is not a Lightning checkpoint (no state_dict)"
    saved, here = ckpt["state_dict"], model.state_dict()
    for key, tensor in here.items():
        if key not in saved:
            return (
                f"ckpt_path: {path} was saved from another model ({key} is missing); check "
                "client.net and the dataset"
            )
        got = getattr(saved[key], "shape", None)
        if got is not None and tuple(got) != tuple(tensor.shape):
            return (
                f"ckpt_path: {path} was saved from another model ({key} has shape "
                f"{list(got)} there, {list(tensor.shape)} here); check client.net and the dataset"
            )
    extra = sorted(set(saved) - set(here))
    if extra:
        return (
            f"ckpt_path: {path} was saved from another model (it has {extra[0]}, this model "
            "does not); check client.net and the dataset"
        )
    done = int(ckpt.get("global_step", 0))
    if max_steps is not None:
        from fl_lightning.privacy.accounting.horizon import checkpoint_horizon, horizon_problem

        beyond = horizon_problem(checkpoint_horizon(ckpt), max_steps, path=path)
        if beyond:
            return beyond
    if max_steps is not None and 0 < max_steps <= done:
        return (
            f"trainer.max_steps: {path} has already run {done} rounds, so max_steps "
            f"{max_steps} leaves nothing to train; set trainer.max_steps above {done}"
        )
    return None
