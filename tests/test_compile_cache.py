"""The persistent compilation cache of the entry points (flows.experiments.compile_cache): an example's second run in a
fresh process reads its compiled programs instead of writing new ones; opt-out by flag or environment."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.experiments import compile_cache

ROOT = Path(__file__).resolve().parent.parent

# A tiny "example": the shared parser (which turns the cache on), then one jitted program.
SCRIPT = """
import sys
import jax, jax.numpy as jnp
from flows.experiments import compile_cache, records
ns = records.example_parser("cachetest", "doc").parse_args(sys.argv[1:])
f = jax.jit(lambda x: jnp.sin(x) @ x + jnp.cos(x).sum())
f.lower(jnp.ones((8, 8))).compile()
print("CACHE", compile_cache.enabled_dir())
"""


# An "example" with one jitted program and one flows.solve: diffrax's checks of the save times are equinox
# runtime errors, host callbacks under EQX_ON_ERROR=raise, and JAX never stores a program with host callbacks.
# The parser turns the cache on before equinox is imported, so that it can set EQX_ON_ERROR=nan for equinox.
SOLVE_SCRIPT = """
import sys
import numpy as np
from flows.experiments import compile_cache, records
ns = records.example_parser("cachetest", "doc").parse_args(sys.argv[1:])
from flows import solve
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sin(x) @ x + jnp.cos(x).sum())
f.lower(jnp.ones((8, 8))).compile()
traj = solve(lambda t, y, a: -y, np.ones(3), t1=1.0, ts=np.linspace(0.0, 1.0, 5))
assert np.allclose(traj.ys[-1], np.exp(-1.0), rtol=1e-6)
print("CACHE", compile_cache.enabled_dir())
"""


def _run(tmp_path, *args, script_text=SCRIPT, **env):
    script = tmp_path / "ex.py"
    script.write_text(script_text)
    full_env = {k: v for k, v in os.environ.items() if k != compile_cache.ENV_OFF}
    full_env.update({"FLOWS_CACHE_DIR": str(tmp_path / "cache"), compile_cache.ENV_MIN: "0", **env})
    out = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "o"), *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _entries(tmp_path):
    folder = tmp_path / "cache"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.slow  # two fresh processes; the cache's switch is pinned by test_opt_out_by_flag_and_by_environment
def test_second_process_reads_the_cache(tmp_path):
    """A jitted function's program and a solve's ("jit_run") are written by the first process and found by
    the second (at EQX_ON_ERROR=raise JAX refuses every solve program: "uses host callbacks")."""
    assert f"CACHE {tmp_path / 'cache'}" in _run(tmp_path, script_text=SOLVE_SCRIPT)
    first = _entries(tmp_path)
    assert any(name.startswith("jit__lambda") for name in first), first
    assert any(name.startswith("jit_run") for name in first), first
    stamps = {n: (tmp_path / "cache" / n).stat().st_mtime_ns for n in first}
    _run(tmp_path, script_text=SOLVE_SCRIPT)
    assert _entries(tmp_path) == first  # every program was found: nothing new written
    assert {n: (tmp_path / "cache" / n).stat().st_mtime_ns for n in first} == stamps


def test_examples_of_reproduce_get_eqx_on_error_nan_unless_set_or_opted_out():
    base = {"PATH": "/bin"}
    assert compile_cache.child_environment(base) == {**base, "EQX_ON_ERROR": "nan"}
    assert compile_cache.child_environment({**base, "EQX_ON_ERROR": "breakpoint"})["EQX_ON_ERROR"] == "breakpoint"
    assert "EQX_ON_ERROR" not in compile_cache.child_environment({**base, compile_cache.ENV_OFF: "1"})


def test_opt_out_by_flag_and_by_environment(tmp_path):
    assert "CACHE None" in _run(tmp_path, "--no-compile-cache")
    assert "CACHE None" in _run(tmp_path, **{compile_cache.ENV_OFF: "1"})
    assert _entries(tmp_path) == []


def test_folder_and_bad_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("FLOWS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert compile_cache.cache_dir() == tmp_path / "xdg" / "transformer-flows" / "jax"
    monkeypatch.setenv("FLOWS_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv(compile_cache.ENV_OFF, "0")
    assert not compile_cache.disabled()
    monkeypatch.setenv(compile_cache.ENV_MIN, "soon")
    with pytest.raises(ValueError, match=compile_cache.ENV_MIN):
        compile_cache.enable(tmp_path / "c")
    monkeypatch.setenv(compile_cache.ENV_OFF, "1")
    assert compile_cache.enable(tmp_path / "c") is None  # opted out: nothing is set, nothing raised
    (tmp_path / "file").write_text("x")
    monkeypatch.delenv(compile_cache.ENV_OFF)
    monkeypatch.delenv(compile_cache.ENV_MIN)
    with pytest.raises(ValueError, match="cannot be created"):
        compile_cache.enable(tmp_path / "file" / "sub")
