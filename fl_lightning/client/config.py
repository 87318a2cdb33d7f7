"""Typed settings of local training and of sample-level DP-SGD."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from fl_lightning.privacy.mechanisms.params import check_clip_norm, check_noise_multiplier

PRECISIONS = ("32", "bf16-mixed")


@dataclass(frozen=True)
class DPSGDConfig:
    """Sample-level DP-SGD (Abadi et al. 2016) run by every client through Opacus.

    Each local step Poisson-samples the client's examples at rate ``batch_size / n_i``, clips
    each example's gradient to L2 norm ``max_grad_norm`` and adds N(0, (σ·C)²) to their sum.

    Attributes:
        noise_multiplier: σ. ``None`` means "calibrate from the accountant's target ε".
        max_grad_norm: C, the per-example clip norm.
        engine: DP-SGD implementation, same maths, same noise (docs/performance.md):
            ``opacus`` (per-sample gradients through hooks), ``ghost`` (Opacus ghost / fast
            gradient clipping), ``functorch`` (``torch.func.vmap(grad)``), ``bk`` (single-backward
            book-keeping clipping, Bu et al. 2023) or ``auto``.
        max_physical_batch_size: virtual batches: examples processed at once (None: the whole
            Poisson batch). Bounds per-example memory; does not change the result.
        noise_rng: the generator of the Gaussian noise (``privacy/mechanisms/dp_sgd_noise.py``):
            ``torch`` (each client's own ``torch.Generator``, one draw per parameter and step; every
            stored result) or ``philox`` (a counter-based generator,
            ``privacy/mechanisms/counter_noise.py``: a bucket's noise in one draw, for the stacked
            executor). Same distribution, other numbers; both executors draw the same values under
            either.
    """

    noise_multiplier: float | None = 1.0
    max_grad_norm: float = 1.0
    engine: str = "auto"
    max_physical_batch_size: int | None = None
    noise_rng: str = "torch"

    def __post_init__(self) -> None:
        check_noise_multiplier(self.noise_multiplier, "client.dp_sgd.noise_multiplier")
        check_clip_norm(self.max_grad_norm, "client.dp_sgd.max_grad_norm")
        from fl_lightning.client.dp_sgd import ENGINE_NAMES

        if self.engine not in ENGINE_NAMES:
            raise ValueError(
                f"client.dp_sgd.engine: unknown engine {self.engine!r}; "
                f"choose from {list(ENGINE_NAMES)}"
            )
        from fl_lightning.privacy.mechanisms.dp_sgd_noise import NOISE_RNGS

        if self.noise_rng not in NOISE_RNGS:
            raise ValueError(
                f"client.dp_sgd.noise_rng: expected one of {list(NOISE_RNGS)}, got "
                f"{self.noise_rng!r}"
            )
        if self.max_physical_batch_size is not None and self.max_physical_batch_size < 1:
            raise ValueError(
                "client.dp_sgd.max_physical_batch_size: must be >= 1, got "
                f"{self.max_physical_batch_size}"
            )


@dataclass(frozen=True)
class LocalTrainingConfig:
    """How each client trains locally in one round.

    Attributes:
        optimizer: ``sgd`` or ``adam``.
        lr: local learning rate η.
        momentum: SGD momentum.
        weight_decay: L2 weight decay.
        local_epochs: E passes over the client's data (used when ``local_steps`` is None).
        local_steps: K local steps (overrides ``local_epochs`` when set).
        batch_size: B; under DP-SGD the expected Poisson batch size (rate B/n_i).
        prox_mu: FedProx proximal coefficient μ (Li et al. 2020); 0 disables it.
        dp_sgd: sample-level DP-SGD settings, or None for non-private local training.
        precision: arithmetic of the local forward and loss, named as Lightning names it:
            ``"32"`` (float32 throughout) or ``"bf16-mixed"`` (forward and loss under
            ``torch.autocast(dtype=torch.bfloat16)`` on the data's device; parameters,
            gradients and optimizer state stay float32). Server-side evaluation stays float32.

    ``bf16-mixed`` is refused under ``dp_sgd`` (any engine). DP-SGD's guarantee rests on every
    clipped per-example gradient having L2 norm ≤ C, so that the sum's sensitivity is C
    (Abadi et al. 2016, Alg. 1; the accountant assumes it). The ghost and book-keeping engines
    compute the per-example norms in one pass and the clipped sum in another (Bu et al. 2023,
    Alg. 1); in bfloat16 (8 bits of mantissa) the two passes round differently, so the factor
    min(1, C/‖g_i‖) computed from one may leave the gradient of the other above C, and the
    noise N(0, σ²C²) no longer covers the sensitivity the accountant assumes. The check runs
    here, so per-round overrides (``with_overrides``, ``ctx.client_config``) cannot bypass it.
    """

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    local_epochs: int = 1
    local_steps: int | None = None
    batch_size: int = 32
    prox_mu: float = 0.0
    dp_sgd: DPSGDConfig | None = None
    precision: Literal["32", "bf16-mixed"] = "32"

    def __post_init__(self) -> None:
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"client.optimizer: expected 'sgd' or 'adam', got {self.optimizer!r}")
        if self.lr < 0:
            raise ValueError(f"client.lr: learning rate must be >= 0, got {self.lr}")
        if self.momentum < 0:
            raise ValueError(f"client.momentum: must be >= 0, got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"client.weight_decay: must be >= 0, got {self.weight_decay}")
        if self.local_epochs < 1:
            raise ValueError(f"client.local_epochs: must be >= 1, got {self.local_epochs}")
        if self.local_steps is not None and self.local_steps < 1:
            raise ValueError(f"client.local_steps: must be >= 1, got {self.local_steps}")
        if self.batch_size < 1:
            raise ValueError(f"client.batch_size: must be >= 1, got {self.batch_size}")
        if self.prox_mu < 0:
            raise ValueError(f"client.prox_mu: must be >= 0, got {self.prox_mu}")
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"client.precision: expected one of {list(PRECISIONS)}, got {self.precision!r}"
            )
        if self.precision != "32" and self.dp_sgd is not None:
            raise ValueError(
                f"client.precision: {self.precision!r} is refused under client.dp_sgd: per-example "
                "norms and the clipped sum computed in bfloat16 in separate passes can disagree, "
                "so a clipped gradient may exceed max_grad_norm, the sensitivity the accountant "
                "assumes; use '32' with DP-SGD"
            )

    def steps_for(self, num_examples: int) -> int:
        """Local steps a client with ``num_examples`` examples runs in one round."""
        if self.local_steps is not None:
            return self.local_steps
        return self.local_epochs * max(1, -(-num_examples // self.batch_size))

    def with_overrides(self, overrides: dict[str, Any]) -> LocalTrainingConfig:
        """Applies per-round overrides (from ``Strategy.configure_round``)."""
        if not overrides:
            return self
        own = {f.name for f in fields(self)}
        dp_keys = {f.name for f in fields(DPSGDConfig)}
        top = {k: v for k, v in overrides.items() if k in own}
        dp = {k: v for k, v in overrides.items() if k in dp_keys}
        unknown = set(overrides) - own - dp_keys
        if unknown:
            raise ValueError(f"strategy: unknown local-training overrides {sorted(unknown)}")
        cfg = replace(self, **top)
        if dp:
            if cfg.dp_sgd is None:
                raise ValueError("strategy: DP-SGD overrides given but client.dp_sgd is off")
            cfg = replace(cfg, dp_sgd=replace(cfg.dp_sgd, **dp))
        return cfg
