"""A run's collectives: their timeout, how a lost or hung peer is recognised and reported as
one line (rank, round, where to resume), and stopping the ranks this process launched."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

DEFAULT_DISTRIBUTED_TIMEOUT_S = 1800.0
CURRENT_TRAINER: list[Any] = []  # the Trainer of the running command (for failure messages)


def set_timeout(strategy: Any, timeout_s: Any) -> None:
    """Collectives of a DDP strategy time out after ``distributed_timeout`` seconds (set before
    the process group starts; a strategy object given with its own timeout keeps it)."""
    if timeout_s is None or not float(timeout_s) > 0:
        raise ValueError(f"distributed_timeout: must be > 0 seconds, got {timeout_s}")
    from lightning.pytorch.strategies import DDPStrategy
    from lightning.pytorch.strategies.ddp import default_pg_timeout

    if isinstance(strategy, DDPStrategy) and strategy._timeout in (None, default_pg_timeout):
        from datetime import timedelta

        strategy._timeout = timedelta(seconds=float(timeout_s))


_DISTRIBUTED_SIGNS = (
    "gloo", "nccl", "connection closed by peer", "connection reset by peer", "timed out",
    "broken pipe", "socket timeout",
)  # fmt: skip


def is_distributed_failure(err: BaseException) -> bool:
    """A collective failed: a peer process died, hung past the timeout, or its link broke."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(sign in text for sign in _DISTRIBUTED_SIGNS)


def lost_peers(rank: Any, world: Any) -> str:
    """Who this rank lost: the other rank of a 2-process job (a collective that fails there
    can only fail for want of that peer, killed or hung); with more processes the error does
    not say which one (gloo names the peer's address, NCCL nothing reliable), so "its peers"."""
    if world == 2 and rank in (0, 1):
        return f"rank {1 - int(rank)}"
    return "its peers"


def distributed_failure_line(err: BaseException) -> str:
    """One line: which rank, which peer it lost (:func:`lost_peers`), which round, why, what
    was stopped and where to resume from."""
    text = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". This is")[0].rstrip(".")
    rank = world = step = "?"
    resume = "no checkpoint was written yet"
    if CURRENT_TRAINER:
        trainer = CURRENT_TRAINER[0]
        rank, world, step = trainer.global_rank, trainer.world_size, trainer.global_step
        cb = trainer.checkpoint_callback
        last = getattr(cb, "last_model_path", "") or ""
        if not last and getattr(cb, "dirpath", None):
            last = os.path.join(cb.dirpath, "last.ckpt")
        if last and os.path.exists(last):
            resume = (
                f"resume from the last complete checkpoint with --ckpt_path {last} "
                "(any number of processes gives the same result)"
            )
    return (
        f"error: distributed: rank {rank} of {world} lost {lost_peers(rank, world)} in round "
        f"{step} ({text}); "
        f"the job is stopped, {resume}"
    )


def stop_launched_ranks() -> None:
    """Kills the rank processes this one launched (Lightning's launcher), so no rank is left
    blocked in a collective or stopped; under torchrun/SLURM the launcher does this."""
    import signal

    if not CURRENT_TRAINER:
        return
    launcher = getattr(CURRENT_TRAINER[0].strategy, "launcher", None)
    for proc in list(getattr(launcher, "procs", []) or []):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)
