"""Training and test throughput in samples per second (GCFL paper, Table V).

A Lightning ``Callback`` (add it under ``trainer.callbacks``). Train: the examples the round's
cohort processes (Σ_i K_i · min(B, n_i), the expected DP-SGD batch B under Poisson sampling)
divided by the round's wall time, which includes local training, client processing and server
aggregation (and the round's evaluation when one falls on it; set ``model.eval_every`` high for
clean numbers). Test: the test set size over the wall time of one evaluation of the final model.
Logged as ``throughput/train_samples_per_s`` each round and ``throughput/test_samples_per_s``
plus ``throughput/train_samples_per_s_mean`` at the end (also written to ``throughput.json``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from fl_lightning.server.run_files import run_files_dir


class Throughput(Callback):
    """Samples per second of training rounds and of test evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None
        self._round = 0
        self.train_rates: list[float] = []
        self.test_rate: float | None = None

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._round = int(trainer.global_step)
        self._start = time.perf_counter()

    def _round_samples(self, pl_module: Any, round_idx: int) -> int:
        data = pl_module.data
        n = data.num_clients
        cohort = pl_module.sampler.sample(pl_module.seed, round_idx, n)
        cfg = pl_module.client.training_config
        sizes = data.client_sizes()
        return int(
            sum(cfg.steps_for(int(sizes[c])) * min(cfg.batch_size, int(sizes[c])) for c in cohort)
        )

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._start is None or pl_module.rounds_completed <= self._round:
            return  # the round did not run (stopped by the privacy budget)
        seconds = time.perf_counter() - self._start
        rate = self._round_samples(pl_module, self._round) / max(seconds, 1e-9)
        self.train_rates.append(rate)
        for logger in trainer.loggers:
            logger.log_metrics({"throughput/train_samples_per_s": rate}, step=self._round)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        test = pl_module.data.test
        if test is None:
            return
        start = time.perf_counter()
        pl_module.evaluate_global()
        self.test_rate = len(test) / max(time.perf_counter() - start, 1e-9)
        summary = {"throughput/test_samples_per_s": self.test_rate}
        if self.train_rates:
            summary["throughput/train_samples_per_s_mean"] = sum(self.train_rates) / len(
                self.train_rates
            )
        for logger in trainer.loggers:
            logger.log_metrics(summary, step=int(trainer.global_step))
        out = run_files_dir(trainer.log_dir)  # not the working directory Lightning fell back to
        if trainer.is_global_zero and out:
            from fl_lightning.utils.atomic import atomic_write

            text = json.dumps(summary, indent=2) + "\n"
            atomic_write(Path(out) / "throughput.json", text)
