"""bench_solve: the numpy right-hand sides equal the JAX vector fields, and the row machinery runs on a tiny
instance (timings are never asserted; the ratios are measured by `python -m benchmarks --only solve`).

The whole tiny run (two flows.solve compiles and the scipy subprocess) is a slow check; the default run
checks the scipy side and the figure on a tiny problem without compiling a solve."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import _numpy_rhs, bench_solve, plot_work_precision

TINY = {
    "cooccurrence": dict(n=12, L=4, d=8, m=8, m1=16, t1=5.0),
    "scan_snap_reduced": dict(t1=5.0),
    "mean_field": dict(L=2, M=3, n_train=5, t1=0.5),
}


def _other_state(system, y0, rng):
    """A second state away from the initialisation: every leaf moved by O(1) relative noise (Scan and Snap
    starts at Z = 0, h = 0 where the Z-velocity vanishes, so its other state has h = 0.3 and random Z, B)."""
    out = {}
    for k, v in y0.items():
        v = np.asarray(v)
        scale = max(float(np.max(np.abs(v))), 1.0) if v.size else 1.0
        out[k] = v + 0.5 * scale * rng.standard_normal(v.shape)
    if system == "scan_snap_reduced":
        out["h"] = np.asarray(0.3)
    return {k: jnp.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("system", bench_solve.SYSTEMS)
def test_numpy_rhs_equals_jax_rhs(system):
    p = bench_solve.problem(system, TINY[system])
    shapes = _numpy_rhs.shapes_of(p.y0)
    args = _numpy_rhs.prepare(system, {k: np.asarray(v) for k, v in p.args.items()}, shapes)
    f = _numpy_rhs.make_flat_rhs(system, shapes, args)
    jf = jax.jit(p.vector_field)
    rng = np.random.default_rng(1)
    for state in (p.y0, _other_state(system, p.y0, rng)):
        want = bench_solve.flat(jf(0.0, state, p.args))
        got = f(0.0, bench_solve.flat(state))
        assert got.shape == want.shape
        assert np.max(np.abs(want)) > 0
        assert np.max(np.abs(got - want)) <= 1e-10 * np.max(np.abs(want)), system
    # the flat layout is the one jax.tree_util flattens a dict to
    leaves = jax.tree_util.tree_leaves(p.y0)
    assert np.array_equal(np.concatenate([np.ravel(np.asarray(a)) for a in leaves]), bench_solve.flat(p.y0))


def test_unknown_system_is_rejected():
    with pytest.raises(ValueError, match="system"):
        bench_solve.problem("no_such_system")
    with pytest.raises(ValueError, match="system"):
        _numpy_rhs.prepare("no_such_system", {}, [])


@pytest.mark.slow  # benchmark machinery, run by the harness itself
def test_scipy_side_and_figure_on_a_tiny_problem(tmp_path):
    """The fast version of the tiny run below: the scipy subprocess (numpy kernel environment) against a
    tight scipy reference, and the figure from rows in the common format; no flows.solve compile."""
    from scipy.integrate import solve_ivp

    from benchmarks._harness import row

    p = bench_solve.problem("cooccurrence", dict(n=6, L=3, d=4, m=4, m1=4, t1=5.0))
    shapes = _numpy_rhs.shapes_of(p.y0)
    f = _numpy_rhs.make_flat_rhs("cooccurrence", shapes, _numpy_rhs.prepare("cooccurrence", p.args, shapes))
    ref = solve_ivp(f, (0.0, p.t1), bench_solve.flat(p.y0), method="DOP853", rtol=1e-12, atol=1e-14).y[:, -1]
    out = bench_solve.scipy_side(p, ref, [("RK45", 1e-8, 1e-10), ("DOP853", 1e-8, 1e-10)], repeats=2)
    assert out["system"] == "cooccurrence" and out["rhs_call_s"] > 0 and isinstance(out["numpy_kernel"], list)
    for r in out["runs"]:
        assert r["status"] == 0 and r["nfev"] > 0 and 1 <= r["repeats"] <= 2
        assert r["error"] < 1e-6  # both methods at rtol 1e-8 against the 1e-12 solve of the same numpy RHS
    rows = [
        row(f"solve_wp/cooccurrence/{s}", params={"rtol": rtol}, compile_s=1.0, run_s_min=t, steps=n, error=e)
        for s, rtol, t, n, e in (
            ("dopri5", 1e-4, 0.01, 10, 1e-4),
            ("dopri5", 1e-8, 0.02, 40, 1e-8),
            ("dopri8", 1e-8, 0.015, 20, 0.0),
        )
    ]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    data = plot_work_precision.work_precision(plot_work_precision.load_rows(path))
    assert [p[2] for p in data["cooccurrence"]["dopri5"]] == [1e-4, 1e-8]  # loosest first
    assert plot_work_precision.plot(rows, tmp_path / "wp.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no solve_wp"):
        plot_work_precision.plot([], tmp_path / "none.png")


@pytest.mark.slow
def test_rows_on_a_tiny_instance(tmp_path):
    size = {"cooccurrence": dict(n=6, L=3, d=4, m=4, m1=4, t1=5.0)}
    rows = bench_solve.run(
        True,
        systems=("cooccurrence",),
        wp_sizes=size,
        ratio_sizes=size,
        rtols=(1e-8,),
        repeats=1,
        solvers=("dopri5",),
        pairs=(("RK45", "dopri5", 10.0),),
    )
    benches = [r["bench"] for r in rows]
    assert benches == [
        "solve_wp/cooccurrence/dopri5",
        "solve_vs_scipy/cooccurrence/flows.solve(dopri5)",
        "solve_vs_scipy/cooccurrence/scipy.solve_ivp(RK45)",
    ]
    wp, ours, theirs = rows
    for r in rows:
        assert r["run_s_min"] > 0 and r["steps"] > 0 and r["params"]["rtol"] == 1e-8
    # both sides solved the same problem to about the requested tolerance against the dopri8 reference
    assert wp["error"] < 1e-5 and ours["error"] < 1e-5 and theirs["error"] < 1e-5
    assert theirs["status"] == 0 and ours["status"] == "ok"
    # RK45 and dopri5 are the same tableau: their step counts agree closely
    assert abs(theirs["steps"] - ours["steps"]) <= 0.2 * ours["steps"] + 2
    assert theirs["ratio"]["value"] > 0 and theirs["floor"]["kind"] == "peer" and theirs["bare_diffrax_run_s"] > 0
    # the 10x on scipy: kept, or restated against the bare diffrax peer where that peer does not allow it
    if theirs["ratio"].get("restated"):
        assert theirs["ratio"]["target"] is None and theirs["floor"]["target"] is not None
        assert theirs["ratio"]["best_possible"] < 10.0
    else:
        assert theirs["ratio"]["target"] == 10.0
    assert isinstance(theirs["numpy_kernel"], list) and theirs["rhs_call_s"] > 0
    assert theirs["numpy_env"].startswith("OPENBLAS_CORETYPE")
    # the figure script reads these rows back (JSON lines) and draws the work-precision panel
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = plot_work_precision.work_precision(plot_work_precision.load_rows(path))
    assert list(data) == ["cooccurrence"] and list(data["cooccurrence"]) == ["dopri5"]
    out = plot_work_precision.plot(plot_work_precision.load_rows(path), tmp_path / "wp.png")
    assert out.stat().st_size > 1000
    with pytest.raises(ValueError, match="no solve_wp"):
        plot_work_precision.plot(rows[1:], tmp_path / "none.png")
