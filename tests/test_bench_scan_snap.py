"""bench_scan_snap: its row builders yield well-formed rows on tiny sizes (timings are not checked here)."""

import numpy as np
import pytest

from benchmarks import bench_scan_snap as b
from benchmarks._harness import row

KEYS = {"bench", "params", "compile_s", "run_s_min", "repeats", "steps", "error"}


def _well_formed(r):
    assert KEYS <= set(r), r
    if r.get("ratio") is not None:
        assert {"value", "of", "target", "met"} <= set(r["ratio"])
        assert np.isfinite(r["ratio"]["value"]) and r["ratio"]["value"] > 0


def test_scaling_row_and_fit():
    r = b.scaling_row(16, repeats=1, t1=0.5)
    _well_formed(r)
    assert r["params"]["M"] == 16 and r["s_per_unit_time"] > 0 and r["steps"] >= 1
    # the fit row on synthetic rows with a known exponent
    rows = [
        row("x", params={"M": M}, compile_s=None, run_s_min=None, s_per_unit_time=1e-6 * M**2.0)
        for M in (64, 128, 256, 512)
    ]
    fit = b.scaling_fit(rows, min_M=128)
    _well_formed(fit)
    assert fit["params"]["fit_over"] == [128.0, 256.0, 512.0]
    assert abs(fit["exponent"] - 2.0) <= 1e-9 and fit["exponent_ci"][0] <= 2.0 <= fit["exponent_ci"][1] + 1e-9


@pytest.mark.slow
def test_sweep_rows_members_agree():
    """The symmetric sweep's rows at n = 4 (five compiles: lockstep, vmapped, single, floor, peer)."""
    rows = b.sweep_symmetric(4, ts=(0.0, 1.0), repeats=1)
    assert [r["bench"] for r in rows] == [
        "scan_snap/sweep_symmetric(n=4)",
        "scan_snap/sweep_symmetric_diffrax_vmap(n=4)",
        "scan_snap/sweep_symmetric_python_loop(n=4)",
    ]
    for r in rows:
        _well_formed(r)
        assert r["error"] <= 1e-9  # lockstep and the peer agree with the single solves to the tolerances
    main = rows[0]
    assert main["floor"]["kind"] == "floor" and main["floor"]["floor_s"] > 0 and main["task"] == "sweep"
    assert main["member_steps"]["max"] <= main["lockstep_steps"]
    assert main["ratio"]["target"] == 50 or "restated" in main["ratio"]


@pytest.mark.slow  # benchmark machinery, run by the harness itself
def test_sweep_floor_helpers():
    """`benchmarks._sweeps`: the evaluation count of an FSAL method, the step statistics, the vector-field
    floor and the diffrax peer on the class-symmetric flow (4 members), whose finals equal flows' solves."""
    from benchmarks import _sweeps
    from flows import solve
    from flows.scan_snap.flow import symmetric_vector_field

    np.testing.assert_array_equal(_sweeps.evaluations([10, 20]), [63.0, 123.0])
    st = _sweeps.member_steps([10, 20, 30, 40])
    assert st == {"min": 10, "median": 25.0, "max": 40, "sum": 100, "max_over_mean": 1.6}
    n = 4
    eY, eZ = b.sweep_pairs(n)
    fixed = dict(M=34.0, K=2.0, p_d=0.05, p_c=0.05, D=10.0, C=10.0)
    bargs = {k: np.full(n, v) for k, v in fixed.items()} | {"eta_Y": eY, "eta_Z": eZ}
    floor_s, eval_s = _sweeps.field_floor(symmetric_vector_field, np.zeros((n, 3)), bargs, 0, [63.0] * n, 1)
    assert eval_s > 0 and floor_s == pytest.approx(63.0 * eval_s)
    ts = np.array([0.0, 0.5, 1.0])
    peer = _sweeps.diffrax_vmap(symmetric_vector_field, np.zeros(3), bargs, ts, rtol=1e-8, atol=1e-10,
                                batch_y0=False, batch_args=True, repeats=1)  # fmt: skip
    assert peer["run_s"] > 0 and peer["final"].shape == (n, 3) and np.all(peer["num_steps"] >= 1)
    for i in range(n):
        one = solve(symmetric_vector_field, np.zeros(3), t1=1.0, ts=ts, args={k: v[i] for k, v in bargs.items()},
                    rtol=1e-8, atol=1e-10)  # fmt: skip
        np.testing.assert_allclose(peer["final"][i], np.asarray(one.ys[-1]), rtol=1e-12, atol=1e-14)


def test_fig6_floor_quick_sizes():
    """The Fig. 6 floor at the example's quick sizes: per K its products' FLOPs (3 x 2 B M^2 per member and
    step) and positive times, each part the fastest of its known ways (the product under both sweep options,
    the draw by JAX's and the fused threefry under both); the total is their sum."""
    fl = b.fig6_floor(quick=True, repeats=1)
    assert set(fl["parts"]) == {"K2", "K6"}
    for p in fl["parts"].values():
        assert p["dot_flops"] == 3 * 2 * 128 * p["M"] ** 2 * 12 * 100 and p["dots_s"] > 0 and p["draws_s"] > 0
        assert len(p["product_s"]) == 2 and p["dots_s"] == pytest.approx(3 * 100 * min(p["product_s"].values()))
        assert len(p["draw_s"]) == 4 and p["draws_s"] == pytest.approx(100 * min(p["draw_s"].values()))
    assert fl["floor_s"] == pytest.approx(sum(p["dots_s"] + p["draws_s"] for p in fl["parts"].values()))


def test_helpers_and_child_programs():
    np.testing.assert_allclose(b.fig4_times(30), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 300.0], rtol=1e-12)
    assert b.scaling_classes(64).vocab_size == 64
    with pytest.raises(ValueError, match="M"):
        b.scaling_classes(15)
    eY, eZ = b.sweep_pairs(9)
    assert eY.shape == eZ.shape == (9,) and eY.min() == 1.0 and eZ.max() == 2.0
    with pytest.raises(ValueError, match="n"):
        b.sweep_pairs(10)
    # the fresh-process programs are valid Python once formatted
    for cached in (False, True):
        compile(b._FLOW_CHILD.format(ts=[0.0, 1.0], path="z.npy", cached=cached), "flow_child", "exec")
    compile(b._SGD_CHILD.format(steps=3, momentum=0.9, path="z.npy"), "sgd_child", "exec")
    compile(b._COMPILE_CHILD.format(), "compile_child", "exec")
    compile(b._FIG6_CHILD.format(argv=["--quick"]), "fig6_child", "exec")


@pytest.mark.slow  # two programs compiled; the benchmark records the same difference as bare_diffrax_error
def test_adam_ode_peer_solves_the_same_limit():
    """The Adam ODE's best peer (a bare diffeqsolve of `driver.limit_problem`'s limit) integrates what
    `solve_flow(..., optimizer="adam")` integrates: the same Z at t = 2 to the tolerances."""
    from flows.scan_snap import solve_flow

    classes = b.syn_small()
    options = {"c1": b.ADAM_C1, "c2": b.ADAM_C2, "eps": 1e-8}
    ts = np.linspace(0.0, 2.0, 5)
    tr = solve_flow(classes, 1.0, 1.0, ts, optimizer="adam", optim_args=options, rtol=1e-9, atol=1e-11)
    seconds, Z = b._adam_bare_diffrax_s(classes, options, ts, repeats=1)
    flows_Z = np.asarray(tr.ys["Z"][-1])[list(classes.query_tokens)]
    assert seconds > 0 and np.max(np.abs(flows_Z)) > 1e-3  # the flow moved Z
    np.testing.assert_allclose(Z, flows_Z, rtol=0, atol=1e-8)


@pytest.mark.slow
def test_decoder_peer_solves_the_same_flow():
    """The decoder's best peer (`bench_decoder.bare_diffrax`: a bare Dopri8 diffeqsolve of the decoder field)
    gives `solve_decoder`'s h at the save times to the tolerances, and its timing runs."""
    from benchmarks import bench_decoder as bd
    from flows.scan_snap import solve_decoder

    ts = np.concatenate([[0.0], np.geomspace(1e-3, 10.0, 9)])
    fn, args = bd.bare_diffrax(100.0, 1.0, ts, 1e-10, 1e-30)
    ref = np.asarray(solve_decoder(100.0, 1.0, ts, rtol=1e-10, atol=1e-30).ys)
    np.testing.assert_allclose(np.asarray(fn(args)), ref, rtol=1e-8, atol=1e-14)
    assert ref[-1] > 0 and bd.bare_diffrax_run_s(100.0, 1.0, ts, 1e-10, 1e-30, repeats=1) > 0
