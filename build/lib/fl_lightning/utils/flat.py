"""Flat float32 views of a module's parameters.

Updates travel as one contiguous vector per client (DESIGN.md, "Interfaces"); these helpers move
weights between a module and such a vector in place, without allocating per client.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in trainable_parameters(module))


def flatten_into(params: Iterable[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """Copies ``params`` into the preallocated flat vector ``out`` and returns it."""
    offset = 0
    for p in params:
        n = p.numel()
        out[offset : offset + n].copy_(p.detach().reshape(-1))
        offset += n
    if offset != out.numel():
        raise ValueError(f"flat buffer has {out.numel()} entries, parameters have {offset}")
    return out


def flatten(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """Returns a new flat float32 vector holding ``params``."""
    params = list(params)
    out = torch.empty(sum(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
    return flatten_into(params, out)


def load_flat_(params: Iterable[torch.Tensor], flat: torch.Tensor) -> None:
    """Copies the flat vector ``flat`` into ``params`` in place."""
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} entries, parameters have {offset}")


def layer_slices(module: nn.Module) -> dict[str, slice]:
    """Maps each trainable parameter's name to its slice of the flat vector."""
    slices: dict[str, slice] = {}
    offset = 0
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        slices[name] = slice(offset, offset + p.numel())
        offset += p.numel()
    return slices
