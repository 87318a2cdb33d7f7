"""FedAvg with a local-DP mechanism on every upload (SPM-FL, Chen & Zheng, Electronics 13:4091,
2024, Algorithm 1 and Eq. 1).

Each sampled client (rate q) trains E local epochs of SGD with batch B, then privatises its
whole model (all trainable parameters; ``upload: update`` privatises the update instead) with a
per-coordinate ε-LDP mechanism; the server takes the **unweighted** mean of the uploads (Eq. 1).
The engine adds the aggregate to the global weights as a delta, so a privatised model P_i is
sent as P_i − global and the mean of those is mean(P_i) − global: with ``server_lr: 1`` the new
global model is mean(P_i).

That is FedAvg with ``weighting: uniform`` holding a
:class:`~fl_lightning.strategies.per_coordinate_ldp.PerCoordinateLDP` as ``local_dp`` (where the
mechanisms, the input ranges, the ``LocalRelease`` events, the no-guarantee reasons of sign-only
mechanisms and data-dependent ranges, the ``strategy/epsilon_*`` metrics and the report counts
live). This class only takes the mechanism's settings as flat arguments, the form of the shipped
and stored configs (``configs/strategy/spm_fl/``; the sweep store's run ids hash them);
``FedAvg`` with ``weighting: uniform`` and ``local_dp: PerCoordinateLDP`` is the same run.
"""

from __future__ import annotations

from fl_lightning.privacy.mechanisms.ldp import LocalMechanism
from fl_lightning.privacy.mechanisms.ranges import RangeConfig
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.per_coordinate_ldp import PerCoordinateLDP


class LDPFedAvg(Strategy):
    """Local-DP FedAvg (SPM-FL Algorithm 1): the unweighted mean of per-coordinate LDP uploads.

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
        ldp = PerCoordinateLDP(
            mechanism=mechanism,
            epsilon=epsilon,
            variant=variant,
            delta=delta,
            upload=upload,
            input_range=input_range,
            clip_bound=clip_bound,
            range_source=range_source,
            range_margin=range_margin,
        )
        super().__init__(weighting="uniform", local_dp=ldp)

    @property
    def ldp(self) -> PerCoordinateLDP:
        """``local_dp``, always a ``PerCoordinateLDP`` here."""
        assert isinstance(self.local_dp, PerCoordinateLDP)
        return self.local_dp

    # Read-only views of the component, for code written against the flat strategy.
    @property
    def mechanism(self) -> LocalMechanism | None:
        return self.ldp.mechanism

    @property
    def ranges(self) -> RangeConfig:
        return self.ldp.ranges

    @property
    def reports(self) -> dict[int, int]:
        return self.ldp.reports

    @property
    def sign_only(self) -> bool:
        return self.ldp.sign_only

    def no_guarantee_reason(self) -> str | None:
        """Why the report has no finite ε w.r.t. the weights (None when it has one)."""
        return self.ldp.no_guarantee_reason()

    def guarantee_note(self) -> str:
        return self.ldp.guarantee_note()


__all__ = ["LDPFedAvg"]
