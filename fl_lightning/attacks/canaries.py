"""Canary clients: a one-run empirical ε beside the accountant's (``--attack canaries``).

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar (ICLR 2024), Sec. 3: m extra clients whose
update is a fixed random unit direction uᵢ (drawn from a generator keyed by (seed, i)) scaled
to the strategy's clip norm and then processed like any other upload (``process_update``:
clipped, privatised); each canary is inserted by an independent fair coin (Steinke, Nasr,
Jagielski 2023) and an inserted canary takes part when a real client would: under cyclic
cohorts every b-th round (its phase i mod b), else in each round with the cohort's sampling rate.
A canary is an extra client, so the audit probes add/remove adjacency; under fixed-size cohorts
the guarantee is replace-one, which it does not probe, and audit.json (``adjacency_probed``,
``adjacency_claimed``) and the console sentence say so (:func:`probed_adjacency`).
At the end, the score of canary i is cos(θ_T − θ_0, uᵢ); ``privacy/one_run.py`` turns the scores
into Andrew et al.'s Gaussian-fit estimate and Steinke et al.'s lower bound.

Threat model (the sentence written beside the numbers): the adversary sees only the final
model, knows every canary's direction and crafted the canaries' updates; the estimate is for
such worst-case clients, not for the real clients' data. Canary uploads are added on rank 0
only (a DDP run inserts each once).

Use it from ``fl-lightning audit --attack canaries`` or from ``fit`` with
``--trainer.callbacks+=fl_lightning.attacks.canaries.CanaryAudit``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.events import CohortSampling
from fl_lightning.privacy.one_run import gaussian_fit_epsilon, steinke_lower_bound
from fl_lightning.privacy.statement import makes_claim
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.utils.flat import flatten, trainable_parameters
from fl_lightning.utils.rng import generator_for

THREAT_MODEL = (
    "adversary sees only the final model, knows each canary's direction and crafted the "
    "canaries' updates (worst-case clients, not the real clients' data)"
)


class CanaryAudit(Callback):
    """Inserts canary clients while training and estimates ε from them at the end.

    Args:
        num_canaries: m, canary clients (each inserted with probability 1/2).
        confidence: of Steinke et al.'s lower bound (1 − β).
        guess_fraction: the share of canaries the lower bound's auditor guesses on (half
            "in" from the top scores, half "out" from the bottom; the rest abstain).
        canary_norm: the norm of a canary's update before processing (None: the strategy's
            ``clip_norm``, else 1).
        bootstrap: resamples of the estimate's interval.
        seed: keys the canaries' directions and coins (with the run's seed).
        output_dir: where ``audit.json`` goes (default: the trainer's log directory).
    """

    def __init__(
        self,
        num_canaries: int = 200,
        *,
        confidence: float = 0.95,
        guess_fraction: float = 0.2,
        canary_norm: float | None = None,
        bootstrap: int = 200,
        seed: int = 0,
        output_dir: str | None = None,
    ) -> None:
        super().__init__()
        if num_canaries < 4:
            raise ValueError(f"audit.num_canaries: must be >= 4, got {num_canaries}")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"audit.confidence: must be in (0, 1), got {confidence}")
        if not 0.0 < guess_fraction <= 1.0:
            raise ValueError(f"audit.guess_fraction: must be in (0, 1], got {guess_fraction}")
        self.num_canaries = num_canaries
        self.confidence = confidence
        self.guess_fraction = guess_fraction
        self.canary_norm = canary_norm
        self.bootstrap = bootstrap
        self.seed = seed
        self.output_dir = output_dir
        self.inserted = np.zeros(num_canaries, dtype=bool)
        self.insertions = np.zeros(num_canaries, dtype=int)
        self.start: torch.Tensor | None = None
        self.run_seed = 0
        self.insert_here = True
        self.results: dict[str, Any] = {}
        self.sampling: CohortSampling | None = None  # the run's cohorts, seen in round 0

    # -- canaries ----------------------------------------------------------------------------
    def direction(self, i: int, d: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """uᵢ, a unit vector uniform on the sphere of ℝᵈ (keyed by the seeds and i)."""
        g = generator_for(self.run_seed, self.seed, i, "canary", device=device)
        u = torch.randn(d, generator=g, device=device)
        return u / u.norm()

    def participants(self, ctx: RoundContext) -> list[int]:
        """The inserted canaries that take part in round ``ctx.round_idx``: under cyclic
        cohorts in the block of the schedule, otherwise each with probability q, independently
        (an extra Poisson client: add/remove adjacency even under fixed-size cohorts, whose
        guarantee is replace-one; :func:`probed_adjacency` says which the audit probes)."""
        sampling = ctx.cohort_sampling()
        self.sampling = sampling
        chosen = []
        for i in np.flatnonzero(self.inserted):
            if sampling.mode in ("cyclic", "cyclic_poisson"):
                take = ctx.round_idx % sampling.separation == i % sampling.separation
                if take and sampling.mode == "cyclic_poisson":  # then the block's coin
                    g = generator_for(self.run_seed, self.seed, ctx.round_idx, int(i), "canary_in")
                    take = float(torch.rand(1, generator=g, device="cpu")) < sampling.rate
            else:
                g = generator_for(self.run_seed, self.seed, ctx.round_idx, int(i), "canary_in")
                take = float(torch.rand(1, generator=g, device="cpu")) < sampling.rate
            if take:
                chosen.append(int(i))
        return chosen

    def _canary_updates(self, strategy: Any, ctx: RoundContext) -> Iterator[ClientUpdate]:
        d = ctx.global_params.numel()
        device = ctx.global_params.device
        norm = self.canary_norm or float(
            getattr(strategy, "clip_norm", None)
            or getattr(getattr(strategy, "central_dp", None), "clip_norm", None)
            or 1.0
        )
        for i in self.participants(ctx):
            self.insertions[i] += 1
            cid = ctx.num_clients + i
            update = ClientUpdate(cid, self.direction(i, d, device) * norm, 1, 0.0)
            g = generator_for(self.run_seed, ctx.round_idx, cid, "canary_upload", device=device)
            yield strategy.process_update(update, ctx, generator=g)

    def _wrap(self, strategy: Any) -> None:
        """Adds the round's canary uploads to what the strategy aggregates: to
        ``partial_aggregate`` for a summing strategy (its ``aggregate`` calls it), else to
        ``aggregate``."""
        name = "partial_aggregate" if strategy.reduction == "sum" else "aggregate"
        inner = getattr(strategy, name)
        audit = self

        def with_canaries(updates: Iterable[ClientUpdate], ctx: RoundContext, **kw: Any) -> Any:
            if not audit.insert_here:
                return inner(updates, ctx, **kw)
            extra = list(audit._canary_updates(strategy, ctx))
            if isinstance(updates, list) or strategy.reduction == "gather":
                return inner([*updates, *extra], ctx, **kw)
            return inner(_chain(updates, extra), ctx, **kw)

        setattr(strategy, name, with_canaries)

    # -- Lightning hooks ---------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.run_seed = int(pl_module.noise_seed)  # the run's secret in secure mode
        self.insert_here = bool(trainer.is_global_zero)
        g = generator_for(self.run_seed, self.seed, "canary_coins")
        self.inserted = (torch.rand(self.num_canaries, generator=g, device="cpu") < 0.5).numpy()
        self.start = _flat(pl_module.global_net)
        self._wrap(pl_module.strategy)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        log_dir = trainer.log_dir
        if not trainer.is_global_zero:
            return
        out_dir = Path(self.output_dir or log_dir or trainer.default_root_dir)
        self.results = self.estimate(pl_module)
        self.publish(self.results, out_dir, trainer.loggers)

    # -- the estimate ------------------------------------------------------------------------
    def scores(self, change: torch.Tensor) -> np.ndarray:
        """cos(θ_T − θ_0, uᵢ) for every canary (0 for a model that did not move)."""
        norm = float(change.norm())
        d = change.numel()
        return np.array(
            [
                float(change @ self.direction(i, d, change.device)) / norm if norm > 0 else 0.0
                for i in range(self.num_canaries)
            ]
        )

    def estimate(self, module: Any) -> dict[str, Any]:
        assert self.start is not None, "CanaryAudit: fit never started"
        report = module.accountant.report() if module.accountant is not None else {}
        acc_eps = float(report.get("privacy/epsilon", math.inf))
        delta = float(report.get("privacy/delta", 1e-5))
        end = _flat(module.global_net)
        scores = self.scores(end - self.start.to(end.device))
        fit = gaussian_fit_epsilon(
            scores[self.inserted],
            scores[~self.inserted],
            delta,
            level=self.confidence,
            bootstrap=self.bootstrap,
            seed=self.seed,
        )
        bound = steinke_lower_bound(
            scores,
            self.inserted,
            delta,
            confidence=self.confidence,
            guess_fraction=self.guess_fraction,
        )
        inserted = int(self.inserted.sum())
        participations = self.insertions[self.inserted]
        sentence = (
            f"{self.num_canaries} canary clients ({inserted} inserted by fair coins, "
            f"{float(participations.mean()) if inserted else 0.0:.3g} participations each on "
            f"average): one-run estimate ε ≈ {fit.epsilon:.3g} ({fit.level:.0%} bootstrap "
            f"interval {fit.low:.3g}–{fit.high:.3g}; Andrew et al. 2024), lower bound "
            f"ε ≥ {bound.epsilon:.3g} at {bound.confidence:.0%} confidence ({bound.correct} of "
            f"{bound.guesses} guesses right; Steinke et al. 2023), δ = {delta:g}; threat "
            f"model: {THREAT_MODEL}"
        )
        guarantee = str(report.get("privacy/guarantee", "none: no accountant"))
        probed, claimed = probed_adjacency(self.sampling)
        if not makes_claim(guarantee):
            claimed = guarantee  # nothing is claimed, so nothing to probe against
        elif probed != claimed:
            sentence += (
                f"; adjacency probed: {probed}, not the guarantee's {claimed}, so the estimate "
                "does not test the claim made"
            )
        entry = {
            "epsilon_estimate": fit.epsilon,
            "epsilon_estimate_low": fit.low,
            "epsilon_estimate_high": fit.high,
            "epsilon_lower_bound": bound.epsilon,
            "confidence": bound.confidence,
            "num_canaries": self.num_canaries,
            "inserted": inserted,
            "guesses": bound.guesses,
            "correct_guesses": bound.correct,
            "mean_participations": float(participations.mean()) if inserted else 0.0,
            "observed_mean": fit.observed_mean,
            "observed_std": fit.observed_std,
            "unobserved_mean": fit.unobserved_mean,
            "unobserved_std": fit.unobserved_std,
            "threat_model": THREAT_MODEL,
            "adjacency_probed": probed,
            "adjacency_claimed": claimed,
            "sentence": sentence,
            "strategy": type(module.strategy).__name__,
        }
        return {
            "accountant_epsilon": acc_eps,
            "accountant_delta": delta,
            "guarantee": guarantee,
            "rounds": int(module.rounds_completed) or int(module.global_step),
            "attacks": {"canaries": entry},
        }

    def publish(self, results: dict[str, Any], out_dir: Path, loggers: Sequence[Any]) -> None:
        """Logs ``audit/canaries/*`` (numbers; W&B summary too) and merges the entry into
        ``audit.json`` (beside other attacks' entries of the same run)."""
        from lightning.pytorch.loggers import WandbLogger

        entry = results["attacks"]["canaries"]
        flat = {
            f"audit/canaries/{k}": float(v)
            for k, v in entry.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        for logger in loggers:
            logger.log_metrics(flat, step=int(results["rounds"]))
            if isinstance(logger, WandbLogger):
                for k, v in flat.items():
                    logger.experiment.summary[k] = v
                logger.experiment.summary["audit/canaries/sentence"] = entry["sentence"]
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "audit.json"
        existing = json.loads(path.read_text()) if path.exists() else {}
        merged = {**results, **{k: v for k, v in existing.items() if k != "attacks"}}
        merged["attacks"] = {**existing.get("attacks", {}), "canaries": entry}
        path.write_text(json.dumps(merged, indent=2, default=str) + "\n")
        head = f"audit: accountant ε = {results['accountant_epsilon']:.3g}"
        if not makes_claim(str(results["guarantee"])):
            head = f"audit: {results['guarantee']}; accountant ε = ∞"
        print(f"{head} (δ = {results['accountant_delta']:g}); {entry['sentence']}")


ADD_REMOVE = "add/remove one client"
REPLACE_ONE = "replace-one client"


def probed_adjacency(sampling: CohortSampling | None) -> tuple[str, str]:
    """(the adjacency the canaries probe, the adjacency the guarantee claims) under
    ``sampling``. Canaries join as clients of the schedule (cyclic) or as extra Poisson clients
    at rate q, so they always probe add/remove; fixed-size cohorts drawn without replacement
    claim replace-one (Wang, Balle & Kasiviswanathan 2019), which adding a client cannot probe
    (a substituted client would)."""
    if sampling is not None and sampling.without_replacement:
        return (f"{ADD_REMOVE} (canaries inserted as extra Poisson clients)", REPLACE_ONE)
    return (ADD_REMOVE, ADD_REMOVE)


def _chain(updates: Iterable[ClientUpdate], extra: list[ClientUpdate]) -> Iterator[ClientUpdate]:
    yield from updates
    yield from extra


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return flatten(trainable_parameters(net)).detach().clone()


__all__ = ["THREAT_MODEL", "CanaryAudit", "probed_adjacency"]
