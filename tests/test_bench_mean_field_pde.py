"""bench_mean_field_pde: the best peer of the grid solve (a bare diffeqsolve of the library's grid field) solves
the same problem, and the rows on a tiny configuration carry it as their `floor` (timings are not asserted; the
ratios are measured by `python -m benchmarks --only mean_field_pde`)."""

import numpy as np
import pytest

from benchmarks import bench_mean_field_pde as b
from benchmarks._harness import _ROW_KEYS

# cells (12, 25) against n_ref = 50 have errors 2.1e-3 and 2.9e-4 in Q(1): eps 3e-3 is reached by the first grid,
# 1e-3 is interpolated between the two; three particle sizes (the power-law fits need three points)
TINY = dict(cells=(12, 25), n_ref=50, Ms=(4, 8, 16), draws=2, repeats=1, eps=(3e-3, 1e-3))


def test_at_error_interpolates_log_log():
    errors, times = [1e-2, 1e-4], [1.0, 100.0]
    assert b._at_error(errors, times, 1e-5) is None  # no grid reaches it
    assert b._at_error(errors, times, 2e-2) == 1.0  # the first grid reaches it
    assert b._at_error(errors, times, 1e-4) == pytest.approx(100.0)
    assert b._at_error(errors, times, 1e-3) == pytest.approx(10.0)  # halfway in log error: halfway in log time
    # the same weights whatever the series: a series proportional to the times is interpolated to the same multiple
    assert b._at_error(errors, [3.0, 300.0], 1e-3) == pytest.approx(30.0)


@pytest.mark.slow  # two programs compiled; the benchmark raises on the same difference (PEER_RTOL)
def test_peer_solves_the_same_grid_flow():
    """The peer of the grid of 25 cells: Q(1) of its final state equals `solve_grid`'s to 1e-8 relative."""
    _, sol, _ = b._grid(25)
    call, q = b.peer(25)
    peer_sol = call()
    q_flows, q_peer = float(sol.observables["Q"][-1]), q(peer_sol)
    assert abs(q_peer - q_flows) <= b.PEER_RTOL * abs(q_flows)
    assert abs(q_flows - float(sol.observables["Q"][0])) > 1e-3  # the flow moved Q
    assert int(peer_sol.stats["num_steps"]) > 0


@pytest.mark.slow  # benchmark machinery, run by the harness itself
def test_rows_on_a_tiny_configuration():
    rows = b.run(True, sizes=TINY)
    assert [r["bench"] for r in rows] == [
        "mean_field_pde/grid(n=12)",
        "mean_field_pde/grid(n=25)",
        "mean_field_pde/particles(M=4)",
        "mean_field_pde/particles(M=8)",
        "mean_field_pde/particles(M=16)",
        "mean_field_pde/equal_error(eps=0.003)",
        "mean_field_pde/equal_error(eps=0.001)",
    ]
    for r in rows:
        assert all(k in r for k in _ROW_KEYS), r["bench"]
    grids, equal = rows[:2], rows[-2:]
    for r in grids + equal:
        fl = r["floor"]
        assert fl["kind"] == "peer" and fl["source"] == "this run" and "bare diffeqsolve" in fl["of"]
        assert fl["floor_s"] == r["peer_s_per_tau"] > 0 and fl["measured_s"] == r["run_s_min"] > 0
        assert 0 <= r["peer_Q_rel_diff"] <= b.PEER_RTOL
    for r in grids:
        assert r["peer_steps"] > 0
    # eps 3e-3: the first grid's times; eps 1e-3: both interpolated between the two grids with the same weights
    assert equal[0]["floor"]["floor_s"] == grids[0]["peer_s_per_tau"]
    assert equal[0]["grid_s_per_tau"] == grids[0]["run_s_min"]
    errors = [r["error"] for r in grids]
    for key, col in (("grid_s_per_tau", "run_s_min"), ("peer_s_per_tau", "peer_s_per_tau")):
        assert equal[1][key] == pytest.approx(b._at_error(errors, [r[col] for r in grids], 1e-3))
        lo, hi = sorted(r[col] for r in grids)
        assert lo <= equal[1][key] <= hi
    assert np.isfinite(equal[1]["ratio"]["value"]) and equal[1]["peer_Q_rel_diff"] == max(
        r["peer_Q_rel_diff"] for r in grids
    )
