"""The recipe "From a sympy loss" of the tutorial docs/tutorials/bring_your_own_theory.md, run as a script from a
temporary folder outside the repository against the installed package, and its solve checked against the closed
form and against scipy (a hand-written right-hand side) beyond the tutorial's own checks.

The recipe fits a * b = 1 with weight decay lambda by gradient flow at learning rate eta. From a balanced start
a = b = s0 the state stays balanced and u = a b = s^2 obeys du/dt = 2 eta u (c - u), c = 1 - lambda: a
logistic curve u(t) = c / (1 + (c / u0 - 1) exp(-2 eta c t)).
"""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import derivations

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorials" / "bring_your_own_theory.md"

# run the recipe as __main__ and keep what it computed (the names are the recipe's own variables)
DRIVER = textwrap.dedent("""
    import runpy
    import numpy as np
    import flows
    ns = runpy.run_path("recipe.py", run_name="__main__")
    traj = ns["traj"]
    np.savez("result.npz", ts=np.asarray(traj.ts), ys=np.asarray(traj.ys), y0=np.asarray(ns["y0"]),
             eta=ns["args"]["eta"], lam=ns["args"]["lambda"], status=traj.status)
    print("flows from", flows.__file__)
""")


def recipe_source() -> str:
    text = TUTORIAL.read_text(encoding="utf-8")
    section = text.split("## From a sympy loss", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"expected one python block in the section, found {len(blocks)}"
    return blocks[0]


@pytest.mark.slow  # .ci/run runs the tutorial's tests after the default suite
def test_tutorial_recipe_runs_from_a_temporary_folder(tmp_path):
    assert ROOT not in tmp_path.parents and tmp_path != ROOT
    (tmp_path / "recipe.py").write_text(recipe_source())
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package, not the checkout
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "driver.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "da/dt =" in proc.stdout and "('eta', 'lambda')" in proc.stdout

    # the generated module is in the user's folder, not in the package
    assert (tmp_path / "generated" / "two_layer_scalar.py").is_file()
    assert not (pathlib.Path(derivations.codegen.GENERATED_DIR) / "two_layer_scalar.py").exists()

    res = np.load(tmp_path / "result.npz")
    assert str(res["status"]) == "ok"
    ts, ys, y0 = res["ts"], res["ys"], res["y0"]
    eta, lam = float(res["eta"]), float(res["lam"])
    assert y0[0] == y0[1] and ts.shape == (201,) and ts[-1] == pytest.approx(20.0)

    # closed form (balanced start): u = a b is logistic with carrying capacity c = 1 - lambda
    c, u0 = 1.0 - lam, y0[0] * y0[1]
    u = c / (1.0 + (c / u0 - 1.0) * np.exp(-2.0 * eta * c * ts))
    np.testing.assert_allclose(ys[:, 0] * ys[:, 1], u, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ys[:, 0], ys[:, 1], rtol=1e-9, atol=1e-12)
    assert abs(ys[-1, 0] - np.sqrt(c)) < 1e-3  # it reached the minimum sqrt(1 - lambda)

    # scipy on the right-hand side written by hand (independent of sympy and of the generated code)
    def rhs(t, w):
        a, b = w
        return [-eta * ((a * b - 1.0) * b + lam * a), -eta * ((a * b - 1.0) * a + lam * b)]

    ref = solve_ivp(rhs, (0.0, float(ts[-1])), y0, t_eval=ts, method="DOP853", rtol=1e-11, atol=1e-13)
    assert ref.success
    np.testing.assert_allclose(ys, ref.y.T, rtol=1e-6, atol=1e-8)
