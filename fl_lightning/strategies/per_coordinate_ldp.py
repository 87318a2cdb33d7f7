"""A per-coordinate ε-LDP mechanism on every upload (SPM-FL, Chen & Zheng, Electronics 13:4091,
2024, Algorithm 1): a component, not a strategy.

Each client privatises its whole model (all trainable parameters; ``upload: update``
privatises the update local − global instead) with a per-coordinate ε-LDP mechanism
(``fl_lightning.privacy.mechanisms``: ``spm``, ``pnpm``, ``pm``, ``duchi``, ``hm``, ``ldp_fl``,
``laplace``, ``gaussian``; ``none`` for the NoDP baseline). The engine adds the aggregate to the
global weights as a delta, so a privatised model P_i is sent as P_i − global; a strategy that
takes the unweighted mean of those (the paper's Eq. 1, ``LDPFedAvg``) moves the global model to
mean(P_i) with ``server_lr: 1``. Bounded mechanisms map each layer into [−1, 1] first
(``privacy/mechanisms/ranges.py``: ``clip``, ``scale`` or ``adaptive``).

Privacy: the mechanism's ε is per coordinate per report; each report is recorded as a
``LocalRelease`` of d coordinates (``LocalMechanism.local_release``), and the accountant's
headline is the worst client's whole participation (all d coordinates of all its reports, basic
or optimal composition). ``strategy/epsilon_per_report`` = d·ε and ``strategy/epsilon_total`` =
d·ε·(most reports by one client) are the basic-composition totals. SPM and PNPM randomise only
the sign, and the ``scale`` / local ``adaptive`` ranges release a data-dependent range: those
runs report ``privacy/epsilon = ∞`` with the reason (``no_guarantee_reason``), keeping the
sign-only figure in ``privacy/epsilon_local_per_client``.

``LDPFedAvg`` is FedAvg (uniform weights) holding one; ``FedAvg`` given one as
``strategy.init_args.local_dp`` is the same run.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism
from fl_lightning.privacy.mechanisms.ranges import RangeConfig, privatize_by_layer
from fl_lightning.privacy.mechanisms.registry import local_mechanism_names, make_local_mechanism
from fl_lightning.privacy.mechanisms.spm import SymmetricPiecewiseMechanism
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy


def sign_only_bound(mechanism: LocalMechanism) -> float:
    """C of a mechanism that randomises only the sign (SPM): it reports ±C·|w|-scaled values,
    so |w| is revealed to within the factor C."""
    if not isinstance(mechanism, SymmetricPiecewiseMechanism):
        raise TypeError(f"{type(mechanism).__name__} is not a sign-only mechanism")
    return float(mechanism.bound)


class PerCoordinateLDP(UploadPrivacy):
    """A per-coordinate ε-LDP mechanism on each client's model (or update).

    Args:
        mechanism: one of ``none``, ``spm``, ``pnpm``, ``pm``, ``duchi``, ``hm``, ``ldp_fl``,
            ``laplace``, ``gaussian``.
        epsilon: per-coordinate ε of one report.
        variant: SPM only: ``published`` (Algorithm 2, biased), ``debiased``, ``unbiased_c``.
        delta: δ of the Gaussian mechanism (ignored by the pure-ε ones).
        upload: ``model`` (the paper: privatise the local model) or ``update`` (local − global).
        input_range: ``clip`` | ``scale`` | ``adaptive``: how each layer is mapped into [−1, 1]
            for the bounded mechanisms (``ranges.py``). ``None``: ``adaptive`` for ``ldp_fl``,
            ``clip`` otherwise. Ignored by SPM / PNPM (they take raw weights).
        clip_bound: per-layer bound b of ``clip`` (values clamped to [−b, b]).
        range_source: ``global`` (the current global model's layer range; sound) or ``local``
            (the client's own layer, as in public LDP-FL code; leaks the range) for ``adaptive``.
        range_margin: widens the ``adaptive`` radius (≥ 1) so weights can grow across rounds.
    """

    def __init__(
        self,
        *,
        mechanism: str = "spm",
        epsilon: float = 0.3,
        variant: str = "published",
        delta: float = 1e-5,
        upload: str = "model",
        input_range: str | None = None,
        clip_bound: float = 1.0,
        range_source: str = "global",
        range_margin: float = 1.5,
    ) -> None:
        names = ["none", *local_mechanism_names()]
        if mechanism not in names:
            raise ValueError(f"strategy.mechanism: unknown {mechanism!r}; choose from {names}")
        if upload not in ("model", "update"):
            raise ValueError(f"strategy.upload: expected 'model' or 'update', got {upload!r}")
        self.mechanism_name = mechanism
        self.epsilon = float(epsilon)
        self.variant = variant
        self.delta = float(delta)
        self.upload = upload
        mode = input_range or ("adaptive" if mechanism == "ldp_fl" else "clip")
        self.ranges = RangeConfig(
            mode=mode, clip_bound=clip_bound, source=range_source, margin=range_margin
        )
        if mode == "adaptive" and range_source == "global" and upload == "update":
            raise ValueError(
                "strategy.range_source: 'global' takes the range from the global model, which "
                "only exists for upload: model; use range_source: local or input_range: clip"
            )
        self.mechanism: LocalMechanism | None = None
        if mechanism != "none":
            self.mechanism = make_local_mechanism(
                mechanism, epsilon=epsilon, variant=variant, delta=delta
            )
        self.num_parameters = 0
        self._slices: list[slice] | None = None
        self.reports: dict[int, int] = {}
        """Reports (uploads) per client so far, for ``strategy/epsilon_total``."""

    # -- set-up ------------------------------------------------------------------------------
    def setup(self, spec: FederationSpec) -> None:
        """Keeps d and the layers' slices (each layer gets its own input range)."""
        self.num_parameters = spec.num_parameters
        if spec.layer_slices:
            self._slices = list(spec.layer_slices.values())

    # -- privacy statement -------------------------------------------------------------------
    @property
    def private(self) -> bool:
        return self.mechanism is not None

    @property
    def sign_only(self) -> bool:
        return self.mechanism is not None and not self.mechanism.randomises_magnitude

    @property
    def uses_range(self) -> bool:
        return self.mechanism is not None and self.mechanism.unit_input

    def no_guarantee_reason(self) -> str | None:
        """Why the report has no finite ε w.r.t. the weights (None when it has one)."""
        m = self.mechanism
        if m is None:
            return None
        if self.sign_only:
            c = sign_only_bound(m)
            return (
                f"{m.name} randomises only the sign of each weight ({m.epsilon:g}-LDP per "
                f"coordinate for the sign, composed in privacy/epsilon_local_per_client); the "
                f"magnitude |w| is revealed to within a factor C = {c:.4g}, so no finite ε holds "
                "for the weights"
            )
        if self.uses_range and self.ranges.data_dependent:
            return (
                f"input_range {self.ranges.mode!r} ({self.ranges.source}) releases each layer's "
                "data-dependent range without noise; the per-coordinate ε covers the normalised "
                "values only"
            )
        return None

    def guarantee_note(self) -> str:
        m = self.mechanism
        if m is None:
            return "none: NoDP baseline, models uploaded in the clear"
        d = self.num_parameters or 0
        delta = f", δ = {m.delta:g}" if m.delta else ""
        base = (
            f"{m.name}: ε = {m.epsilon:g}{delta} per coordinate per report; a report of d = {d} "
            f"coordinates is {d * m.epsilon:.4g}-LDP by basic composition, and T reports "
            f"T·{d * m.epsilon:.4g}"
        )
        reason = self.no_guarantee_reason()
        return f"{base}. {reason}" if reason else base

    # -- on the client -----------------------------------------------------------------------
    def privatize(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Algorithm 1's client side: P_i = M(W_i) coordinate by coordinate (of the model, or of
        the update with ``upload: update``), uploaded as P_i − global."""
        m = self.mechanism
        if m is None:
            return update
        g = ctx.global_params
        values = update.delta + g if self.upload == "model" else update.delta
        if m.unit_input:
            slices = self._slices or [slice(0, values.numel())]
            reference = g if self.upload == "model" else None
            noisy = privatize_by_layer(
                values,
                slices=slices,
                cfg=self.ranges,
                privatize=m.privatize,  # LDP-FL with c = 0, r = 1 is its unit form
                generator=generator,
                reference=reference,
            )
        else:
            noisy = m.privatize(values, generator=generator)
        update.delta = noisy - g if self.upload == "model" else noisy
        return update

    # -- on the server -----------------------------------------------------------------------
    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One report of d coordinates per dispatched client, with the no-guarantee reason of a
        sign-only mechanism or a data-dependent range."""
        m = self.mechanism
        if m is None:
            return RoundPrivacy()
        release = m.local_release(self.num_parameters or ctx.global_params.numel())
        return RoundPrivacy(
            local={int(cid): [release] for cid in ctx.cohort},
            no_guarantee=self.no_guarantee_reason(),
        )

    def metrics(self, ctx: RoundContext) -> Metrics:
        """Counts the round's reports, then the basic-composition totals d·ε and
        d·ε·(most reports by one client)."""
        for cid in ctx.cohort:
            self.reports[int(cid)] = self.reports.get(int(cid), 0) + 1
        m = self.mechanism
        if m is None:
            return {}
        d = self.num_parameters
        most = max(self.reports.values(), default=0)
        metrics = {
            "epsilon_per_coordinate": m.epsilon,
            "epsilon_per_report": d * m.epsilon,
            "epsilon_total": d * m.epsilon * most,
            "reports_max": float(most),
            "sign_only": float(self.sign_only),
            "finite_guarantee": float(self.no_guarantee_reason() is None),
            "mean_factor": float(m.mean(1.0)) if not m.unit_input else 1.0,
        }
        if self.sign_only:
            metrics["magnitude_factor"] = sign_only_bound(m)
        if not all(math.isfinite(v) for v in metrics.values()):
            raise FloatingPointError("local_dp (per-coordinate LDP): non-finite privacy metric")
        return metrics

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"reports": dict(self.reports)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reports = {int(k): int(v) for k, v in state_dict.get("reports", {}).items()}


__all__ = ["PerCoordinateLDP", "sign_only_bound"]
