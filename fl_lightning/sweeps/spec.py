"""W&B sweep specs: parsing, expansion into points, and the command line of a point.

The format is W&B's own (https://docs.wandb.ai/guides/sweeps/sweep-config-keys): ``method``
(``grid`` / ``random`` / ``bayes``), ``parameters`` (``value``, ``values`` [+ ``probabilities``],
``distribution`` with ``min``/``max``/``mu``/``sigma``/``q``, nested ``parameters``), ``program``
and ``command`` with the macros ``${env}``, ``${interpreter}``, ``${program}``, ``${args}``,
``${args_no_hyphens}``, ``${args_no_boolean_flags}``, ``${args_json}``. The same file works with
``wandb sweep`` + ``wandb agent``; the local runner expands grid and random itself and refuses
``bayes`` (it needs the W&B server's model of past runs).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
LOCAL_METHODS = ("grid", "random")


class SpecError(ValueError):
    """A sweep spec the local runner cannot expand (the message is one line)."""


@dataclass
class Point:
    """One run of a sweep: its parameters (flat, dotted keys) and a stable id."""

    index: int
    params: dict[str, Any]
    id: str


@dataclass
class SweepSpec:
    """A parsed sweep spec; ``parameters`` are flattened to dotted keys (W&B nesting)."""

    path: Path
    method: str
    parameters: dict[str, dict[str, Any]]
    command: list[str]
    program: str | None = None
    metric: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    run_cap: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def config_paths(self) -> list[str]:
        """Every ``--config`` file named in the command and every swept ``.yaml`` value."""
        out: list[str] = []
        cmd = self.command
        for i, tok in enumerate(cmd):
            if tok == "--config" and i + 1 < len(cmd):
                out.append(cmd[i + 1])
            elif tok.startswith("--config="):
                out.append(tok.split("=", 1)[1])
        for p in self.parameters.values():
            for v in _choices(p):
                if isinstance(v, str) and v.endswith((".yaml", ".yml")):
                    out.append(v)
        return out


def _flatten_parameters(params: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, p in params.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if not isinstance(p, dict):
            raise SpecError(f"parameters.{name}: expected a mapping (value/values/distribution)")
        if "parameters" in p:
            out.update(_flatten_parameters(p["parameters"], name))
        else:
            out[name] = p
    return out


def load_spec(path: str | Path) -> SweepSpec:
    """Reads and validates a W&B sweep YAML."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such sweep spec")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = (
            " (W&B macros such as ${args} must be quoted inside [...]; or list the command "
            "one item a line)"
            if "${" in path.read_text() and "flow" in str(getattr(err, "context", ""))
            else ""
        )
        raise SpecError(f"{path}{where}: not valid YAML: {problem}{hint}") from err
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: not a sweep spec (expected a mapping)")
    method = raw.get("method")
    if method not in ("grid", "random", "bayes"):
        raise SpecError(f"{path}: method: expected grid, random or bayes, got {method!r}")
    if not isinstance(raw.get("parameters"), dict) or not raw["parameters"]:
        raise SpecError(f"{path}: parameters: missing or empty")
    command = raw.get("command") or DEFAULT_COMMAND
    if not isinstance(command, list) or not all(isinstance(t, str) for t in command):
        raise SpecError(f"{path}: command: expected a list of strings")
    if "${program}" in command and not raw.get("program"):
        raise SpecError(f"{path}: command uses ${{program}} but program is not set")
    params = _flatten_parameters(raw["parameters"])
    for name, p in params.items():
        try:
            _check_parameter(name, p)
        except TypeError as err:  # e.g. min: "a", probabilities: 0.5
            raise SpecError(f"{path}: parameters.{name}: {err}") from err
    if not isinstance(raw.get("metric") or {}, dict):
        raise SpecError(f"{path}: metric: expected a mapping (name, goal)")
    return SweepSpec(
        path=path,
        method=method,
        parameters=params,
        command=list(command),
        program=raw.get("program"),
        metric=raw.get("metric") or {},
        name=str(raw.get("name") or path.stem),
        run_cap=raw.get("run_cap"),
        raw=raw,
    )


_DISTRIBUTIONS = {
    "constant",
    "categorical",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform",
    "q_log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
    "normal",
    "q_normal",
    "log_normal",
    "q_log_normal",
}


def _distribution(p: dict[str, Any]) -> str:
    if "distribution" in p:
        return str(p["distribution"])
    if "value" in p:
        return "constant"
    if "values" in p:
        return "categorical"
    if "min" in p and "max" in p:
        ints = isinstance(p["min"], int) and isinstance(p["max"], int)
        return "int_uniform" if ints else "uniform"
    if "mu" in p or "sigma" in p:
        return "normal"
    return "?"


def _check_parameter(name: str, p: dict[str, Any]) -> None:
    dist = _distribution(p)
    if dist not in _DISTRIBUTIONS:
        raise SpecError(f"parameters.{name}: unknown distribution {dist!r}")
    if dist == "categorical":
        values = p.get("values")
        if not isinstance(values, list) or not values:
            raise SpecError(f"parameters.{name}: values must be a non-empty list")
        probs = p.get("probabilities")
        if probs is not None and (len(probs) != len(values) or abs(sum(probs) - 1) > 1e-6):
            raise SpecError(f"parameters.{name}: probabilities must match values and sum to 1")
    if dist.endswith(("uniform", "uniform_values")) and not ("min" in p and "max" in p):
        raise SpecError(f"parameters.{name}: {dist} needs min and max")
    if "min" in p and "max" in p and p["min"] > p["max"]:
        raise SpecError(f"parameters.{name}: min > max")


def _choices(p: dict[str, Any]) -> list[Any]:
    """The finite set of values of a parameter (empty for a continuous distribution)."""
    dist = _distribution(p)
    if dist == "constant":
        return [p["value"]]
    if dist == "categorical":
        return list(p["values"])
    if dist == "int_uniform":
        return list(range(int(p["min"]), int(p["max"]) + 1))
    return []


def point_id(params: dict[str, Any], salt: str = "") -> str:
    """A stable id of a point: a hash of its parameters (and, for random, its index)."""
    blob = json.dumps(params, sort_keys=True, default=str) + salt
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def expand_grid(spec: SweepSpec) -> list[Point]:
    """The cartesian product of every parameter's values, in spec order (as W&B does)."""
    names, axes = [], []
    for name, p in spec.parameters.items():
        values = _choices(p)
        if not values:
            raise SpecError(
                f"parameters.{name}: a grid needs value/values/int_uniform, "
                f"got distribution {_distribution(p)!r}"
            )
        names.append(name)
        axes.append(values)
    points = []
    for i, combo in enumerate(itertools.product(*axes)):
        params = dict(zip(names, combo))
        points.append(Point(i, params, point_id(params)))
    return points


def _sample(p: dict[str, Any], rng: random.Random) -> Any:
    dist = _distribution(p)
    q = p.get("q", 1)
    mu, sigma = p.get("mu", 0.0), p.get("sigma", 1.0)
    if dist == "constant":
        return p["value"]
    if dist == "categorical":
        return rng.choices(p["values"], weights=p.get("probabilities"))[0]
    if dist.endswith(("uniform", "uniform_values")):
        lo, hi = p["min"], p["max"]  # present: _check_parameter requires them for these
        if dist == "int_uniform":
            return rng.randint(int(lo), int(hi))
        if dist == "uniform":
            return rng.uniform(lo, hi)
        if dist == "q_uniform":
            return round(rng.uniform(lo, hi) / q) * q
        if dist == "log_uniform":  # W&B: min/max are natural logs of the bounds
            return math.exp(rng.uniform(lo, hi))
        if dist == "log_uniform_values":
            return math.exp(rng.uniform(math.log(lo), math.log(hi)))
        if dist == "q_log_uniform":
            return round(math.exp(rng.uniform(lo, hi)) / q) * q
        if dist == "q_log_uniform_values":
            return round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / q) * q
        if dist == "inv_log_uniform":
            return 1.0 / math.exp(rng.uniform(lo, hi))
        if dist == "inv_log_uniform_values":
            return 1.0 / math.exp(rng.uniform(math.log(lo), math.log(hi)))
    if dist == "normal":
        return rng.gauss(mu, sigma)
    if dist == "q_normal":
        return round(rng.gauss(mu, sigma) / q) * q
    if dist == "log_normal":
        return math.exp(rng.gauss(mu, sigma))
    if dist == "q_log_normal":
        return round(math.exp(rng.gauss(mu, sigma)) / q) * q
    raise SpecError(f"unsupported distribution {dist!r}")  # pragma: no cover (checked on load)


def expand_random(spec: SweepSpec, *, count: int, seed: int = 0) -> list[Point]:
    """``count`` points; point i is drawn from its own generator keyed by (seed, i), so the
    first K points are the same whatever the count, and a restarted sweep finds them again."""
    if count < 1:
        raise SpecError("--count: must be >= 1")
    points = []
    for i in range(count):
        rng = random.Random(f"fl-lightning-sweep:{seed}:{i}")
        params = {name: _sample(p, rng) for name, p in spec.parameters.items()}
        points.append(Point(i, params, f"r{i}-{point_id(params)}"))
    return points


def expand(spec: SweepSpec, *, count: int | None = None, seed: int = 0) -> list[Point]:
    """The points of a sweep for the local runner (grid: all, or the first ``count``)."""
    if spec.method == "bayes":
        raise SpecError(
            f"{spec.path}: method 'bayes' needs the W&B sweep server: run "
            f"`wandb sweep {spec.path}` then `wandb agent <sweep id>` (the local runner does "
            "grid and random)"
        )
    if spec.method == "grid":
        points = expand_grid(spec)
        return points[:count] if count else points
    count = count or spec.run_cap
    if not count:
        raise SpecError(f"{spec.path}: method 'random' needs --count K (or run_cap in the spec)")
    return expand_random(spec, count=count, seed=seed)


def format_value(value: Any) -> str:
    """A value as W&B's agent writes it into ``--key=value`` (Python's str; JSON for lists)."""
    if isinstance(value, bool):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def build_command(
    spec: SweepSpec, params: dict[str, Any], *, json_file: Path | None = None
) -> list[str]:
    """The argv of one point, expanding W&B's command macros.

    ``${interpreter}`` and a leading ``fl-lightning`` become this Python (``sys.executable``,
    ``-m fl_lightning.cli``) so that points run inside the current virtual environment;
    ``${env}`` (``/usr/bin/env`` for W&B) is dropped.
    """
    out: list[str] = []
    for tok in spec.command:
        if tok == "${env}":
            continue
        if tok == "${interpreter}":
            out.append(sys.executable)
        elif tok == "${program}":
            out.append(str(spec.program))
        elif tok == "${args}":
            out += [f"--{k}={format_value(v)}" for k, v in params.items()]
        elif tok == "${args_no_hyphens}":
            out += [f"{k}={format_value(v)}" for k, v in params.items()]
        elif tok == "${args_no_boolean_flags}":
            for k, v in params.items():
                if v is True:
                    out.append(f"--{k}")
                elif v is not False:
                    out.append(f"--{k}={format_value(v)}")
        elif tok == "${args_json}":
            out.append(json.dumps(params))
        elif tok == "${args_json_file}":
            if json_file is None:
                raise SpecError("${args_json_file} needs a file to write to")
            json_file.write_text(json.dumps(params))
            out.append(str(json_file))
        else:
            out.append(tok)
    if out and out[0] in ("fl-lightning", "fl_lightning"):
        out = [sys.executable, "-m", "fl_lightning.cli", *out[1:]]
    return out


def is_fl_lightning_fit(argv: list[str]) -> bool:
    """Whether a command runs ``fl-lightning fit`` (so the runner may add logger overrides)."""
    for i, tok in enumerate(argv):
        if tok == "fl_lightning.cli" or tok.endswith(("fl_lightning/cli.py", "fl-lightning")):
            return "fit" in argv[i + 1 : i + 2]
    return False
