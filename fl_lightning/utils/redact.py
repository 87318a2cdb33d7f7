"""Keeps environment secrets out of what a run writes (config.yaml, summary.json, logged
hyperparameters, the sweep store).

A secret is the value of an environment variable whose name contains ``KEY``, ``TOKEN``,
``SECRET``, ``PASSWORD``/``PASSWD`` or ``CREDENTIAL`` (``WANDB_API_KEY``, ``HF_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ...) and that is at least 8 characters long (shorter values such as
``1`` or ``true`` are flags, and replacing them would mangle ordinary numbers). Every
occurrence of such a value inside a string written by fl-lightning becomes ``<redacted>``.
The values are read when a file is written, so a key exported after start-up is covered too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MIN_LENGTH = 8
REDACTED = "<redacted>"


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values of the environment, longest first (so overlaps redact fully)."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_LENGTH}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, values: list[str] | None = None) -> str:
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """``obj`` with every secret value inside its strings (keys included) redacted."""
    values = secret_values() if values is None else values
    if not values:
        return obj
    if isinstance(obj, str):
        return redact_text(obj, values)
    if isinstance(obj, dict):
        return {redact(k, values): redact(v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, values) for v in obj)
    return obj
