"""First contact of the run's network with its data, before round 0 and before any file is
written: one forward pass of the client network on one example of each split (training,
validation, test), so that a switched dataset or network is one line naming both fields and
both shapes, and what would fit, instead of a shape error inside round 0.

The pass runs on a copy of the network (its weights shared, :func:`probe_copy`), in eval mode,
under ``torch.no_grad``, with the torch (CPU), NumPy and Python random states saved and restored
around it: it consumes no draw the run makes (the golden runs stay identical). Only when it
fails are candidate input shapes probed and the shipped client configs (``configs/client/``)
tried, to say what the network expects and which shipped network would fit.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

# Image sides tried, in this order, when looking for the input a network expects (the data's own
# side first); then every side up to 64.
_COMMON_SIDES = (28, 32, 8, 64, 24, 16, 96, 128, 224)
_COMMON_SHAPES = ((1, 28, 28), (3, 32, 32), (1, 8, 8), (1, 64, 64), (784,), (64,), (3072,))


@contextlib.contextmanager
def untouched_rng() -> Iterator[None]:
    """Restores the torch CPU, NumPy and Python random states on exit (NumPy's legacy global
    state is the one ``seed_everything`` seeds and user code may draw from)."""
    py, npy = random.getstate(), np.random.get_state()  # noqa: NPY002
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)  # noqa: NPY002


def shape_text(shape: tuple[int, ...]) -> str:
    """``1×28×28``."""
    return "×".join(str(int(d)) for d in shape)


def _spatial(shape: tuple[int, ...], other: tuple[int, ...]) -> str:
    """The shape as a user names inputs: ``8×8`` for an image whose channels ``other`` shares,
    else the whole shape."""
    if len(shape) == 3 and len(other) == 3 and shape[0] == other[0]:
        return shape_text(shape[1:])
    return shape_text(shape)


def probe_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` to run once: its modules copied (mode, hooks, attributes), its
    parameters and buffers shared (a forward pass in eval mode under ``no_grad`` writes
    neither; copying ResNet-50's weights took longer than its forward pass). A network with
    lazy modules is copied whole: its first forward pass materialises their parameters."""
    from torch.nn.modules.lazy import LazyModuleMixin

    if any(isinstance(m, LazyModuleMixin) for m in net.modules()):
        return copy.deepcopy(net)
    memo: dict[int, Any] = {id(t): t for t in [*net.parameters(), *net.buffers()]}
    return copy.deepcopy(net, memo)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _forward(net: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor | None, BaseException | None]:
    try:
        out = net(x)
    except Exception as err:  # noqa: BLE001 - any failure on the data's own example is a mismatch
        return None, err
    return (out if isinstance(out, torch.Tensor) else None), None


def _first_layer(net: nn.Module) -> nn.Module | None:
    """The first module with parameters of its own (in registration order)."""
    return next((m for m in net.modules() if any(True for _ in m.parameters(recurse=False))), None)


def _failing_layer(net: nn.Module, x: torch.Tensor) -> tuple[str, nn.Module, tuple] | None:
    """(name, module, input shape) of the last leaf module entered when ``net(x)`` failed."""
    entered: list[tuple[str, nn.Module, tuple]] = []
    handles = []
    for name, module in net.named_modules():
        if next(module.children(), None) is None:

            def hook(mod: nn.Module, args: tuple, _name: str = name) -> None:
                shape = tuple(args[0].shape) if args and hasattr(args[0], "shape") else ()
                entered.append((_name, mod, shape))

            handles.append(module.register_forward_pre_hook(hook))
    try:
        _forward(net, x)
    finally:
        for h in handles:
            h.remove()
    return entered[-1] if entered else None


def _candidates(net: nn.Module, got: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Input shapes (one example) to try, most likely first, from the network's first layer."""
    first = _first_layer(net)
    own_side = [got[-1]] if len(got) == 3 else []
    shapes: list[tuple[int, ...]] = []
    if isinstance(first, nn.Embedding):
        return []  # token ids of any length: a shape would not say what is wrong
    if isinstance(first, nn.Conv2d):
        c = int(first.in_channels)
        shapes += [(c, s, s) for s in [*own_side, *_COMMON_SIDES, *range(1, 65)]]
    elif isinstance(first, nn.Linear):
        f = int(first.in_features)
        for c in dict.fromkeys([got[0] if len(got) == 3 else 1, 1, 3]):
            side = math.isqrt(f // c) if f % c == 0 else 0
            if side and c * side * side == f:
                shapes.append((c, side, side))
        shapes.append((f,))
    elif isinstance(size := getattr(first, "input_size", None), int):  # an RNN, a DPLSTM
        shapes += [(1, size, size), (size, size), (3, size, size)]
    return list(dict.fromkeys([*shapes, *_COMMON_SHAPES]))


def expected_input(net: nn.Module, x: torch.Tensor) -> tuple[int, ...] | None:
    """The first candidate shape of one example that ``net`` takes, or None."""
    got = tuple(x.shape[1:])
    for shape in _candidates(net, got):
        if shape == got:
            continue
        out, err = _forward(net, torch.zeros((1, *shape), dtype=x.dtype))
        if err is None and out is not None:
            return shape
    return None


def _load_net(class_path: str, init_args: dict[str, Any]) -> nn.Module | None:
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        net = cls(**init_args)
    except Exception:  # noqa: BLE001 - a client config that does not build here is no hint
        return None
    return net if isinstance(net, nn.Module) else None


def fitting_client_config(x: torch.Tensor, num_classes: int, like: nn.Module) -> str | None:
    """The shipped client config (``configs/client/**.yaml``) whose network takes ``x`` and
    gives ``num_classes`` outputs, as a path from the checkout: of the networks of ``like``'s
    kind (its class, a subclass or a base) first, the one with the fewest parameters."""
    import yaml

    from fl_lightning.configs import CONFIGS

    best: tuple[int, int, str] | None = None
    for path in sorted((CONFIGS / "client").rglob("*.yaml")):
        try:
            cfg = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        spec = cfg.get("net") if isinstance(cfg, dict) else None
        if not isinstance(spec, dict) or "class_path" not in spec:
            continue
        if cfg.get("num_classes", num_classes) != num_classes:
            continue
        net = _load_net(str(spec["class_path"]), dict(spec.get("init_args") or {}))
        if net is None:
            continue
        out, err = _forward(net.eval(), x)
        if err is not None or out is None or out.ndim < 2 or out.shape[1] != num_classes:
            continue
        kin = 0 if isinstance(net, type(like)) or isinstance(like, type(net)) else 1
        size = sum(p.numel() for p in net.parameters())
        rank = (kin, size, path.relative_to(CONFIGS.parent).as_posix())
        best = rank if best is None or rank < best else best
    return best[2] if best else None


def _input_problem(
    probe: nn.Module, name: str, x: torch.Tensor, dataset: str, split: str, num_classes: int
) -> str:
    got = tuple(x.shape[1:])
    err = _forward(probe, x)[1]
    assert err is not None
    failing = _failing_layer(probe, x)
    expected = expected_input(probe, x)
    fits = fitting_client_config(x, num_classes, probe)
    where = f" in its {split} split" if split != "training" else ""
    gives = f"{dataset} gives {shape_text(got)}"
    if expected is None:
        hint = f" (client: {fits})" if fits else ""
        return (
            f"client.net: {name} cannot take the inputs {dataset} gives{where}, "
            f"{shape_text(got)} ({type(err).__name__}: {_first_line(err)}); "
            f"use a network for {shape_text(got)} inputs{hint}"
        )
    detail = ""
    if failing is not None and isinstance(failing[1], nn.Linear) and failing[2]:
        layer, module, seen = failing
        first = _first_layer(probe)
        if module is not first:
            detail = (
                f" (its {layer} takes {module.in_features} features, {shape_text(got)} inputs "
                f"give it {seen[-1]})"
            )
    elif failing is not None and isinstance(failing[1], nn.Conv2d) and len(failing[2]) == 4:
        layer, conv, seen = failing
        n = conv.in_channels
        detail = f" (its {layer} takes {n} channel{'s' if n != 1 else ''}, not {seen[1]})"
    hint = f" (client: {fits})" if fits else ""
    wanted = f"{shape_text(expected)} inputs"
    first = _first_layer(probe)
    if isinstance(first, nn.Linear) and len(expected) > 1:  # flattened: the features matter
        wanted = f"{first.in_features} input features ({shape_text(expected)} flattened)"
        gives += f" ({math.prod(got)} features)"
    gives += where
    return (
        f"client.net: {name} expects {wanted}{detail}, {gives}; use a network for "
        f"{_spatial(got, expected)} inputs{hint} or a dataset of {_spatial(expected, got)} inputs"
    )


def model_data_problem(
    net: nn.Module,
    splits: dict[str, Any],
    *,
    dataset: str,
    num_classes: int,
    client_num_classes: int,
) -> str | None:
    """Why ``net`` cannot train on this data (one line naming ``client.net`` or
    ``client.num_classes`` and ``data.dataset``, both shapes and what would fit), or None.

    Args:
        net: the client network (left untouched: a copy runs).
        splits: split name to a dataset with ``x`` (or None), e.g. ``{"training": train, ...}``.
        dataset: how to name the data, e.g. ``data.dataset digits``.
        num_classes: the dataset's number of classes.
        client_num_classes: ``client.num_classes`` (the metrics' number of classes).
    """
    with untouched_rng(), torch.no_grad():
        probe = probe_copy(net).eval()
        name = type(net).__name__
        seen: set[tuple] = set()
        for split, data in splits.items():
            if data is None or len(data) == 0:
                continue
            x = data.x[:1]
            if (tuple(x.shape), x.dtype) in seen:  # the same input: the same answer
                continue
            seen.add((tuple(x.shape), x.dtype))
            out, err = _forward(probe, x)
            if err is not None or out is None:
                return _input_problem(probe, name, x, dataset, split, num_classes)
            if out.ndim < 2 or out.shape[0] != 1:
                return (
                    f"client.net: {name} gives outputs of shape {shape_text(tuple(out.shape))} "
                    f"for one example of {dataset}; expected logits of shape 1×classes"
                )
            if out.shape[1] != num_classes:
                fits = fitting_client_config(x, num_classes, probe)
                hint = f" (client: {fits})" if fits else ""
                return (
                    f"client.net: {name} gives {out.shape[1]} outputs (classes), {dataset} has "
                    f"{num_classes} classes; set the network's num_classes and client.num_classes "
                    f"to {num_classes}, or use a network for {num_classes} classes{hint}"
                )
    if client_num_classes != num_classes:
        return (
            f"client.num_classes: {client_num_classes}, but {dataset} has {num_classes} classes "
            f"(and client.net gives {num_classes}); set client.num_classes: {num_classes}"
        )
    return None
