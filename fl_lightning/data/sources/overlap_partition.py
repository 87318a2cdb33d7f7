"""ADP-FL's non-IID split (Wu et al. 2025, Sec. 5.1): "each client was randomly assigned two
kinds of labels, and the data of each client accounts for 10 percents of the data set".

With 50 clients × 10 % the shards must overlap across clients; the paper does not say how.
Here (partitioner ``overlap_label_k``) every client independently draws ``labels_per_client``
distinct labels (seeded) and, for each, a uniform sample *without replacement within the
client* of ``fraction·n / labels_per_client`` examples of that label (all of them when the label
has fewer). Different clients sample independently, so shards overlap. Unlike the core
partitioners this split neither is disjoint nor covers the training set.

Registered into ``fl_lightning.data.partitioners.PARTITIONERS`` on import (the ``sources``
package imports every module in it).
"""

from __future__ import annotations

import numpy as np

from fl_lightning.data.partitioners import ClientIndex, register_partitioner


@register_partitioner("overlap_label_k")
def overlap_label_k(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    labels_per_client: int = 2,
    fraction: float = 0.1,
    **_: object,
) -> ClientIndex:
    """Each client: ``labels_per_client`` random labels, ``fraction`` of the data, overlapping."""
    classes = np.unique(labels)
    if not 1 <= labels_per_client <= len(classes):
        raise ValueError(
            f"data.labels_per_client: must be in [1, {len(classes)}], got {labels_per_client}"
        )
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"data.fraction: must be in (0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    by_label = {c: np.flatnonzero(labels == c) for c in classes}
    quota = max(labels_per_client, int(round(fraction * len(labels))))
    parts = []
    for _client in range(num_clients):
        chosen = rng.choice(classes, size=labels_per_client, replace=False)
        per = [
            quota // labels_per_client + (k < quota % labels_per_client)
            for k in range(labels_per_client)
        ]
        take = [
            rng.choice(by_label[c], size=min(n, len(by_label[c])), replace=False)
            for c, n in zip(chosen, per)
        ]
        parts.append(np.concatenate(take))
    return ClientIndex.from_parts(parts, sort=True)
