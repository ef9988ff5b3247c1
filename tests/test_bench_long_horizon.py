"""bench_long_horizon: the fixed solvers' step budget and the choice of the best peer (fast), and the rows of a
tiny run (slow; timings are never asserted, the ratios are measured by `python -m benchmarks.bench_long_horizon`)."""

import pytest

from benchmarks import bench_long_horizon as lh
from flows._solve import horizon_steps


def test_fixed_budget_is_a_multiple_of_auto_capped_by_the_default():
    assert lh._fixed_budget(1e7, 1_000) == lh.FIXED_BUDGET * 1_000
    assert lh._fixed_budget(10.0, 10**9) == horizon_steps(0.0, 10.0)
    assert lh._fixed_budget(10.0, 0) == 1


def _run(status, steps, run_s):
    return {"status": status, "steps": steps, "run_s_min": run_s}


def test_best_peer_prefers_solvers_that_reached_t1():
    runs = {"auto": _run("ok", 10, 1.0), "tsit5": _run("max_steps", 40, 0.5), "kvaerno5": _run("ok", 30, 2.0)}
    # tsit5 is faster but stopped at its budget: the best fixed solver that reached t1 is kvaerno5
    assert lh._best(runs, "run_s_min") == ("kvaerno5", True)
    assert lh._best(runs, "steps") == ("kvaerno5", True)
    runs["kvaerno5"]["status"] = "max_steps"
    # none reached t1: the least of the stopped runs, flagged as a lower bound
    assert lh._best(runs, "run_s_min") == ("tsit5", False)
    assert lh._best(runs, "steps") == ("kvaerno5", False)
    assert lh._best({"auto": runs["auto"]}, "steps") == (None, False)


@pytest.mark.slow
def test_tiny_run_rows(monkeypatch):
    # a budget of one auto step's worth stops both fixed solvers: the peer is then a lower bound
    monkeypatch.setattr(lh, "FIXED_BUDGET", 0.5)
    rows = lh.flow_rows("scan_snap_reduced", 100.0, 10.0, repeats=1)
    by = {r["bench"]: r for r in rows}
    auto = by["long_horizon/scan_snap_reduced/auto"]
    assert auto["status"] == "ok" and auto["task"] == "long run"
    for s in ("tsit5", "kvaerno5"):
        r = by[f"long_horizon/scan_snap_reduced/{s}"]
        assert r["status"] == "max_steps" and r["max_steps"] == max(1, auto["steps"] // 2)
    assert auto["peer_reached_t1"] is False and auto["floor"]["kind"] == "peer"
    assert "lower bound" in by["long_horizon/scan_snap_reduced/auto steps"]["ratio"]["of"]
    short = by["short_horizon/scan_snap_reduced/auto steps"]
    assert short["status"] == "ok" and short["tsit5"]["status"] == "ok"
