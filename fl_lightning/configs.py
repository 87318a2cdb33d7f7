"""Where a checkout keeps its configs, and the base config that every run starts from.

``configs/base.yaml`` (beside the package in a source checkout) holds the defaults shared by
all experiments: the CLI loads it as jsonargparse's ``default_config_files``, before any
``--config`` file and override. An installed package without the file runs on the same values,
built into the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
BASE_CONFIG = CONFIGS / "base.yaml"
SUBCOMMANDS = ("fit", "validate", "test")


def base_config_kwargs(run: bool) -> dict[str, Any]:
    """``parser_kwargs`` for LightningCLI that load ``configs/base.yaml`` first: into each
    subcommand's parser when the CLI runs a subcommand (``run=True``), else into the one parser
    (``run=False``). Empty when the file is absent."""
    if not BASE_CONFIG.is_file():
        return {}
    files = {"default_config_files": [str(BASE_CONFIG)]}
    return {name: dict(files) for name in SUBCOMMANDS} if run else files
