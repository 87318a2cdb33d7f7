"""Small files in the real on-disk formats of the field's federated datasets (issue 61).

The tests, the how-to page and the config checks write these instead of the real downloads,
with the layout, keys, dtypes and nesting of the real files (``data/federated/``):

- TFF HDF5 (``tff.simulation.datasets``, TFF ≤ 0.19): ``examples/<client_id>/<feature>``;
  EMNIST ``pixels`` float32 k×28×28 and ``label`` int32 k; Shakespeare ``snippets``,
  StackOverflow ``tokens``/``title``/``tags``/``type``/``creation_date`` variable-length UTF-8
  strings and ``score`` int64; StackOverflow's ``stackoverflow.word_count`` (``word count``
  lines, most frequent first).
- LEAF JSON: ``{train,test}/*.json`` with ``users``, ``num_samples``, ``user_data`` {user:
  {``x``, ``y``}}; FEMNIST ``x`` 784 floats, ``y`` int; Sent140 ``x`` [id, date, query, user,
  text], ``y`` 0/1, and LEAF's ``embs.json`` (``vocab``, ``emba``).
- FLAIR HDF5 (pfl-research's ``prepare_dataset``): ``/<partition>/<user_id>/images`` uint8
  k×H×W×3, ``image_ids``, ``labels_row``/``labels_col`` (and ``fine_grained_labels_*``) sparse
  multi-hot, ``/metadata/label_mapping`` JSON.
- A Hugging Face ``datasets`` folder (``save_to_disk``) with a client-id column.

    python -m fl_lightning.testing.federated_files tff_emnist DIR
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

WORDS = ["the", "to", "a", "i", "is", "in", "and", "of", "it", "you", "for", "this", "that"]


def _strings(values: list[str]) -> np.ndarray:
    return np.array([v.encode() for v in values], dtype=object)


def _h5(path: Path, clients: dict[str, dict[str, np.ndarray]]) -> None:
    import h5py

    text = h5py.string_dtype(encoding="utf-8")
    with h5py.File(path, "w") as f:
        examples = f.create_group("examples")
        for cid, features in clients.items():
            g = examples.create_group(cid)
            for key, value in features.items():
                g.create_dataset(key, data=value, dtype=text if value.dtype == object else None)


def write_tff_emnist(
    root: str | Path, clients: int = 6, only_digits: bool = False, seed: int = 0
) -> Path:
    """``fed_emnist[_digitsonly]_{train,test}.h5``: writers ``f0000_00``..., 2-6 train and 1-2
    test examples each (every writer in both files, as TFF splits each writer)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    classes = 10 if only_digits else 62
    stem = "fed_emnist_digitsonly" if only_digits else "fed_emnist"
    for split, (lo, hi) in (("train", (2, 7)), ("test", (1, 3))):
        data = {}
        for c in range(clients):
            k = int(rng.integers(lo, hi))
            data[f"f{c:04d}_{c % 100:02d}"] = {
                "label": rng.integers(0, classes, k).astype(np.int32),
                "pixels": rng.random((k, 28, 28), dtype=np.float32),
            }
        _h5(root / f"{stem}_{split}.h5", data)
    return root


SNIPPETS = [
    "To be, or not to be: that is the question.",
    "What light through yonder window breaks?\nIt is the east.",
    "A horse! a horse! my kingdom for a horse!",
]


def write_tff_shakespeare(root: str | Path, clients: int = 4) -> Path:
    """``shakespeare_{train,test}.h5``: roles ``THE_TRAGEDY_OF_HAMLET_<N>`` with 1-3
    ``snippets`` each."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        data = {}
        for c in range(clients):
            lines = SNIPPETS[: 1 + c % 3] if split == "train" else SNIPPETS[c % 3 : c % 3 + 1]
            data[f"THE_TRAGEDY_OF_HAMLET_ROLE{c}"] = {"snippets": _strings(lines)}
        _h5(root / f"shakespeare_{split}.h5", data)
    return root


def write_tff_stackoverflow(root: str | Path, clients: int = 5, vocab_words: int = 10_000) -> Path:
    """``stackoverflow_{train,held_out,test}.h5`` (users ``00000001``..., 1-3 sentences each,
    the six features) and ``stackoverflow.word_count`` with ``vocab_words`` words (the
    common English words first, then ``word<N>``) and descending counts."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = WORDS + [f"word{i}" for i in range(vocab_words - len(WORDS))]
    with open(root / "stackoverflow.word_count", "w") as fh:
        fh.writelines(f"{w}\t{10 * vocab_words - i}\n" for i, w in enumerate(words))
    for s, split in enumerate(("train", "held_out", "test")):
        data = {}
        for c in range(clients):
            k = 1 + (c + s) % 3
            sentences = [
                " ".join(rng.choice(WORDS + ["zzyzx"], int(rng.integers(3, 26)))) for _ in range(k)
            ]
            data[f"{c + 1 + 1000 * s:08d}"] = {
                "tokens": _strings(sentences),
                "title": _strings(["how do i do this"] * k),
                "tags": _strings(["python|numpy"] * k),
                "type": _strings(["question"] * k),
                "creation_date": _strings(["2010-01-08 09:34:05.2 UTC"] * k),
                "score": np.arange(k, dtype=np.int64),
            }
        _h5(root / f"stackoverflow_{split}.h5", data)
    return root


def _leaf_split(folder: Path, users: dict[str, tuple[list, list]], per_file: int = 2) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = list(users)
    for start in range(0, len(names), per_file):
        chunk = names[start : start + per_file]
        blob = {
            "users": chunk,
            "num_samples": [len(users[u][1]) for u in chunk],
            "user_data": {u: {"x": users[u][0], "y": users[u][1]} for u in chunk},
        }
        (folder / f"all_data_{start // per_file}_niid_0_keep_0_{folder.name}_9.json").write_text(
            json.dumps(blob)
        )


def write_leaf_femnist(root: str | Path, users: int = 5, seed: int = 0) -> Path:
    """``femnist/data/{train,test}/*.json``: writers ``f0000_14``..., x 784 floats, y 0-61,
    two users a file."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, (lo, hi) in (("train", (2, 6)), ("test", (1, 3))):
        data = {}
        for u in range(users):
            k = int(rng.integers(lo, hi))
            x = np.round(rng.random((k, 784)), 3).tolist()
            data[f"f{u:04d}_14"] = (x, rng.integers(0, 62, k).tolist())
        _leaf_split(root / "femnist" / "data" / split, data)
    return root


TWEETS = ["i love this", "so sad today :(", "what a great game!", "worst. day. ever", "ok"]


def write_leaf_sent140(root: str | Path, users: int = 4) -> Path:
    """``sent140/data/{train,test}/*.json`` (x ``[id, date, query, user, text]``, y 0/1) and
    ``sent140/embs.json`` (``vocab``, ``emba``)."""
    root = Path(root)
    vocab = ["i", "love", "this", "so", "sad", "today", "what", "a", "great", "game", "!", "."]
    folder = root / "sent140"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "embs.json").write_text(
        json.dumps({"vocab": vocab, "emba": [[0.1 * i] * 3 for i in range(len(vocab))]})
    )
    for s, split in enumerate(("train", "test")):
        data = {}
        for u in range(users):
            texts = TWEETS[(u + s) % 5 :][: 1 + u % 3] or TWEETS[:1]
            rows = [
                [str(1467810369 + i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{u}", t]
                for i, t in enumerate(texts)
            ]
            data[f"user{u}"] = (rows, [i % 2 for i in range(len(texts))])
        _leaf_split(folder / "data" / split, data)
    return root


def write_hf_femnist(root: str | Path, writers: int = 5, seed: int = 0) -> Path:
    """``femnist_hf/`` saved with ``save_to_disk``: a ``DatasetDict`` (``train``, ``test``) with
    the columns of the hub's ``flwrlabs/femnist``: ``image`` (Image, 28×28 grey), ``writer_id``
    (string), ``hsf_id`` (int), ``character`` (ClassLabel, 62 names)."""
    import datasets
    from PIL import Image

    datasets.disable_progress_bars()
    rng = np.random.default_rng(seed)
    names = (
        [str(d) for d in range(10)]
        + [chr(c) for c in range(65, 91)]
        + [chr(c) for c in range(97, 123)]
    )
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "writer_id": datasets.Value("string"),
            "hsf_id": datasets.Value("int64"),
            "character": datasets.ClassLabel(names=names),
        }
    )
    splits = {}
    for split, per in (("train", (2, 5)), ("test", (1, 2))):
        rows: dict[str, list] = {"image": [], "writer_id": [], "hsf_id": [], "character": []}
        for w in range(writers):
            for _ in range(int(rng.integers(per[0], per[1] + 1))):
                rows["image"].append(Image.fromarray(rng.integers(0, 256, (28, 28), np.uint8)))
                rows["writer_id"].append(f"f{w:04d}_{w:02d}")
                rows["hsf_id"].append(w % 4)
                rows["character"].append(int(rng.integers(0, 62)))
        order = rng.permutation(len(rows["character"]))  # writers interleaved, as on the hub
        splits[split] = datasets.Dataset.from_dict(
            {k: [v[i] for i in order] for k, v in rows.items()}, features=features
        )
    out = Path(root) / "femnist_hf"
    datasets.DatasetDict(splits).save_to_disk(str(out))
    return Path(root)


FLAIR_LABELS = [
    "animal",
    "art",
    "equipment",
    "fabric",
    "food",
    "liquid",
    "material",
    "outdoor",
    "plant",
    "recreation",
    "religion",
    "structure",
    "textual work",
    "toy",
    "transportation",
    "people",
    "structure element",
]


def write_flair(root: str | Path, users: int = 3, side: int = 8, seed: int = 0) -> Path:
    """``flair_federated.hdf5``: partitions ``train``/``val``/``test`` of disjoint users
    (``<user_id>/images`` uint8 k×side×side×3, ``image_ids``, ``labels_row``/``labels_col``,
    ``fine_grained_labels_row``/``_col``) and ``/metadata/label_mapping`` (17 labels) and
    ``fine_grained_label_mapping`` (JSON)."""
    import h5py

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with h5py.File(root / "flair_federated.hdf5", "w") as f:
        f["metadata/label_mapping"] = json.dumps({n: i for i, n in enumerate(FLAIR_LABELS)})
        f["metadata/fine_grained_label_mapping"] = json.dumps({f"fine{i}": i for i in range(40)})
        for p, partition in enumerate(("train", "val", "test")):
            for u in range(users):
                k = 1 + (u + p) % 3
                g = f.create_group(f"{partition}/{10_000_000 + 100 * p + u}@N0{u}")
                g["images"] = rng.integers(0, 256, (k, side, side, 3), dtype=np.uint8)
                g["image_ids"] = np.array([f"{4000 + 10 * u + i}".encode() for i in range(k)])
                for prefix, classes in (("labels", 17), ("fine_grained_labels", 40)):
                    rows = np.repeat(np.arange(k), 2)
                    g[f"{prefix}_row"] = rows
                    g[f"{prefix}_col"] = rng.integers(0, classes, len(rows))
    return root


WRITERS: dict[str, Callable[..., Path]] = {
    "tff_emnist": write_tff_emnist,
    "tff_shakespeare": write_tff_shakespeare,
    "tff_stackoverflow": write_tff_stackoverflow,
    "leaf_femnist": write_leaf_femnist,
    "leaf_sent140": write_leaf_sent140,
    "hf_femnist": write_hf_femnist,
    "flair": write_flair,
}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in WRITERS:
        print(f"usage: python -m fl_lightning.testing.federated_files {{{','.join(WRITERS)}}} DIR")
        raise SystemExit(2)
    print(WRITERS[sys.argv[1]](sys.argv[2]))
