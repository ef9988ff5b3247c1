"""The library compiles its own programs with `flows._xla.COMPILER_OPTIONS` (the classic CPU emitters: about
half the compile time); the results equal XLA's defaults, and `FLOWS_XLA_DEFAULTS=1` turns the options off."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import flows
from flows import _xla
from flows._program import build


def test_options_change_compile_not_results():
    assert _xla.COMPILER_OPTIONS == {"xla_cpu_use_fusion_emitters": False}
    half = flows.Event(lambda t, y, a: y[0] - 0.5)
    run = build(lambda t, y, a: -a * jnp.tanh(y) * y, solver="tsit5", rtol=1e-10, atol=1e-12, dt0=None,
                max_steps=10_000, observables={"s": lambda t, y, a: jnp.sum(jnp.sin(y))}, save_states=True,
                event=half, blowup=1e10, progress=False)
    call = (jnp.array([1.0, 2.0]), jnp.asarray(1.3), jnp.asarray(0.0), jnp.asarray(5.0),
            jnp.linspace(0.0, 5.0, 9), jnp.asarray(True))
    lowered = jax.jit(run).lower(*call)
    ours, default = _xla.compile_lowered(lowered)(*call), lowered.compile()(*call)
    assert int(ours["code"]) == int(default["code"])
    for key in ("t_event", "t_final", "num_steps"):
        np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(default[key]), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(ours["saved"]["s"]), np.asarray(default["saved"]["s"]), rtol=1e-13)


def test_env_switch_restores_xla_defaults():
    code = "from flows import _xla; print(_xla.COMPILER_OPTIONS)"
    env = {**os.environ, "FLOWS_XLA_DEFAULTS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
