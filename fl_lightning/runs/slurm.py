"""SLURM pre-emption: checkpoint at a round boundary, requeue, and resume in place.

Lightning's own auto-requeue (``SLURMEnvironment(auto_requeue=True)``, the default on SLURM)
saves ``hpc_ckpt_<n>.ckpt`` into ``default_root_dir`` *inside* the SIGUSR1 handler, i.e. at
whatever bytecode the signal interrupts: in the middle of a round's local training, or, under
DDP, while the other ranks are inside the round's all-reduce (the save's barrier then meets
a different collective). A federated round is one Lightning step, so the state that resumes
exactly is the one between two rounds. :class:`SlurmRequeue` therefore takes the signal over:

1. in ``setup`` it installs its own handler for the environment's requeue signal (SIGUSR1,
   which ``#SBATCH --signal=SIGUSR1@90`` sends to every task 90 s before the time limit);
   Lightning installs its handler only where none is set, so its mid-round save never runs.
   The handler only sets a flag.
2. after every round (``on_train_batch_end``, where ``ModelCheckpoint`` saves too) the ranks
   agree whether any of them got the signal (one boolean all-reduce, only on SLURM with
   auto-requeue); if so every rank calls ``trainer.save_checkpoint`` on Lightning's
   ``hpc_ckpt_<n>.ckpt`` path (rank 0 writes it: the global model, the server optimizer, the
   strategy's and the accountant's state), rank 0 runs ``scontrol requeue $SLURM_JOB_ID``
   (``<array job>_<task>`` in a job array) and every rank stops with :class:`SlurmRequeued`,
   which the CLI prints as one ``requeued:`` line (exit 0).
3. the requeued job runs the same batch script: same ``SLURM_JOB_ID``, same
   ``default_root_dir``. Lightning restores the newest ``hpc_ckpt_<n>.ckpt`` there by itself
   (``ckpt_path`` unset on SLURM); :func:`requeue_checkpoint` tells the CLI so, which then
   lets the run continue in its own directory (a fresh run there is still refused) and checks
   that checkpoint like a ``--ckpt_path``.

Rounds are keyed by (seed, round), so the requeued job ends with the weights and ε of an
uninterrupted one (tests/cluster/test_slurm_job.py). With auto-requeue off
(``SLURMEnvironment(auto_requeue=False)``) nothing here acts.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from typing import Any

SCONTROL_TIMEOUT_S = 60


class SlurmRequeued(Exception):  # noqa: N818 - an outcome, not an error
    """The run saved its state at a round boundary and was requeued; the message is the line
    the CLI prints."""


def slurm_environment(trainer: Any) -> Any:
    """The trainer's ``SLURMEnvironment`` when the run is a SLURM job step, else None."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = getattr(trainer.strategy, "cluster_environment", None)
    if env is None:
        env = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
    return env if isinstance(env, SLURMEnvironment) else None


def requeue_checkpoint(trainer: Any, ckpt_path: Any) -> str | None:
    """The ``hpc_ckpt_<n>.ckpt`` Lightning will restore (a requeued SLURM job: no
    ``ckpt_path`` given, a SLURM job step, a checkpoint in ``default_root_dir``), else None."""
    if ckpt_path or slurm_environment(trainer) is None:
        return None
    from lightning.fabric.plugins.environments import SLURMEnvironment

    if not SLURMEnvironment.detect():
        return None
    return trainer._checkpoint_connector._hpc_resume_path


IN_PLACE = "_fl_requeue_checkpoint"  # set on the Trainer by the CLI (runs/cli_class.py)


def resumes_in_place(trainer: Any) -> bool:
    """Whether the CLI found this run to be a requeued SLURM job resuming its own
    ``hpc_ckpt_<n>.ckpt`` (:func:`requeue_checkpoint`), which may write into its directory."""
    return bool(getattr(trainer, IN_PLACE, None))


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` in a job array."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array is not None and os.environ.get("SLURM_ARRAY_TASK_ID") is not None:
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_job(job_id: str) -> str | None:
    """Runs ``scontrol requeue <job_id>``; None on success, else why it failed."""
    if not re.fullmatch(r"[0-9_]+", job_id):
        return f"SLURM_JOB_ID {job_id!r} is not a job id"
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job_id],
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol requeue {job_id}: {err}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return f"scontrol requeue {job_id} exited {done.returncode}: {why[-1] if why else ''}"
    return None


def slurm_requeue_callback() -> Any:
    """A :class:`SlurmRequeue` callback (built here so that importing this module does not
    import Lightning)."""
    from lightning.pytorch.callbacks import Callback

    class SlurmRequeue(Callback):
        """Checkpoint at the next round boundary and requeue on SLURM's requeue signal
        (module docstring). Does nothing outside SLURM or with auto-requeue off."""

        def __init__(self) -> None:
            self.requested = False
            self._signal: Any = None
            self._previous: Any = None

        def _on_signal(self, signum: int, frame: Any) -> None:
            self.requested = True  # acted on after the round (on_train_batch_end)

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            env = slurm_environment(trainer)
            if stage != "fit" or env is None or not env.auto_requeue:
                return
            if env.requeue_signal is None or self._signal is not None:
                return
            try:
                self._previous = signal.signal(env.requeue_signal, self._on_signal)
            except ValueError:  # not the main thread: leave it to Lightning
                return
            self._signal = env.requeue_signal

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if self._signal is not None:
                with contextlib.suppress(ValueError):  # not the main thread
                    signal.signal(self._signal, self._previous or signal.SIG_DFL)
                self._signal = None

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if self._signal is None:
                return
            # Every rank takes part, signalled or not: one boolean all-reduce a round.
            requested = trainer.strategy.reduce_boolean_decision(self.requested, all=False)
            done = trainer.should_stop or trainer.global_step >= int(trainer.max_steps)
            if not requested or done:  # the last round: let the run finish (and summarise)
                return
            path = trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)
            # The full state (optimizer, callbacks: strategy, accountant); rank 0 writes it.
            trainer.save_checkpoint(path, weights_only=False)
            job = slurm_job_id() or "?"
            failed = requeue_job(job) if trainer.is_global_zero else None
            failed = trainer.strategy.broadcast(failed)
            self.requested = False
            rounds = f"round {trainer.global_step} of {int(trainer.max_steps)}"
            if failed:  # keep training: the time limit may still allow more rounds
                if trainer.is_global_zero:
                    print(
                        f"warning: SLURM job {job} saved {rounds} to {path} but could not be "
                        f"requeued ({failed}); resubmit it with --ckpt_path {path}",
                        flush=True,
                    )
                return
            raise SlurmRequeued(
                f"SLURM job {job} stopped after {rounds}: its state is in {path} and "
                f"`scontrol requeue {job}` queued it again; the requeued job resumes from "
                "there (same SLURM_JOB_ID and default_root_dir)"
            )

    return SlurmRequeue()
