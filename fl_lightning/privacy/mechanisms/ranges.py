"""Mapping each layer of a flat weight vector into a mechanism's input range.

PM, Duchi, HM, Laplace and Gaussian take inputs in [−1, 1]; LDP-FL takes [c − r, c + r] per
layer. The SPM paper does not say how weights are brought into range (notes §2.5). Modes:

* ``clip`` (default, sound): per layer, centre 0 and radius ``clip_bound``; values are clamped
  to [−b, b], divided by b, privatised and multiplied back. The range does not depend on the
  client's data, so the per-coordinate guarantee covers the whole report.
* ``scale``: per layer, centre 0 and radius max|w| of the client's own layer. Nothing is
  clipped, but the radius is data-dependent and released without noise (it is needed to
  rescale): **no finite ε** for the report. Offered for comparison only.
* ``adaptive`` (LDP-FL, Sun et al. 2021): per layer, centre and radius of the layer's value
  range, taken from the current **global** model (public to every client; sound), widened by
  ``range_margin``; or, with ``range_source: local``, from the client's own layer (data-
  dependent and released: no finite ε).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from fl_lightning.privacy.mechanisms.params import check_clip_norm

RANGE_MODES = ("clip", "scale", "adaptive")
RANGE_SOURCES = ("global", "local")


class UnitPrivatizer(Protocol):
    """A unit-range mechanism's ``privatize``: [−1, 1]-valued input, same-shape noisy output."""

    def __call__(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor: ...


@dataclass(frozen=True)
class RangeConfig:
    """How layers are mapped to the unit range (module docstring)."""

    mode: str = "clip"
    clip_bound: float = 1.0
    source: str = "global"
    margin: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in RANGE_MODES:
            raise ValueError(
                f"strategy.input_range: expected one of {RANGE_MODES}, got {self.mode!r}"
            )
        check_clip_norm(self.clip_bound, "strategy.clip_bound")
        if self.source not in RANGE_SOURCES:
            raise ValueError(
                f"strategy.range_source: expected one of {RANGE_SOURCES}, got {self.source!r}"
            )
        if not self.margin >= 1.0:
            raise ValueError(f"strategy.range_margin: must be >= 1, got {self.margin}")

    @property
    def data_dependent(self) -> bool:
        """True when the released range depends on the client's data (no finite ε)."""
        return self.mode == "scale" or (self.mode == "adaptive" and self.source == "local")


def layer_range(
    cfg: RangeConfig, local: torch.Tensor, reference: torch.Tensor | None
) -> tuple[float, float]:
    """(centre, radius) of one layer; ``reference`` is the global layer (adaptive/global)."""
    if cfg.mode == "clip":
        return 0.0, cfg.clip_bound
    if cfg.mode == "scale":
        return 0.0, max(float(local.abs().max()), 1e-12)
    src = local if cfg.source == "local" or reference is None else reference
    lo, hi = float(src.min()), float(src.max())
    centre = (lo + hi) / 2.0
    return centre, max((hi - lo) / 2.0 * cfg.margin, 1e-12)


def privatize_by_layer(
    x: torch.Tensor,
    *,
    slices: Sequence[slice],
    cfg: RangeConfig,
    privatize: UnitPrivatizer,
    generator: torch.Generator,
    reference: torch.Tensor | None = None,
) -> torch.Tensor:
    """Maps each layer into [−1, 1], applies ``privatize`` (a unit-range mechanism) and maps
    back. Returns a new tensor; ``x`` is unchanged."""
    out = torch.empty_like(x)
    for sl in slices:
        ref = None if reference is None else reference[sl]
        centre, radius = layer_range(cfg, x[sl], ref)
        unit = ((x[sl] - centre) / radius).clamp_(-1.0, 1.0)
        out[sl] = privatize(unit, generator=generator).mul_(radius).add_(centre)
    return out
