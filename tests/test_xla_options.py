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


_REPRESENTATIVE = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from flows import cooccurrence as co
from flows import mean_field as mf
from flows import scan_snap as ss

cfg = co.Config(n=12, L=4, d=3 + co.num_random_slots(12, 4), m=4, m1=4, seed=3)
args = co.data_args(cfg, num_test=8)
traj = co.solve_flow(cfg, np.linspace(0.0, 5.0, 6), args=args, locate_T1=True, rtol=1e-10, atol=1e-12)
rec = co.train(cfg, "gd", 0.05, 100, save_every=50, args=args)
sgd = ss.train(ss.syn_small(), "sgd", lr=1.0, T=12, batch_size=4, steps=5, momentum=0.5, init="random", seed=1)
mcfg = mf.Config(d=2, D=4, N=3, L=2, M=4, M_mlp=4, n_train=8)
v = mf.velocity(mcfg, mf.init_particles(mcfg), mf.training_set(mcfg))
out = {"flow_loss": np.asarray(traj.observables["loss"]).tolist(), "T1": float(traj.t_event),
       "gd_loss": np.asarray(rec["loss"]).tolist(), "sgd_Z": np.asarray(sgd.Z[-1]).ravel().tolist(),
       "mf_v": np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(v)]).tolist()}
print("RESULT" + json.dumps(out))
"""


def _representative(xla_flags):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    out = subprocess.run([sys.executable, "-c", _REPRESENTATIVE], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    return json.loads(out.stdout.split("RESULT", 1)[1])


def test_suite_optimisation_level_gives_the_default_results():
    """The default suite compiles at XLA backend optimisation level 0 (tests/conftest.py, for compile time);
    representative programs (a co-occurrence flow with its T1 event, GD and momentum-SGD training loops, the
    mean-field velocity) give the same numbers at XLA's default level, in a fresh process, to 1e-12."""
    from tests.conftest import XLA_TEST_FLAG

    low, default = _representative(XLA_TEST_FLAG), _representative("")
    for key in low:
        np.testing.assert_allclose(np.asarray(low[key]), np.asarray(default[key]), rtol=1e-12, atol=1e-14,
                                   err_msg=key)
