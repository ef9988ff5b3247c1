"""bench_long_horizon: the fixed solvers' step budget and the choice of the best peer (fast), and the rows of a
tiny run (slow; timings are never asserted, the ratios are measured by `python -m benchmarks.bench_long_horizon`)."""

import pytest

from benchmarks import bench_long_horizon as lh
from flows._solve import horizon_steps


def test_fixed_budget_is_a_multiple_of_auto_capped_by_the_default():
    assert lh._fixed_budget(1e7, 1_000) == lh.FIXED_BUDGET * 1_000
    assert lh._fixed_budget(10.0, 10**9) == horizon_steps(0.0, 10.0)
    assert lh._fixed_budget(10.0, 0) == 1


def _run(status, steps, run_s, stopped_early=False):
    return {"status": status, "steps": steps, "run_s_min": run_s, "stopped_early": stopped_early}


def test_best_peer_prefers_solvers_that_reached_t1():
    runs = {
        "auto": _run("ok", 10, 1.0),
        "tsit5": _run("max_steps", 40, 0.5, stopped_early=True),
        "kvaerno5": _run("ok", 30, 2.0),
    }
    # tsit5 is faster but stopped at its budget: the best fixed solver that reached t1 is kvaerno5
    assert lh._best(runs, "run_s_min") == ("kvaerno5", True)
    assert lh._best(runs, "steps") == ("kvaerno5", True)
    runs["kvaerno5"].update(status="max_steps", stopped_early=True)
    # none reached t1: the least of the runs stopped early, flagged as a lower bound
    assert lh._best(runs, "run_s_min") == ("tsit5", False)
    assert lh._best(runs, "steps") == ("kvaerno5", False)
    # a solver that failed at its default budget is no peer
    runs["tsit5"]["stopped_early"] = False
    assert lh._best(runs, "run_s_min") == ("kvaerno5", False)
    runs["kvaerno5"]["stopped_early"] = False
    assert lh._best(runs, "steps") == (None, False)
    assert lh._best({"auto": runs["auto"]}, "steps") == (None, False)


class _Stub:
    """A fixed solver's solve: `rate` seconds per step, `needed` steps to reach t1."""

    def __init__(self, needed, rate):
        self.needed, self.rate, self.budgets = needed, rate, []

    def measure(self, solve, t1, solver, repeats, max_steps=None):
        self.budgets.append(max_steps)
        steps = min(self.needed, max_steps)
        return {"status": "ok" if steps == self.needed else "max_steps", "steps": steps, "run_s_min": steps * self.rate}


def test_a_fixed_solver_stopped_before_1_5x_autos_time_gets_a_larger_budget(monkeypatch):
    auto = {"steps": 100, "run_s_min": 1.0}
    # cheap steps: 4 x 100 steps take 0.04 s, so the budget is raised to run >= 1.5 s (1.2 x 1.5 / 1e-4)
    stub = _Stub(needed=10**9, rate=1e-4)
    monkeypatch.setattr(lh, "measure", stub.measure)
    r = lh._fixed_run(None, 1e7, "tsit5", 1, auto)
    assert stub.budgets == [400, 18_000] and r["run_s_min"] >= 1.5 and r["stopped_early"]
    # dear steps: 400 steps take 4 s > 1.5 s, no second run
    stub = _Stub(needed=10**9, rate=1e-2)
    monkeypatch.setattr(lh, "measure", stub.measure)
    assert lh._fixed_run(None, 1e7, "kvaerno5", 1, auto)["stopped_early"] and stub.budgets == [400]
    # never above the default budget: stopped there it failed at default settings
    stub = _Stub(needed=10**9, rate=1e-9)
    monkeypatch.setattr(lh, "measure", stub.measure)
    r = lh._fixed_run(None, 10.0, "tsit5", 1, auto)
    assert stub.budgets[-1] == horizon_steps(0.0, 10.0) and not r["stopped_early"]


@pytest.mark.slow
def test_tiny_run_rows():
    rows = lh.flow_rows("scan_snap_reduced", 100.0, 10.0, repeats=1)
    by = {r["bench"]: r for r in rows}
    auto = by["long_horizon/scan_snap_reduced/auto"]
    assert auto["status"] == "ok" and auto["task"] == "long run" and auto["floor"]["kind"] == "peer"
    assert auto["t_final"] == 100.0
    for s in ("tsit5", "kvaerno5"):
        r = by[f"long_horizon/scan_snap_reduced/{s}"]
        assert r["status"] == "ok" or r["stopped_early"] or r["max_steps"] == horizon_steps(0.0, 100.0)
    steps = by["long_horizon/scan_snap_reduced/auto steps"]
    assert "auto steps" in steps["ratio"]["of"]
    # every row carries its best peer; the steps rows count steps
    assert steps["floor"]["unit"] == "steps" and steps["floor"]["measured_s"] == auto["steps"]
    assert steps["floor"]["value"] == pytest.approx(steps["ratio"]["value"])
    short = by["short_horizon/scan_snap_reduced/auto steps"]
    assert short["status"] == "ok" and short["tsit5"]["status"] == "ok"
    assert short["floor"] == {**short["floor"], "kind": "peer", "unit": "steps", "floor_s": short["tsit5"]["steps"]}
    assert all(r.get("floor") for r in rows if r.get("ratio")), [r["bench"] for r in rows if not r.get("floor")]
