"""``--import`` helper of tests/reliability/test_interrupt.py: in round ``$FL_PAUSE_ROUND``
(0-based), after the clients have trained and before the server applies the aggregate, it
writes ``$FL_PAUSE_MARKER`` and sleeps ``$FL_PAUSE_SECONDS`` (default 3), so a signal the test
sends on seeing the marker arrives in the middle of that round."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fl_lightning.server.round import FederatedRound

_server_step = FederatedRound.server_step


def _paused(self, optimizer, delta, ctx):  # noqa: ANN001, ANN202 - the wrapped method's own
    if int(ctx.round_idx) == int(os.environ.get("FL_PAUSE_ROUND", "-1")):
        Path(os.environ["FL_PAUSE_MARKER"]).write_text(str(ctx.round_idx))
        time.sleep(float(os.environ.get("FL_PAUSE_SECONDS", "3")))
    return _server_step(self, optimizer, delta, ctx)


FederatedRound.server_step = _paused  # type: ignore[method-assign]
