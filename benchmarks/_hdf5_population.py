"""A synthetic population in TFF's federated HDF5 layout, for the memory benchmark.

``examples/<client_id>/pixels`` (float32, k×8×8) and ``examples/<client_id>/label`` (int32, k),
k = 1..4 examples a client, the layout ``tff.simulation.datasets`` reads (``fed_emnist*.h5``).
Writing 10⁶ clients object by object costs minutes of h5py calls, so ``templates`` seeded clients
(Gaussian class clusters, learnable) are written once and each client is an ``H5Ocopy`` of one of
them: every client is its own group and datasets in the file (the reader's index and lookups do
the real work); only the values repeat across clients. The test file holds ``test_clients``
clients drawn the same way.

    python benchmarks/_hdf5_population.py OUT.h5 CLIENTS
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

FEATURES_SHAPE = (8, 8)
NUM_CLASSES = 10


def write_population(
    path: str | Path, num_clients: int, seed: int = 0, templates: int = 64
) -> None:
    import h5py

    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, (NUM_CLASSES, *FEATURES_SHAPE)).astype(np.float32)
    tmp = Path(str(path) + ".part")
    with h5py.File(tmp, "w", libver="latest") as f:
        tm = f.create_group("templates")
        for j in range(templates):
            k = 1 + j % 4
            y = rng.integers(0, NUM_CLASSES, k)
            x = centres[y] + rng.normal(0.0, 1.0, (k, *FEATURES_SHAPE)).astype(np.float32)
            g = tm.create_group(str(j))
            g.create_dataset("pixels", data=x.astype(np.float32))
            g.create_dataset("label", data=y.astype(np.int32))
        examples = f.create_group("examples")
        picks = rng.integers(0, templates, num_clients)
        width = len(str(num_clients - 1))
        for i, j in enumerate(picks):
            h5py.h5o.copy(tm.id, str(j).encode(), examples.id, f"c{i:0{width}d}".encode())
        del f["templates"]
    tmp.replace(path)


if __name__ == "__main__":
    write_population(sys.argv[1], int(sys.argv[2]))
