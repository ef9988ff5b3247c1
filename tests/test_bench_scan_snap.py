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


def test_sweep_rows_members_agree():
    rows = b.sweep_symmetric(4, ts=(0.0, 1.0), repeats=1)
    assert [r["bench"] for r in rows] == [
        "scan_snap/sweep_vmap_symmetric(n=4)",
        "scan_snap/sweep_python_loop_symmetric(n=4)",
    ]
    for r in rows:
        _well_formed(r)
        assert r["error"] <= 1e-12
    assert rows[0]["ratio"]["target"] == 50


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
    compile(b._FLOW_CHILD.format(ts=[0.0, 1.0], path="z.npy"), "flow_child", "exec")
    compile(b._SGD_CHILD.format(steps=3, momentum=0.9, path="z.npy"), "sgd_child", "exec")
    compile(b._COMPILE_CHILD.format(), "compile_child", "exec")
    compile(b._FIG6_CHILD.format(argv=["--quick"]), "fig6_child", "exec")
