"""Canary clients: a one-run empirical ε beside the accountant's (``--attack canaries``).

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar (ICLR 2024), Sec. 3: m extra clients whose
update is a fixed random direction uᵢ scaled to the strategy's clip norm C (white-box canaries,
Nasr et al., USENIX Security 2023: the worst-case update the clipping allows). The m directions
are orthonormal when m ≤ 2^⌊log₂ d⌋ (:func:`canary_frame`: rows of a randomised Hadamard
matrix), so no canary's update shows in another's score; with more canaries they are
independent uniform unit vectors. Each canary's fair coin (Steinke, Nasr, Jagielski 2023)
says whether it is "in";
:mod:`fl_lightning.attacks.observers` says how it enters the run for the chosen observer
(absent when "out" under add/remove for a third party; uploading 0 when the server would see
it; −C·uᵢ against +C·uᵢ under replace-one) and the canary takes part as a client of the
schedule would (cyclic: every b-th round; otherwise with the cohort's sampling rate). Its
upload claims the weight of the largest client (FedAvg weights by example counts) and goes
through the client side of the strategy (clip, local noise); under SecAgg it is encoded as a
client's but adds no noise share (the round is priced with the real survivors' noise) and
joins the modular sum unmasked (masks cancel in the sum).

The auditor's statistic (the likelihood-ratio test for Gaussian noise, Andrew et al. Sec. 4):

* ``final``: cos(θ_T − θ_0, uᵢ);
* ``all_models``: Σ_t ⟨θ_{t+1} − θ_t, uᵢ⟩ over the rounds the public schedule lets canary i
  take part in (every round unless cohorts are cyclic);
* ``server``: Σ_t ⟨what the server receives in round t, uᵢ⟩ over the rounds canary i took part
  in (the unmasked sum under SecAgg, canary i's own processed upload otherwise).

``privacy/audit/one_run.py`` turns the scores into Andrew et al.'s estimate and Steinke et al.'s
lower bound; the bound's guesses are planned from the claimed ε before the scores are read
(:func:`~fl_lightning.privacy.audit.one_run.planned_guess_fraction`). Canary uploads are added on
rank 0 only (a DDP run inserts each once).

Use it from ``fl-lightning audit --attack canaries [--observer all_models]`` or from ``fit``
with ``--trainer.callbacks+=fl_lightning.attacks.canaries.CanaryAudit``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from fl_lightning.attacks.observers import (
    Insertion,
    claimed_adjacency,
    comparison_epsilon,
    insertion,
    secure_sum,
)
from fl_lightning.attacks.observers import (
    observer as named_observer,
)
from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.privacy.audit.one_run import (
    gaussian_fit_epsilon,
    gdp_lower_bound,
    lower_bound_ceiling,
    planned_guess_fraction,
    steinke_lower_bound,
)
from fl_lightning.privacy.distributed.secagg.encoding import walsh_hadamard
from fl_lightning.privacy.guarantee.statement import makes_claim
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.utils.flat import flatten, trainable_parameters
from fl_lightning.utils.rng import generator_for


def threat_model(observer_name: str) -> str:
    """The sentence written beside the numbers."""
    return (
        f"{named_observer(observer_name).sees}; it knows each canary's direction and crafted the "
        "canaries' updates (worst-case clients, not the real clients' data)"
    )


THREAT_MODEL = threat_model("final")


class CanaryAudit(Callback):
    """Inserts canary clients while training and estimates ε from them at the end.

    Args:
        num_canaries: m, canary clients (each "in" with probability 1/2).
        observer: who the audit attacks (``final``, ``all_models``, ``server``;
            ``attacks/observers.py``).
        confidence: of Steinke et al.'s lower bound (1 − β).
        guess_fraction: the share of canaries the lower bound's auditor guesses on (half
            "in" from the top scores, half "out" from the bottom; the rest abstain). None:
            planned from the claimed ε (``one_run.planned_guess_fraction``), before any score.
        canary_norm: the norm of a canary's update before processing (None: the strategy's
            clip norm, else 1).
        bootstrap: resamples of the estimate's interval.
        seed: keys the canaries' directions and coins (with the run's seed).
        output_dir: where ``audit.json`` goes (default: the trainer's log directory).
    """

    def __init__(
        self,
        num_canaries: int = 200,
        *,
        observer: str = "all_models",
        confidence: float = 0.95,
        guess_fraction: float | None = None,
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
        if guess_fraction is not None and not 0.0 < guess_fraction <= 1.0:
            raise ValueError(f"audit.guess_fraction: must be in (0, 1], got {guess_fraction}")
        if canary_norm is not None and not canary_norm > 0:
            raise ValueError(f"audit.canary_norm: must be > 0, got {canary_norm}")
        self.observer = named_observer(observer)
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
        self.previous: torch.Tensor | None = None
        self.totals = np.zeros(num_canaries)  # Σ_t of the observer's inner products
        self.run_seed = 0
        self.insert_here = True
        self.weight = 1
        self.results: dict[str, Any] = {}
        self.sampling: CohortSampling | None = None  # the run's cohorts, seen in round 0
        self._frame: CanaryFrame | None = None
        self._round_members: list[int] = []
        self._started = 0.0

    # -- canaries ----------------------------------------------------------------------------
    def frame(self, d: int) -> CanaryFrame:
        """The canaries' directions (:class:`CanaryFrame`, keyed by the run's and the
        audit's seeds)."""
        if self._frame is None or self._frame.d != d:
            g = generator_for(self.run_seed, self.seed, "canary_frame", device="cpu")
            self._frame = CanaryFrame(self.num_canaries, d, g)
        return self._frame

    def direction(self, i: int, d: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """uᵢ, canary i's unit direction in ℝᵈ."""
        return self.frame(d).vectors([i])[0].to(device)

    def _takes_part(self, i: int, ctx: RoundContext, sampling: CohortSampling) -> bool:
        """Whether canary i is drawn into round ``ctx.round_idx`` as a client would be."""
        if sampling.mode in ("cyclic", "cyclic_poisson"):
            if ctx.round_idx % sampling.separation != i % sampling.separation:
                return False
            if sampling.mode == "cyclic":
                return True
        g = generator_for(self.run_seed, self.seed, ctx.round_idx, int(i), "canary_in")
        return float(torch.rand(1, generator=g, device="cpu")) < sampling.rate

    def participants(self, ctx: RoundContext) -> list[int]:
        """The canaries that take part in round ``ctx.round_idx``: those whose coin says "in",
        and under the observer's :func:`~fl_lightning.attacks.observers.insertion` the "out"
        ones too when they do not stay absent; each as a client of the schedule would (cyclic:
        in the block of the schedule; otherwise with probability q, independently)."""
        sampling = ctx.cohort_sampling()
        self.sampling = sampling
        present = self.inserted | (self.insertion().out != "absent")
        return [int(i) for i in np.flatnonzero(present) if self._takes_part(int(i), ctx, sampling)]

    def insertion(self) -> Insertion:
        """How a canary enters the run for this audit's observer under the run's sampling."""
        return insertion(self.observer, self.sampling)

    def _sign(self, i: int) -> float:
        """+1 for an "in" canary; for an "out" one that takes part, 0 or −1."""
        if self.inserted[i]:
            return 1.0
        return -1.0 if self.insertion().out == "negated" else 0.0

    def _norm(self, strategy: Any) -> float:
        """The canary's norm: ``canary_norm``, else the first clip norm among the strategy and
        its DP components, else 1."""
        parts = (
            strategy,
            getattr(strategy, "central_dp", None),
            getattr(strategy, "local_dp", None),
        )
        clips = [getattr(p, "clip_norm", None) for p in parts]
        return float(self.canary_norm or next((c for c in clips if c), None) or 1.0)

    def _canary_updates(self, strategy: Any, ctx: RoundContext) -> Iterator[ClientUpdate]:
        """The round's canary uploads, processed on the client side as any upload."""
        d = ctx.global_params.numel()
        device = ctx.global_params.device
        norm = self._norm(strategy)
        self._round_members = self.participants(ctx)
        for start in range(0, len(self._round_members), 256):
            chunk = self._round_members[start : start + 256]
            for i, u in zip(chunk, self.frame(d).vectors(chunk).to(device), strict=True):
                self.insertions[i] += 1
                cid = ctx.num_clients + i
                update = ClientUpdate(cid, u * (norm * self._sign(i)), self.weight, 0.0)
                g = generator_for(self.run_seed, ctx.round_idx, cid, "canary_upload", device=device)
                processed = strategy.process_update(update, ctx, generator=g)
                if self.observer.name == "server":  # it receives each processed upload
                    self.totals[i] += float(processed.delta.to(u.dtype) @ u)
                yield processed

    def _secure_sum(self, dp: Any, total: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """``total`` (the modular sum of the masked uploads) with the round's canaries added:
        each clipped and encoded as a client's, with no noise share and no mask (the masks of
        the others cancel in the sum either way)."""
        d = ctx.global_params.numel()
        norm = self._norm(dp)
        self._round_members = self.participants(ctx)
        vectors = self.frame(d).vectors(self._round_members)
        for i, u in zip(self._round_members, vectors, strict=True):
            self.insertions[i] += 1
            cid = ctx.num_clients + i
            g = generator_for(self.run_seed, ctx.round_idx, cid, "canary_upload", device="cpu")
            delta = dp.clip(ClientUpdate(cid, u * (norm * self._sign(i)), 1, 0.0)).delta
            encoded = dp.encode(delta, ctx, generator=g, noise=False)
            total = torch.remainder(total + encoded.to(total), float(1 << dp.bits))
        return total

    def _wrap(self, strategy: Any) -> None:
        """Adds the round's canaries to what the strategy aggregates: to
        ``partial_aggregate`` for a summing strategy (its ``aggregate`` calls it; under SecAgg
        into the modular sum), else to ``aggregate``; and records what the server receives."""
        name = "partial_aggregate" if strategy.reduction == "sum" else "aggregate"
        inner = getattr(strategy, name)
        dp = secure_sum(strategy)
        audit = self

        def with_canaries(updates: Iterable[ClientUpdate], ctx: RoundContext, **kw: Any) -> Any:
            if not audit.insert_here:
                return inner(updates, ctx, **kw)
            if dp is not None:
                return audit._secure_sum(dp, inner(updates, ctx, **kw), ctx)
            extra = list(audit._canary_updates(strategy, ctx))
            if isinstance(updates, list) or strategy.reduction == "gather":
                return inner([*updates, *extra], ctx, **kw)
            return inner(_chain(updates, extra), ctx, **kw)

        setattr(strategy, name, with_canaries)

    # -- Lightning hooks ---------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._started = time.perf_counter()
        self.run_seed = int(pl_module.noise_seed)  # the run's secret in secure mode
        self.insert_here = bool(trainer.is_global_zero)
        g = generator_for(self.run_seed, self.seed, "canary_coins")
        self.inserted = (torch.rand(self.num_canaries, generator=g, device="cpu") < 0.5).numpy()
        self.start = _flat(pl_module.global_net)
        self.previous = self.start.clone()
        self.totals = np.zeros(self.num_canaries)
        self.weight = _largest_client(pl_module)
        strategy = pl_module.strategy
        if self.observer.name == "server" and getattr(strategy, "reduction", "sum") != "sum":
            raise ValueError(
                "audit.observer: the server's view is recorded for summing strategies only "
                f"({type(strategy).__name__} aggregates with reduction "
                f"{strategy.reduction!r})"
            )
        self.frame(self.start.numel())
        self._wrap(strategy)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        """After each round: the released model's step, read against every canary."""
        if self.previous is None or self.observer.name == "final":
            return
        now = _flat(pl_module.global_net)
        step = now - self.previous.to(now.device)
        self.previous = now
        if self.observer.name == "server" and secure_sum(pl_module.strategy) is None:
            return  # the server read each canary's own upload
        projections = self.frame(now.numel()).project(step)
        self.totals += projections * self._read_mask(int(pl_module.global_step) - 1)

    def _read_mask(self, round_idx: int) -> np.ndarray:
        """Which canaries' scores read round ``round_idx``: the server, those that took part;
        a third party, those the public schedule could have drawn (every canary unless cohorts
        are cyclic)."""
        mask = np.zeros(self.num_canaries)
        if self.observer.name == "server":
            mask[self._round_members] = 1.0
            return mask
        sampling = self.sampling
        if sampling is not None and sampling.mode in ("cyclic", "cyclic_poisson"):
            b = sampling.separation
            mask[np.arange(self.num_canaries) % b == round_idx % b] = 1.0
            return mask
        return mask + 1.0

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
        if norm == 0:
            return np.zeros(self.num_canaries)
        return self.frame(change.numel()).project(change) / norm

    def observed_scores(self, module: Any) -> np.ndarray:
        """The observer's statistic for every canary (module docstring)."""
        if self.observer.name == "final":
            assert self.start is not None, "CanaryAudit: fit never started"
            end = _flat(module.global_net)
            return self.scores(end - self.start.to(end.device))
        return self.totals.copy()

    def estimate(self, module: Any) -> dict[str, Any]:
        assert self.start is not None, "CanaryAudit: fit never started"
        report = module.accountant.report() if module.accountant is not None else {}
        delta = float(report.get("privacy/delta", 1e-5))
        compared, compared_with = comparison_epsilon(self.observer, report, module.strategy)
        scores = self.observed_scores(module)
        fit = gaussian_fit_epsilon(
            scores[self.inserted],
            scores[~self.inserted],
            delta,
            level=self.confidence,
            bootstrap=self.bootstrap,
            seed=self.seed,
        )
        fraction = self.guess_fraction
        if fraction is None:
            fraction, _ = planned_guess_fraction(
                self.num_canaries, compared, delta, confidence=self.confidence
            )
        bound = steinke_lower_bound(
            scores, self.inserted, delta, confidence=self.confidence, guess_fraction=fraction
        )
        curve = gdp_lower_bound(
            self.num_canaries, bound.guesses, bound.correct, delta, confidence=self.confidence
        )
        ceiling = lower_bound_ceiling(
            self.num_canaries, bound.guesses, delta, confidence=self.confidence
        )
        inserted = int(self.inserted.sum())
        participations = self.insertions[self.inserted]
        how = self.insertion()
        sentence = (
            f"observer {self.observer.name}: {self.num_canaries} canary clients ({inserted} "
            f"inserted by fair coins, {float(participations.mean()) if inserted else 0.0:.3g} "
            f"participations each on average): one-run estimate ε ≈ {fit.epsilon:.3g} "
            f"({fit.level:.0%} bootstrap interval {fit.low:.3g}–{fit.high:.3g}; Andrew et al. "
            f"2024), lower bound ε ≥ {bound.epsilon:.3g} at {bound.confidence:.0%} confidence "
            f"({bound.correct} of {bound.guesses} guesses right, at most {ceiling:.3g} with "
            f"these guesses; Steinke et al. 2023; read through the Gaussian trade-off curve: "
            f"μ ≥ {curve.mu:.3g}, ε ≥ {curve.epsilon:.3g}), δ = {delta:g}; compared with "
            f"{_fmt(compared)}: {compared_with}; threat model: "
            f"{threat_model(self.observer.name)}"
        )
        guarantee = str(report.get("privacy/guarantee", "none: no accountant"))
        probed, claimed = how.adjacency, claimed_adjacency(self.sampling)
        if not makes_claim(guarantee):
            claimed = guarantee  # nothing is claimed, so nothing to probe against
        elif not probed.startswith(claimed):
            sentence += (
                f"; adjacency probed: {probed}, not the guarantee's {claimed}, so the estimate "
                "does not test the claim made"
            )
        entry = {
            "observer": self.observer.name,
            "compared_epsilon": compared,
            "compared_with": compared_with,
            "epsilon_estimate": fit.epsilon,
            "epsilon_estimate_low": fit.low,
            "epsilon_estimate_high": fit.high,
            "epsilon_lower_bound": bound.epsilon,
            "lower_bound_ceiling": ceiling,
            "gdp_mu_lower_bound": curve.mu,
            "epsilon_lower_bound_gdp": curve.epsilon,
            "confidence": bound.confidence,
            "guess_fraction": fraction,
            "num_canaries": self.num_canaries,
            "canary_weight": self.weight,
            "inserted": inserted,
            "guesses": bound.guesses,
            "correct_guesses": bound.correct,
            "mean_participations": float(participations.mean()) if inserted else 0.0,
            "observed_mean": fit.observed_mean,
            "observed_std": fit.observed_std,
            "unobserved_mean": fit.unobserved_mean,
            "unobserved_std": fit.unobserved_std,
            "threat_model": threat_model(self.observer.name),
            "adjacency_probed": probed,
            "adjacency_claimed": claimed,
            "seconds": time.perf_counter() - self._started,
            "sentence": sentence,
            "strategy": type(module.strategy).__name__,
        }
        return {
            "accountant_epsilon": float(report.get("privacy/epsilon", math.inf)),
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


class CanaryFrame:
    """The m canaries' unit directions in ℝᵈ, orthonormal when m ≤ p = 2^⌊log₂ d⌋: rows of a
    randomised Hadamard matrix H·diag(s)/√p (random signs s, m distinct random rows of H)
    placed on p random coordinates of the model, so no canary's update shows in another's
    score and each direction is as spread as a random one (every entry ±1/√p). Nothing m × d
    is stored: a direction is rebuilt from its row index, and every canary's inner product
    with a vector is one fast Walsh–Hadamard transform. More canaries than p get independent
    uniform unit vectors, stored (their cross-talk then adds variance to every score)."""

    def __init__(self, m: int, d: int, generator: torch.Generator) -> None:
        self.m, self.d = m, d
        self.p = 1 << (d.bit_length() - 1)
        self.dense: torch.Tensor | None = None
        if m > self.p:
            gauss = torch.randn(m, d, generator=generator, device=generator.device).cpu()
            self.dense = gauss / gauss.norm(dim=1, keepdim=True)
            return
        on = generator.device  # the frame's generator is a CPU one (``canary_frame``)
        self.rows = torch.randperm(self.p, generator=generator, device=on)[:m].cpu().numpy()
        self.coords = torch.randperm(d, generator=generator, device=on)[: self.p].cpu()
        draw = torch.randint(0, 2, (self.p,), generator=generator, device=on)
        self.signs = (draw.cpu() * 2 - 1).double()

    def vectors(self, idx: Sequence[int] | np.ndarray) -> torch.Tensor:
        """The directions of canaries ``idx`` (len(idx) × d, float32, on the CPU)."""
        idx = np.asarray(idx, dtype=int)
        if self.dense is not None:
            return self.dense[torch.as_tensor(idx, dtype=torch.long)]
        parity = np.bitwise_count(np.bitwise_and.outer(self.rows[idx], np.arange(self.p))) & 1
        block = (1.0 - 2.0 * torch.from_numpy(parity.astype(np.float64))) * self.signs
        out = torch.zeros(len(idx), self.d)
        out[:, self.coords] = (block / math.sqrt(self.p)).float()
        return out

    def project(self, x: torch.Tensor) -> np.ndarray:
        """⟨x, uᵢ⟩ for every canary i (float64)."""
        x = x.detach().double().cpu()
        if self.dense is not None:
            return (self.dense.double() @ x).numpy()
        return walsh_hadamard(x[self.coords] * self.signs).numpy()[self.rows]


def probed_adjacency(sampling: CohortSampling | None) -> tuple[str, str]:
    """(the adjacency the third party's canaries probe, the adjacency the guarantee claims)
    under ``sampling`` (``attacks/observers.py: insertion``)."""
    return insertion(named_observer("final"), sampling).adjacency, claimed_adjacency(sampling)


def _fmt(eps: float) -> str:
    return "ε = ∞" if math.isinf(eps) else f"ε = {eps:.3g}"


def _largest_client(module: Any) -> int:
    """The example count of the federation's largest client: the weight a canary claims
    (FedAvg's n_i; McMahan et al. 2017), the most a client of this population could."""
    sizes = getattr(getattr(module, "data", None), "client_sizes", None)
    try:
        return max(1, int(np.max(sizes()))) if sizes is not None else 1
    except (ValueError, TypeError, AttributeError):
        return 1


def _chain(updates: Iterable[ClientUpdate], extra: list[ClientUpdate]) -> Iterator[ClientUpdate]:
    yield from updates
    yield from extra


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return flatten(trainable_parameters(net)).detach().clone()


__all__ = ["THREAT_MODEL", "CanaryAudit", "CanaryFrame", "probed_adjacency", "threat_model"]
