"""Check a federated dataset's files before a long run: builds (and caches) the client index,
reads the first client and the evaluation splits, and prints what a run would see.

    python -m fl_lightning.data.check_federated tff_emnist --root data/tff
    python -m fl_lightning.data.check_federated hf_clients --root data --options \\
        '{"path": "femnist_hf", "client_column": "writer_id", "x": "image", "y": "label"}'

Exit 0 and a summary (clients, examples, client sizes, classes, the first client's tensors,
the evaluation splits); exit 2 and one ``error:`` line naming the field on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def summary(dataset: str, root: str, options: dict, seed: int = 0) -> list[str]:
    from fl_lightning.data.datasets import DATASETS

    spec = DATASETS.get(dataset)
    if spec is None or spec.federated is None:
        lazy = sorted(n for n, s in DATASETS.items() if s.federated is not None)
        raise ValueError(f"data.dataset: {dataset!r} is not a federated source; one of {lazy}")
    if spec.check is not None:
        spec.check(root=root, download=False, **options)
    data = spec.federated(root=root, seed=seed, **options)
    store, sizes = data.clients, data.clients.sizes
    x, y = store.read(0)
    lines = [
        f"dataset {dataset}: {len(store):,} clients, {int(sizes.sum()):,} training examples, "
        f"{store.num_classes} classes",
        f"client sizes: min {int(sizes.min())}, median {float(np.median(sizes)):g}, "
        f"max {int(sizes.max())}",
        f"client 0 ({store.client_id(0)}): x {tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
        f", y {tuple(y.shape)} {str(y.dtype).removeprefix('torch.')}",
    ]
    for name, split in (("validation", data.val), ("test", data.test)):
        if split is not None:
            lines.append(f"{name}: {len(split):,} examples, x {tuple(split.x.shape[1:])}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="a federated source: tff_emnist, leaf_femnist, ...")
    parser.add_argument("--root", default="data", help="data.root")
    parser.add_argument("--options", default="{}", help="data.dataset_options as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        options = json.loads(args.options)
        if not isinstance(options, dict):
            raise ValueError("not an object")
    except ValueError as err:
        print(
            f"error: data.dataset_options: --options must be a JSON object ({err})", file=sys.stderr
        )
        return 2
    try:
        lines = summary(args.dataset, args.root, options, args.seed)
    except ValueError as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
