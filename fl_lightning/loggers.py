"""The W&B logger of the ``fl-lightning`` command: its mode follows the environment.

W&B's own tools decide the mode from ``WANDB_MODE`` (``online``, ``offline``, ``disabled``),
else from the workspace settings written by ``wandb online`` / ``wandb offline``, else
online, asking for a login when no credentials are found. :class:`WandbLogger` does the same
with one difference: where neither a mode nor credentials are configured it runs offline, so a
first run needs no account, no network and no prompt. ``WANDB_PROJECT`` and ``WANDB_ENTITY``
name the project and entity as they do for ``wandb.init`` (the project defaults to
``fl-lightning``); ``WANDB_DIR`` sets where W&B writes, otherwise the CLI puts it under
``trainer.default_root_dir``. A run started by ``wandb agent`` (``WANDB_SWEEP_ID`` and
``WANDB_RUN_ID`` set) joins its sweep through ``wandb.init`` and reports online as the agent
asks.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger

DEFAULT_PROJECT = "fl-lightning"
_OFFLINE_MODES = ("offline", "dryrun")


def has_wandb_credentials(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether W&B would find credentials: ``WANDB_API_KEY`` or ``WANDB_IDENTITY_TOKEN_FILE``,
    or an entry for the W&B host (``WANDB_BASE_URL``, default api.wandb.ai) in the netrc file
    that ``wandb login`` writes (``$NETRC``, else ``~/.netrc``)."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    path = Path(env["NETRC"]) if env.get("NETRC") else Path.home() / ".netrc"
    try:
        return netrc.netrc(str(path)).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _workspace_mode() -> str | None:
    """The mode ``wandb online`` / ``wandb offline`` stored in ``./wandb/settings``, if any."""
    import configparser

    parser = configparser.ConfigParser()
    try:
        parser.read(Path("wandb", "settings"))
    except configparser.Error:
        return None
    return parser.get("default", "mode", fallback=None)


def wandb_mode(environ: os._Environ[str] | dict[str, str] | None = None) -> str | None:
    """The mode to force on ``wandb.init``: ``"offline"`` where nothing configures W&B (no
    ``WANDB_MODE``, no ``WANDB_DISABLED``, no workspace mode, no credentials); None otherwise,
    leaving W&B to read its environment and settings as its own tools do."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_MODE") or env.get("WANDB_DISABLED"):
        return None
    if _workspace_mode() or has_wandb_credentials(env):
        return None
    return "offline"


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with the mode, project and entity of the environment.

    Args:
        offline: True forces offline, False forces W&B's own choice (online unless
            ``WANDB_MODE`` says otherwise); None (default): :func:`wandb_mode`.
        save_dir: where W&B writes (``<save_dir>/wandb``); None: ``WANDB_DIR``, else the CLI's
            ``trainer.default_root_dir``.
        project: W&B project; None: ``WANDB_PROJECT``, else ``fl-lightning``.
        entity: W&B entity; None: ``WANDB_ENTITY`` (W&B's default).
        **kwargs: the other arguments of Lightning's ``WandbLogger`` and ``wandb.init``.
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | None = None,
        version: str | None = None,
        offline: bool | None = None,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        log_model: bool | str = False,
        **kwargs: Any,
    ) -> None:
        project = project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        entity = entity or os.environ.get("WANDB_ENTITY") or None
        save_dir = save_dir or os.environ.get("WANDB_DIR") or None
        extra: dict[str, Any] = dict(kwargs)
        if entity:
            extra["entity"] = entity
        if group:
            extra["group"] = group
        mode = "offline" if offline else (None if offline is False else wandb_mode())
        if mode is not None and "mode" not in extra:
            extra["mode"] = mode
        super().__init__(
            name=name,
            save_dir=save_dir,  # type: ignore[arg-type]  # None: filled in under default_root_dir
            version=version,
            offline=False,  # Lightning's offline=True rewrites os.environ; the mode goes below
            project=project,
            log_model=log_model,  # type: ignore[arg-type]  # "all" or a bool, as Lightning's
            **extra,
        )
        # Lightning passes anonymous=None, which W&B >= 0.19 warns about on every run.
        if self._wandb_init.get("anonymous") is None:
            self._wandb_init.pop("anonymous", None)

    @property
    def experiment(self):  # noqa: ANN201 - wandb's Run
        if self._experiment is None and self._wandb_init.get("dir"):
            Path(self._wandb_init["dir"]).mkdir(parents=True, exist_ok=True)
        return super().experiment

    @property
    def mode(self) -> str:
        """``offline`` / ``online`` / ``disabled``: the mode ``wandb.init`` will run in."""
        forced = self._wandb_init.get("mode")
        if forced:
            return "offline" if forced in _OFFLINE_MODES else str(forced)
        env = os.environ.get("WANDB_MODE") or _workspace_mode() or "online"
        if os.environ.get("WANDB_DISABLED", "").lower() in ("true", "1"):
            env = "disabled"
        return "offline" if env in _OFFLINE_MODES else env

    def default_save_dir(self, root: str | os.PathLike[str]) -> None:
        """Writes under ``root`` unless a directory was given (the CLI passes
        ``trainer.default_root_dir``)."""
        if self._wandb_init.get("dir"):
            return
        self._wandb_init["dir"] = os.fspath(root)
        self._save_dir = os.fspath(root)
