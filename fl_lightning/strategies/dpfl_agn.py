"""DPFL-AGN (Jiao, Cai, Wang, Cheng, Gao 2023, "A Differential Privacy Federated Learning Scheme
Based on Adaptive Gaussian Noise", Algorithm 1 with its typos fixed, see
``docs/dpfl_agn.md``).

Every round t, every client j (all N take part) runs local DP-SGD steps: a Poisson batch at rate
H/|D_j| (the paper's "H/N" is a typo), per-example clipping to Θ, N(0, σ_t²Θ²) added to the sum,
divided by H (Algorithm 1, line 12; the core's Opacus engine, ``client.dp_sgd``). The noisy
gradient g̃ then drives

* **AGN** (``adaptive_lr``, §3.1, Eqs. 6–10): an Adam step (β1 0.9, β2 0.999, ε 1e-8) with
  ``client.optimizer: adam``. Algorithm 1, lines 14–16 print β1 for β2 and drop the powers β^t;
  the equations (and torch.optim.Adam) are the correct form. Each client keeps its own Adam
  state (m, v, step count) across rounds (``adam_state: persist``; ``reset`` starts a fresh
  Adam every round, which with one local step reduces Adam to noisy signSGD);
* or plain SGD (``client.optimizer: sgd``) for the DP-SGD-FL baseline and the ANR-only ablation.

The server averages the uploaded models with p_j = |D_j|/|D| (Eq. 1) and then applies
**ANR** (``anr``, §3.2, Eqs. 11–12): with v(ω) the server's loss (on the held-out validation
split by default, ``anr_loss: test`` for the paper's test loss), if v(ω_t) − v(ω_{t+1}) < μ
then σ_{t+1} = ρ·σ_t (optionally not below ``noise_floor``). The paper prints ρ = 0.001, which
is its μ; ρ is not reported, and 0.9 is our documented default. ``anr_patience`` k > 1 reads
Eq. 11 over a window of k rounds, v(ω_{t+1−k}) − v(ω_{t+1}) < μ, tested once k rounds have
passed since the last decay (k = 1 is the published rule exactly). With few local steps the
loss moves less than μ per round, so the published rule fires every round and spends the budget
in a few rounds; the window makes ANR fire on a plateau, as §3.2 describes.

Privacy: record-level (ε, δ)-DP per client. Each client's steps are recorded by the core with
the σ_t actually used (``ClientUpdate.dp_steps``) and composed by the accountant as the sum of the
per-step sampled-Gaussian RDP at each σ_t (the paper's Theorem 1 assumes a constant σ and its
Eq. 13 drops a log and flips a sign; neither is copied). With ANR, σ_t is chosen from released
models, so the steps compose by RDP's fully adaptive composition (a Rényi filter per order,
Feldman & Zrnic 2021, Thm. 3.1): the run needs ``privacy.accountant: rdp`` and refuses PLD/PRV,
whose compositions assume parameters fixed in advance (docs/privacy.md, "Adaptive noise").
Training stops before a round that would exceed ``privacy.target_epsilon`` (2 in the paper).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Literal

import torch

from fl_lightning.records import ClientPlan, LocalOverrides, RoundContext, RoundPlan
from fl_lightning.strategies.base import Metrics, Strategy, StrategyTraits, unsynced_state_problem
from fl_lightning.strategies.spec import FederationSpec


class DPFLAGN(Strategy):
    """DPFL-AGN and its ablations (AGN only, ANR only, AGN + ANR).

    The initial noise multiplier σ_0 is ``client.dp_sgd.noise_multiplier`` (calibrated by the
    core from ``privacy.target_epsilon`` when left unset); this strategy overrides it each
    round with σ_t.

    Args:
        adaptive_lr: AGN, Adam on the noisy gradient; True requires ``client.optimizer: adam``,
            False requires ``sgd`` (the ANR-only ablation and the DP-SGD-FL baseline); None
            (default) follows ``client.optimizer`` (so a sweep varies the optimizer alone).
        anr: adaptive noise reduction (Eqs. 11–12).
        mu: μ, the loss-decrease threshold that triggers a decay (0.001 in the paper).
        rho: ρ ∈ (0, 1), the decay factor (not reported by the paper; see the module doc).
        noise_floor: σ never decays below this (0: no floor, as in the paper).
        anr_loss: ``val`` (server-held validation split, needs ``data.val_fraction > 0``) or
            ``test`` (the paper's test loss, which leaks the test set into training).
        adam_state: ``persist`` (per-client Adam state kept across rounds, checkpointed) or
            ``reset`` (a fresh optimizer every round).
        anr_patience: k, the rounds over which the loss decrease is measured (Eq. 11 over a
            window, tested k rounds after the last decay); 1 (default) is the published rule.
    """

    def __init__(
        self,
        *,
        adaptive_lr: bool | None = None,
        anr: bool = True,
        mu: float = 1e-3,
        rho: float = 0.9,
        noise_floor: float = 0.0,
        anr_loss: Literal["val", "test"] = "val",
        adam_state: Literal["persist", "reset"] = "persist",
        anr_patience: int = 1,
    ) -> None:
        super().__init__(weighting="num_examples")
        if mu < 0:
            raise ValueError(f"strategy.mu: must be >= 0, got {mu}")
        if not 0.0 < rho < 1.0:
            raise ValueError(f"strategy.rho: must be in (0, 1), got {rho}")
        if noise_floor < 0:
            raise ValueError(f"strategy.noise_floor: must be >= 0, got {noise_floor}")
        if anr_loss not in ("val", "test"):
            raise ValueError(f"strategy.anr_loss: expected 'val' or 'test', got {anr_loss!r}")
        if adam_state not in ("persist", "reset"):
            raise ValueError(
                f"strategy.adam_state: expected 'persist' or 'reset', got {adam_state!r}"
            )
        if isinstance(anr_patience, bool) or not isinstance(anr_patience, int) or anr_patience < 1:
            raise ValueError(f"strategy.anr_patience: must be an integer >= 1, got {anr_patience}")
        self.anr_patience = anr_patience
        self.anr_window: list[float] = []
        self.adaptive_lr = adaptive_lr
        self.anr = anr
        self.mu = mu
        self.rho = rho
        self.noise_floor = noise_floor
        self.anr_loss = anr_loss
        self.adam_state = adam_state
        self.sigma: float | None = None
        self.prev_loss: float | None = None
        self.sigma_history: list[float] = []
        self.decay_rounds: list[int] = []
        self.optimizer_states: dict[int, dict[str, Any]] = {}
        # Under DDP the client's Adam state is copied to every process after each round
        # (docs/distributed.md), so whichever process trains the client next resumes it.
        self.client_states = self.optimizer_states if adam_state == "persist" else None

    # -- set-up ------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        cfg = spec.local
        if cfg.dp_sgd is None:
            raise ValueError(
                "client.dp_sgd: DPFL-AGN adds its Gaussian noise through per-example DP-SGD; "
                "set client.dp_sgd (noise_multiplier = σ_0, max_grad_norm = Θ)"
            )
        if self.adaptive_lr is None:
            self.adaptive_lr = cfg.optimizer == "adam"
        wanted = "adam" if self.adaptive_lr else "sgd"
        if cfg.optimizer != wanted:
            raise ValueError(
                f"client.optimizer: strategy.adaptive_lr={self.adaptive_lr} needs the local "
                f"optimizer {wanted!r}, got {cfg.optimizer!r}"
            )
        if not self.adaptive_lr and cfg.momentum != 0.0:
            raise ValueError("client.momentum: the DP-SGD baseline of DPFL-AGN uses plain SGD")
        spec.server.require_model_averaging("DPFL-AGN")
        if self.anr and self.anr_loss == "val" and not spec.has_validation_split:
            raise ValueError(
                "data.val_fraction: anr_loss 'val' needs a server validation split "
                "(data.val_fraction > 0), or set strategy.anr_loss: test"
            )
        # σ_0 (the server calibrated an unset one before setting the strategy up); a resumed
        # run then restores σ_t from its checkpoint.
        assert cfg.dp_sgd.noise_multiplier is not None
        self.sigma = float(cfg.dp_sgd.noise_multiplier)

    # -- per round ---------------------------------------------------------------------------
    def server_loss(self, ctx: RoundContext) -> float:
        """v(ω): the loss of the current global model on the ANR split."""
        if ctx.evaluate is None:
            raise RuntimeError("DPFL-AGN's noise decay needs RoundContext.evaluate")
        metrics = ctx.evaluate(self.anr_loss)
        if "loss" not in metrics:
            raise ValueError(f"data: no {self.anr_loss!r} split to evaluate the ANR loss on")
        return float(metrics["loss"])

    def configure_round(self, ctx: RoundContext) -> RoundPlan:
        if self.sigma is None:
            raise RuntimeError("DPFL-AGN: σ_0 is set in setup_federation")
        if self.anr and self.prev_loss is None:
            self.prev_loss = self.server_loss(ctx)  # v(ω_0), before the first round
            self.anr_window = [self.prev_loss]
        return RoundPlan(tuple(ctx.cohort), LocalOverrides(noise_multiplier=self.sigma))

    def anr_step(self, loss: float) -> bool:
        """Eqs. 11–12: decays σ when v(ω_{t+1−k}) − v(ω_{t+1}) < μ (k = ``anr_patience``; k = 1
        is the paper's v(ω_t) − v(ω_{t+1}) < μ), tested once k rounds have passed since the last
        decay; returns whether it fired."""
        assert self.sigma is not None and self.prev_loss is not None
        if not self.anr_window:  # a state from before the window existed
            self.anr_window = [self.prev_loss]
        self.anr_window.append(loss)
        fired = False
        k = self.anr_patience
        if len(self.anr_window) > k:
            fired = (self.anr_window[-1 - k] - loss) < self.mu
            if fired:
                self.sigma = max(self.rho * self.sigma, self.noise_floor)
                self.anr_window = [loss]
            else:
                self.anr_window = self.anr_window[-k:]
        self.prev_loss = loss
        return fired

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        assert self.sigma is not None
        used = self.sigma
        self.sigma_history.append(used)
        metrics = {"noise_multiplier": used}
        if self.anr:
            loss = self.server_loss(ctx)
            fired = self.anr_step(loss)
            if fired:
                self.decay_rounds.append(ctx.round_idx)
            metrics.update(
                {"anr_loss": loss, "anr_fired": float(fired), "next_noise_multiplier": self.sigma}
            )
        return metrics

    # -- per-client Adam state ---------------------------------------------------------------
    def configure_client(self, client_id: int, ctx: RoundContext) -> ClientPlan:
        """``adam_state: persist`` resumes the client's Adam moments from its last round and
        keeps them afterwards; ``reset`` starts a fresh optimizer every round."""
        if self.adam_state != "persist":
            return super().configure_client(client_id, ctx)

        def save(state: dict[str, Any]) -> None:
            self.optimizer_states[client_id] = copy.deepcopy(state)

        return ClientPlan(
            start_params=ctx.global_params,
            optimizer_state=self.optimizer_states.get(client_id),
            save_optimizer_state=save,
        )

    @property
    def traits(self) -> StrategyTraits:
        """Not shardable when it persists per-client Adam state outside ``client_states``;
        with ANR its σ_t is chosen from the released models (adaptive noise)."""
        unsynced = self.adam_state == "persist" and self.client_states is not self.optimizer_states
        problem = unsynced_state_problem(self) if unsynced else None
        adaptive = "DPFL-AGN's ANR chooses σ_t from the released models" if self.anr else None
        return dataclasses.replace(
            super().traits, distributed_problem=problem, adaptive_noise=adaptive
        )

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "prev_loss": self.prev_loss,
            "anr_window": list(self.anr_window),
            "sigma_history": list(self.sigma_history),
            "decay_rounds": list(self.decay_rounds),
            "optimizer_states": dict(self.optimizer_states),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.sigma = state_dict["sigma"]
        self.prev_loss = state_dict["prev_loss"]
        self.anr_window = list(state_dict.get("anr_window", []))
        self.sigma_history = list(state_dict["sigma_history"])
        self.decay_rounds = list(state_dict["decay_rounds"])
        self.optimizer_states.clear()  # in place: it is the synced client_states
        self.optimizer_states.update({int(k): v for k, v in state_dict["optimizer_states"].items()})


__all__ = ["DPFLAGN"]
