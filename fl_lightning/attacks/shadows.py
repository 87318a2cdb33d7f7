"""Shadow models trained with the experiment's own pipeline, and per-round confidence series.

``ShadowBank`` trains shadow model i on a seeded random half of the attacker's shadow pool
(the other half is its non-member set), each one a full federated run of the same experiment
(``Pipeline.train_shadow``). ``SeriesRecorder`` is a Lightning Callback that records, after
every round, the global model's confidence in the true class of a fixed set of examples (the
confidence series of CS-MIA, Gu et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from fl_lightning.attacks.pipeline import (
    AuditSplit,
    Examples,
    Pipeline,
    logits_of,
    true_class_confidence,
)


class SeriesRecorder(Callback):
    """Records the global model's true-class confidence on ``examples`` after every round."""

    def __init__(self, examples: Examples) -> None:
        super().__init__()
        self.examples = examples
        self.series: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        logits = logits_of(pl_module.global_net, self.examples.x)
        self.series.append(true_class_confidence(logits, self.examples.y))

    def as_array(self) -> np.ndarray:
        """(num_examples, rounds) array; empty second axis when no round ran."""
        if not self.series:
            return np.zeros((len(self.examples), 0))
        return torch.stack(self.series, dim=1).numpy()


@dataclass
class Shadow:
    """One trained shadow model and which shadow-pool examples it trained on."""

    net: torch.nn.Module
    in_mask: np.ndarray
    series: np.ndarray


class ShadowBank:
    """Lazily trains shadow models on random subsets of the shadow pool (seeded).

    Each shadow trains on as many examples as the target did (Shokri et al. 2017, Sec. IV-B),
    at most half the pool; the rest of the pool are its non-members.
    """

    def __init__(self, pipeline: Pipeline, split: AuditSplit, *, seed: int) -> None:
        self.pipeline = pipeline
        self.split = split
        self.seed = seed
        self.shadows: list[Shadow] = []

    def get(self, k: int) -> list[Shadow]:
        pool = self.split.shadow_pool
        while len(self.shadows) < k:
            i = len(self.shadows)
            rng = np.random.default_rng([self.seed, 104729, i])
            in_mask = np.zeros(len(pool), dtype=bool)
            size = min(len(pool) // 2, self.split.target_train_size)
            in_mask[rng.permutation(len(pool))[:size]] = True
            recorder = SeriesRecorder(pool)
            module = self.pipeline.train_shadow(
                pool.subset(np.flatnonzero(in_mask)),
                pool.subset(np.flatnonzero(~in_mask)),
                seed=self.seed * 1000 + 17 + i,
                callbacks=[recorder],
                label=f"shadow run {i + 1}",
            )
            net = module.global_net.cpu().eval()
            self.shadows.append(Shadow(net=net, in_mask=in_mask, series=recorder.as_array()))
        return self.shadows[:k]

    def balanced_in_out(self, shadow: Shadow) -> tuple[np.ndarray, np.ndarray]:
        """Indices of equally many in and out pool examples of ``shadow``."""
        ins, outs = np.flatnonzero(shadow.in_mask), np.flatnonzero(~shadow.in_mask)
        n = min(len(ins), len(outs))
        return ins[:n], outs[:n]
