"""What a round spends, in a form every accountant backend understands.

A round can spend privacy at three levels, reported separately and never mixed:

* ``client_level``: mechanisms on the aggregate that protect a whole client's data
  (DP-FedAvg of McMahan et al. 2018): sampled Gaussian events with the cohort rate.
* ``record_level``: each client's DP-SGD steps (Abadi et al. 2016), keyed by client id.
* ``local_epsilon``: pure-ε local mechanisms applied to a client's upload (basic composition).

A strategy whose algorithm does not give the guarantee its paper claims sets ``no_guarantee``
to a sentence saying why; the accountant then logs that sentence instead of an ε.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SampledGaussian:
    """``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Attributes:
        noise_multiplier: σ/C, noise std in units of the L2 sensitivity.
        sample_rate: Poisson sampling rate (1.0 for no subsampling).
        steps: how many times it was applied.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int = 1


@dataclass
class RoundPrivacy:
    """Everything one round spends; see the module docstring."""

    client_level: list[SampledGaussian] = field(default_factory=list)
    record_level: dict[int, list[SampledGaussian]] = field(default_factory=dict)
    local_epsilon: dict[int, float] = field(default_factory=dict)
    local_delta: float = 0.0
    no_guarantee: str | None = None
