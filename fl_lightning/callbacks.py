"""Public Lightning callbacks of a federated run.

* :class:`ClientCallback`: a Lightning ``Callback`` with two more hooks around each client's
  local training, ``on_client_start(trainer, pl_module, client_id, ctx)`` and
  ``on_client_end(trainer, pl_module, client_id, ctx, update)``. Put one in
  ``trainer.callbacks`` (YAML or ``--trainer.callbacks+=...``); the round loop calls the hooks of
  every callback that defines them, on the process that trains the client. ``update`` is the
  client's ``ClientUpdate`` after the strategy's client-side processing (clipping, local
  mechanisms): ``update.delta``, ``update.num_examples``, ``update.loss``, ``update.metrics``.
  With ``model.executor: vectorized`` a bucket of clients trains together: every client of the
  bucket gets ``on_client_start`` before it and ``on_client_end`` after it.
* :class:`ClientTimer`: wall time of each client's local training; logs
  ``clients/seconds_mean`` / ``clients/seconds_max`` every round and writes
  ``client_times.csv`` (round, client, seconds, examples) into the run directory.
* :class:`RunPlots`: at the end of ``fit``, ``accuracy_vs_round.png`` and
  ``epsilon_vs_round.png`` (matplotlib, Agg) in the run directory; added by ``fl-lightning fit``
  by default.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

if TYPE_CHECKING:
    from fl_lightning.records import ClientUpdate, RoundContext


def run_dir(trainer: Any) -> Path:
    """Where a run's own files go: the logger's version directory, else the root dir."""
    return Path(trainer.log_dir or trainer.default_root_dir)


class ClientCallback(Callback):
    """A Lightning callback with hooks around every client's local training."""

    def on_client_start(
        self, trainer: Any, pl_module: Any, client_id: int, ctx: RoundContext
    ) -> None:
        """Called before client ``client_id`` trains in round ``ctx.round_idx``."""

    def on_client_end(
        self,
        trainer: Any,
        pl_module: Any,
        client_id: int,
        ctx: RoundContext,
        update: ClientUpdate,
    ) -> None:
        """Called after the client trained and its update was processed."""


class ClientHooks:
    """Calls ``on_client_start`` / ``on_client_end`` of the trainer's callbacks that have
    them (used by the executors; no-op when none does)."""

    def __init__(self, trainer: Any, pl_module: Any) -> None:
        self.trainer = trainer
        self.pl_module = pl_module

    def _targets(self, hook: str) -> list[Any]:
        return [cb for cb in self.trainer.callbacks if callable(getattr(cb, hook, None))]

    def start(self, client_id: int, ctx: RoundContext) -> None:
        for cb in self._targets("on_client_start"):
            cb.on_client_start(self.trainer, self.pl_module, client_id, ctx)

    def end(self, client_id: int, ctx: RoundContext, update: ClientUpdate) -> None:
        for cb in self._targets("on_client_end"):
            cb.on_client_end(self.trainer, self.pl_module, client_id, ctx, update)


class ClientTimer(ClientCallback):
    """Times each client's local training (``time.perf_counter``).

    Args:
        write_csv: write ``client_times.csv`` into the run directory at the end of ``fit``.
    """

    def __init__(self, write_csv: bool = True) -> None:
        super().__init__()
        self.write_csv = write_csv
        self.rows: list[tuple[int, int, float, int]] = []
        self._started: dict[int, float] = {}
        self._round: list[float] = []

    def on_client_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, client_id: int, ctx: RoundContext
    ) -> None:
        self._started[client_id] = time.perf_counter()

    def on_client_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        client_id: int,
        ctx: RoundContext,
        update: ClientUpdate,
    ) -> None:
        seconds = time.perf_counter() - self._started.pop(client_id, math.nan)
        self.rows.append((int(ctx.round_idx), int(client_id), seconds, int(update.num_examples)))
        self._round.append(seconds)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        if self._round:
            pl_module.log_dict(
                {
                    "clients/seconds_mean": sum(self._round) / len(self._round),
                    "clients/seconds_max": max(self._round),
                },
                on_step=True,
                on_epoch=False,
                batch_size=1,
            )
        self._round = []

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        out = run_dir(trainer)  # ``trainer.log_dir`` is a collective under DDP: every rank asks
        if not self.write_csv or not trainer.is_global_zero:
            return
        path = out / "client_times.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "client", "seconds", "examples"])
            w.writerows(self.rows)


class RunPlots(Callback):
    """Test accuracy and ε against the round, as PNGs in the run directory at the end of fit.

    Reads ``pl_module.round_metrics`` after every round (so it needs no logger); the accuracy
    series has a point at every evaluated round (``model.eval_every`` and the last round).
    """

    def __init__(self) -> None:
        super().__init__()
        self.history: list[dict[str, float]] = []
        self.written: list[Path] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        metrics = getattr(pl_module, "round_metrics", None)
        if metrics:
            self.history.append(dict(metrics))

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(rounds counted from 1, values) of ``key`` over the rounds that logged it."""
        xs: list[int] = []
        ys: list[float] = []
        for row in self.history:
            value = row.get(key)
            if value is None or not math.isfinite(float(value)):
                continue
            xs.append(int(row.get("round/index", len(xs))) + 1)
            ys.append(float(value))
        return xs, ys

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        out = run_dir(trainer)  # ``trainer.log_dir`` is a collective under DDP: every rank asks
        if not trainer.is_global_zero or not self.history:
            return
        # A bare Figure on the Agg canvas: no pyplot, so a user's backend (a notebook's inline
        # one) and pyplot's figure list are left as they were.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        out.mkdir(parents=True, exist_ok=True)
        figures = {
            "accuracy_vs_round.png": ("test/accuracy", "test accuracy"),
            "epsilon_vs_round.png": ("privacy/epsilon", "ε spent (accountant)"),
        }
        delta = next(
            (r["privacy/delta"] for r in reversed(self.history) if "privacy/delta" in r), None
        )
        for name, (key, label) in figures.items():
            xs, ys = self.series(key)
            if not xs:
                continue
            fig = Figure(figsize=(6, 4), dpi=120)
            FigureCanvasAgg(fig)
            ax = fig.subplots()
            ax.plot(xs, ys, marker="o", ms=3)
            ax.set_xlabel("round")
            ax.set_ylabel(label if key != "privacy/epsilon" or delta is None else
                          f"{label}, δ = {delta:g}")  # fmt: skip
            ax.grid(alpha=0.3)
            # ×10^k offset from 10⁴ on: tick labels stay short enough for the fixed margin
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
            rounds = max(int(r.get("round/index", 0)) + 1 for r in self.history)
            ax.set_xlim(0.5, rounds + 0.5)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if key == "test/accuracy":
                ax.set_ylim(0.0, 1.0)
            else:
                ax.set_ylim(bottom=0.0)
            ax.set_title(f"{label} vs round ({rounds} rounds)")
            # Fixed margins that fit these labels: tight_layout would draw the figure once
            # more to measure them (a third of the plot's time).
            fig.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.92)
            fig.savefig(out / name)
            self.written.append(out / name)
