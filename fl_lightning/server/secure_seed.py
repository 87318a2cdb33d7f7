"""The run's noise seed under ``privacy.secure_mode``: a secret, not the configured seed.

A simulation keys every noise, cohort and batch generator by the configured seed, so anyone who
reads the config can replay the noise (the statement's seed caveat, docs/privacy.md). In secure
mode rank 0 draws the first key from the operating system's entropy
(:func:`~fl_lightning.utils.rng.draw_secret_seed`) and broadcasts it, before any callback keys
a generator by it; it is kept only in the checkpoint (a secret itself), so a resumed run
continues from the same secret and nothing else ever records it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fl_lightning.utils.rng import draw_secret_seed

CHECKPOINT_KEY = "secure_seed"
"""Where the secret is kept in a Lightning checkpoint."""


class SecureSeed:
    """The secret of one run (None until drawn or loaded)."""

    def __init__(self) -> None:
        self.secret: int | None = None

    def noise_seed(self, configured: int, *, secure: bool) -> int:
        """The first key of every noise, cohort and batch generator: ``configured``, or in
        secure mode the secret."""
        if not secure:
            return configured
        assert self.secret is not None, "secure mode: no secret before on_fit_start"
        return self.secret

    def draw(self, broadcast: Callable[[int], Any], *, secure: bool) -> None:
        """Secure mode, a fresh run: rank 0's draw for every rank (``broadcast`` is the
        Trainer strategy's). A resumed run keeps the secret its checkpoint holds
        (:meth:`load`, which Lightning calls after ``setup``, overwrites the draw)."""
        if secure and self.secret is None:
            self.secret = int(broadcast(draw_secret_seed()))

    def save(self, checkpoint: dict[str, Any]) -> None:
        if self.secret is not None:  # the checkpoint of a secure run is a secret
            checkpoint[CHECKPOINT_KEY] = self.secret

    def load(self, checkpoint: dict[str, Any]) -> None:
        if CHECKPOINT_KEY in checkpoint:
            self.secret = int(checkpoint[CHECKPOINT_KEY])
