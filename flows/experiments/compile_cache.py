"""The persistent compilation cache of the entry points (examples, ``python -m flows``, benchmarks); the
library itself never turns it on.

Settings, read when :func:`enable` is called: ``$FLOWS_CACHE_DIR`` (the folder, default
``<user cache dir>/transformer-flows/jax``), ``--no-compile-cache`` or ``FLOWS_NO_COMPILE_CACHE=1`` (opt out),
``FLOWS_CACHE_MIN_COMPILE_S`` (programs that compile faster are not stored, default 0.2). JAX does not store a
program with host callbacks, and diffrax's save-time checks are one at ``EQX_ON_ERROR=raise``; ``flows.solve``
checks its save times on the host first, so :func:`enable` (before equinox is imported) and
:func:`child_environment` set ``EQX_ON_ERROR=nan``, keeping a value the user set."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["cache_dir", "child_environment", "disabled", "enable", "enabled_dir"]

ENV_DIR, ENV_OFF, ENV_MIN = "FLOWS_CACHE_DIR", "FLOWS_NO_COMPILE_CACHE", "FLOWS_CACHE_MIN_COMPILE_S"
DEFAULT_MIN_COMPILE_S = 0.2
_enabled: Path | None = None


def _user_cache_root() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def cache_dir() -> Path:
    """The cache folder: ``$FLOWS_CACHE_DIR``, else ``<user cache dir>/transformer-flows/jax``."""
    explicit = os.environ.get(ENV_DIR)
    return Path(explicit).expanduser() if explicit else _user_cache_root() / "transformer-flows" / "jax"


def disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when ``FLOWS_NO_COMPILE_CACHE`` of `env` (default this process's environment) is set to anything but
    "", "0", "false" or "no"."""
    return (os.environ if env is None else env).get(ENV_OFF, "").strip().lower() not in ("", "0", "false", "no")


def _min_compile_s() -> float:
    raw = os.environ.get(ENV_MIN, str(DEFAULT_MIN_COMPILE_S))
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ValueError(f"{ENV_MIN} must be a number of seconds >= 0, got {raw!r}")
    return value


def enable(path: str | os.PathLike | None = None, *, opt_out: bool = False) -> Path | None:
    """Turn on JAX's persistent compilation cache in ``path`` (default :func:`cache_dir`) for this process.

    Returns the folder, or ``None`` when ``opt_out`` (an entry point's ``--no-compile-cache``) or
    ``FLOWS_NO_COMPILE_CACHE`` turns it off. Idempotent; raises ``ValueError`` when the folder cannot be
    created or ``FLOWS_CACHE_MIN_COMPILE_S`` is not a number >= 0.
    """
    global _enabled
    if opt_out or disabled():
        return None
    folder = Path(path).expanduser() if path is not None else cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"compile cache folder {str(folder)!r} cannot be created: {err}") from err
    min_s = _min_compile_s()
    import jax

    if "equinox" not in sys.modules:  # equinox reads it at import only
        os.environ.setdefault("EQX_ON_ERROR", "nan")
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_s)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    _enabled = folder
    return folder


def child_environment(env: dict) -> dict:
    """`env` for a child process that turns the cache on: ``EQX_ON_ERROR=nan`` added unless `env` sets it or
    opts out of the cache (module docstring)."""
    return dict(env) if disabled(env) else {"EQX_ON_ERROR": "nan", **env}


def enabled_dir() -> Path | None:
    """The folder :func:`enable` turned on in this process, or ``None``."""
    return _enabled
