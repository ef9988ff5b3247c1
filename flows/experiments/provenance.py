"""Provenance of a run: versions of Python and the numerical stack, the jax backend, the git SHA."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["versions"]

_PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optax", "sympy", "numpy", "scipy", "matplotlib")


def _dist_version(dist: str):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str):
    root = Path(__file__).resolve().parents[2]  # the folder that holds flows/
    if not (root / ".git").exists():  # installed, not a checkout: don't report an outer repo
        return None
    try:
        res = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def versions() -> dict:
    """Versions of Python and the numerical stack, the jax backend, x64 flag and git SHA.

    Never raises: anything that cannot be determined is ``None``.
    """
    flows_mod = sys.modules.get("flows")
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "flows": getattr(flows_mod, "__version__", None) or _dist_version("transformer-gradient-flows"),
    }
    for name in _PACKAGES:
        info[name] = _dist_version(name)
    # The backend of a run that used jax; a records-only script (no jax imported) records None rather than
    # importing jax (a slow import) to describe a backend it never ran on.
    info.update(jax_backend=None, jax_devices=None, jax_enable_x64=None)
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            info["jax_backend"] = jax.default_backend()
            info["jax_devices"] = [str(d) for d in jax.devices()]
            info["jax_enable_x64"] = bool(jax.config.read("jax_enable_x64"))
        except Exception:  # noqa: BLE001 - versions() must never fail a run
            logger.debug("could not query jax", exc_info=True)
    info["git_sha"] = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if info["git_sha"] else None
    info["git_dirty"] = None if status is None else bool(status)
    return info
