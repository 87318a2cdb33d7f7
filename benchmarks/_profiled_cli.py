"""``fl-lightning`` with per-rank timers, for ``benchmarks/scaling.py --profile`` only.

Wraps (from outside the package, so the hot path is untouched) the parts of a round and writes
one JSON per rank to ``$FL_PROFILE_DIR/rank<r>.json`` with per-round seconds:

* ``busy``: inside the executor's stream (local training + client-side processing);
* ``imbalance``: waiting for the slowest rank (a ``barrier`` inserted before the round's
  all-reduce / gather: instrumentation only, it turns the wait into its own number);
* ``collective``: the all-reduce of the partial buffer plus the gather of the records;
* ``accounting``: the accountant's budget check, record and report;
* ``eval``: evaluation of the global model;
* ``log``: ``log_dict``;
* ``step``: the whole ``training_step``; ``between``: from the end of one ``training_step``
  to the start of the next (Lightning's loop, callbacks, loggers).

The Lightning DDP launcher re-executes this same script for rank 1, so both ranks are timed.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch.distributed as dist

from fl_lightning.cli import main
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server import module as module_mod
from fl_lightning.server import reduction as reduction_mod
from fl_lightning.server.distributed import rank_and_world
from fl_lightning.server.executor import SequentialExecutor

TIMES: dict[str, list[float]] = defaultdict(list)
_current: dict[str, float] = defaultdict(float)
_last_end: list[float] = []


def _add(key: str, seconds: float) -> None:
    _current[key] += seconds


def _timed(key: str, fn):  # noqa: ANN001, ANN202
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(key, time.perf_counter() - t)

    return wrapper


def _timed_stream(fn):  # noqa: ANN001, ANN202
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        it = fn(*args, **kwargs)
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                _add("busy", time.perf_counter() - t)
                return
            _add("busy", time.perf_counter() - t)
            yield item

    return wrapper


def _with_barrier(fn):  # noqa: ANN001, ANN202
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if rank_and_world()[1] > 1 and not _current.get("_barrier_done"):
            t = time.perf_counter()
            dist.barrier()
            _add("imbalance", time.perf_counter() - t)
            _current["_barrier_done"] = 1.0
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add("collective", time.perf_counter() - t)

    return wrapper


def install() -> None:
    fm = module_mod.FederatedModule
    original_step = fm.training_step

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN202
        start = time.perf_counter()
        if _last_end:
            _add("between", start - _last_end[-1])
        original_step(self, batch, batch_idx)
        end = time.perf_counter()
        _add("step", end - start)
        for k in ("busy", "imbalance", "collective", "accounting", "eval", "log", "step",
                  "between"):  # fmt: skip
            TIMES[k].append(_current.get(k, 0.0))
        _current.clear()
        _last_end.append(time.perf_counter())

    fm.training_step = training_step
    fm.evaluate_global = _timed("eval", fm.evaluate_global)
    fm.log_dict = _timed("log", fm.log_dict)
    SequentialExecutor.run = _timed_stream(SequentialExecutor.run)
    for name in ("record", "report", "would_exceed"):
        setattr(PrivacyAccountant, name, _timed("accounting", getattr(PrivacyAccountant, name)))
    for name in ("all_reduce_sum_", "gather_objects", "gather_updates"):  # reduce_round's
        setattr(reduction_mod, name, _with_barrier(getattr(reduction_mod, name)))

    original_end = fm.on_train_end

    def on_train_end(self):  # noqa: ANN001, ANN202
        original_end(self)
        out = os.environ.get("FL_PROFILE_DIR")
        if out:
            rank = rank_and_world()[0]
            Path(out, f"rank{rank}.json").write_text(json.dumps(TIMES))

    fm.on_train_end = on_train_end


if __name__ == "__main__":
    install()
    if os.environ.get("FL_CPROFILE"):  # diagnosis: a cProfile dump per rank as well
        import cProfile

        prof = cProfile.Profile()
        rc = prof.runcall(main, sys.argv[1:])
        prof.dump_stats(f"{os.environ['FL_CPROFILE']}.rank{os.environ.get('LOCAL_RANK', '0')}")
        sys.exit(rc)
    sys.exit(main(sys.argv[1:]))
