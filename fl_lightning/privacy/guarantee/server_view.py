"""What the server-side code receives from the clients: the view a guarantee prices against
the server (issue 55, "the server's view, as code").

Every strategy declares its view in one place, ``Strategy.server_view`` (derived from its
``local_dp`` / ``central_dp`` components, overridden by a strategy that privatises on its
own); the statement reads it to say what the server sees, and the contract test
(``fl_lightning/testing/server_view.py``) records what reaches the server side of every round
— the uploads that enter ``server/reduction.py: RoundUpdates``, whose records feed logging and
accounting — and fails where it is more than the declared view.

The kinds of upload, from the most the server learns to the least:

* ``updates``: each client's update as trained (no client-level protection against the
  server; a DP-SGD client's update is record-level private on its own);
* ``clipped updates``: each client's update clipped to C, the noise added by the server
  after the sum (central DP, McMahan et al. 2018: no finite ε against a curious server);
* ``noised uploads``: each upload privatised on the client before it leaves (local DP);
* ``secure sums``: masked uploads and the survivors' unmasking reveals only, from which the
  server learns the modular sum of the survivors' noised, encoded updates (SecAgg, Bonawitz et
  al. 2017; Bell et al. 2020) and nothing per client: no loss, example count or metric of a
  client, and nothing of a client that dropped. One exception is kept for the accountant:
  a survivor's upload still carries the DP-SGD steps it ran (``ClientUpdate.dp_steps``, for
  record-level ε), whose sample rate is batch size / n_i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

UploadKind = Literal["updates", "clipped updates", "noised uploads", "secure sums"]

UPLOADS: dict[str, str] = {
    "updates": "each client's update as trained",
    "clipped updates": "each client's update clipped to the clip norm, before any noise",
    "noised uploads": "each client's upload privatised on the client",
    "secure sums": (
        "masked uploads and the survivors' unmasking reveals only: the modular sum of the "
        "surviving clients' noised updates, nothing of one client"
    ),
}
"""What each kind of upload gives the server, in words (the statement's)."""


@dataclass(frozen=True)
class ServerView:
    """What the server-side objects receive from the clients in a round.

    Args:
        uploads: the kind of upload (module docstring).
        per_client_values: each client's training loss, example count and metrics reach the
            server in the clear (logged as ``train/loss`` and ``clients/*``); False only under
            secure aggregation, whose uploads carry none.
        clip_norm: the L2 bound of every upload under ``clipped updates`` (None otherwise).
        bits: the modulus 2^b of every masked upload under ``secure sums`` (None otherwise).
    """

    uploads: UploadKind
    per_client_values: bool = True
    clip_norm: float | None = None
    bits: int | None = None

    def __post_init__(self) -> None:
        if self.uploads not in UPLOADS:
            raise ValueError(f"server_view.uploads: one of {sorted(UPLOADS)}, got {self.uploads!r}")
        if self.uploads == "secure sums" and self.per_client_values:
            raise ValueError("server_view: secure sums carry no per-client value")

    def sentence(self) -> str:
        """What the server sees, in one sentence (for the statement's observers)."""
        values = (
            "; each client's training loss, example count and metrics in the clear"
            if self.per_client_values
            else ""
        )
        return f"{UPLOADS[self.uploads]}{values}"


__all__ = ["UPLOADS", "ServerView", "UploadKind"]
