"""The benchmark harness: row format, ratios, tables, results files and fresh-process timing.

Timings are never asserted (targets are measured by `python -m benchmarks`, not by timed tests). The whole
quick benchmark run is a slow check; the default suite runs the harness on a tiny benchmark.
"""

import json

import pytest

from benchmarks import _harness
from benchmarks.__main__ import available, main


def test_row_ratio_and_table(tmp_path):
    r = _harness.row(
        "x/flow",
        params={"n": 3},
        compile_s=0.5,
        run_s_min=0.01,
        repeats=2,
        steps=10,
        error=1e-9,
        ratio=_harness.ratio(12.0, "GD / flow", target=10),
    )
    assert r["ratio"] == {"value": 12.0, "of": "GD / flow", "target": 10, "met": True}
    assert _harness.ratio(1.5, "a / b", target=2)["met"] is False
    assert _harness.ratio(1.5, "a / b")["met"] is None
    out = tmp_path / "rows.jsonl"
    written = _harness.write_rows([r], out)
    assert {"machine", "versions", "compile_cache"} <= set(written[0])
    assert written[0]["machine"]["cores"] >= 1 and written[0]["machine"]["date"]
    assert json.loads(out.read_text().splitlines()[0])["bench"] == "x/flow"
    path = _harness.write_results("x", written, tmp_path / "results")
    assert json.loads(path.read_text())[0]["ratio"]["value"] == 12.0
    line = _harness.format_row(written[0])
    assert "12x (GD / flow)" in line and "met" in line
    with pytest.raises(ValueError, match="lacks"):
        _harness.write_rows([{"bench": "bad"}], out)


def test_fresh_process_reports_json():
    res = _harness.fresh_process(
        "import json, os; print('noise'); print(json.dumps({'cache_off': os.environ['FLOWS_NO_COMPILE_CACHE']}))"
    )
    assert res["cache_off"] == "1" and res["wall_s"] > 0
    with pytest.raises(RuntimeError, match="failed"):
        _harness.fresh_process("raise SystemExit(3)")


def test_numpy_kernel_env_drops_openblas_overrides():
    env = _harness.numpy_kernel_env({"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1", "KEEP": "1"})
    assert env == {"KEEP": "1"}


def test_only_rejects_unknown(capsys):
    assert "decoder" in available()
    with pytest.raises(SystemExit):
        main(["--only", "no_such_bench"])


def _tiny_decoder_run(quick):
    """A one-row stand-in for bench_decoder.run: scipy's DOP853 on the decoder h-flow against the closed form
    (no flows.solve compile; the real module's three compiles and repeats run in test_decoder_bench_runs)."""
    import numpy as np
    from scipy.integrate import solve_ivp

    from flows.scan_snap import theory

    M, eta = 1000.0, 1.0
    ts = np.concatenate([[0.0], np.geomspace(1e-3, 1e4, 20)])
    ref = np.asarray(theory.h(ts, M, eta))
    sol = solve_ivp(
        lambda t, y: eta / ((M - 1) + np.exp(M * y)),
        (0.0, ts[-1]),
        [0.0],
        method="DOP853",
        t_eval=ts,
        rtol=1e-10,
        atol=1e-30,
    )
    err = float(np.max(np.abs(sol.y[0][1:] - ref[1:]) / ref[1:]))
    return [
        _harness.row(
            "decoder_h/tiny",
            params={"M": M, "eta_Y": eta, "quick": quick},
            compile_s=0.0,
            run_s_min=1e-3,
            repeats=1,
            steps=int(sol.nfev),
            error=err,
        )
    ]


def test_harness_runs_a_bench_module_end_to_end(tmp_path, monkeypatch):
    """`python -m benchmarks --only decoder` through the module's own main and bench_main (argument parsing,
    rows written, the summary table), with the module's run replaced by a tiny one."""
    from benchmarks import bench_decoder

    monkeypatch.setattr(bench_decoder, "run", _tiny_decoder_run)
    out = tmp_path / "bench.jsonl"
    assert main(["--quick", "--only", "decoder", "--out", str(out), "--no-compile-cache"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["bench"] for r in rows] == ["decoder_h/tiny"] and rows[0]["params"]["quick"] is True
    assert {"machine", "versions", "compile_cache"} <= set(rows[0]) and rows[0]["error"] < 1e-6


@pytest.mark.slow
def test_decoder_bench_runs(tmp_path):
    """The decoder benchmark itself at quick size (three solve compiles and timing repeats, ~30 s)."""
    out = tmp_path / "bench.jsonl"
    assert main(["--quick", "--only", "decoder", "--out", str(out), "--no-compile-cache"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    flows_row = next(r for r in rows if r["bench"] == "decoder_h/flows.solve(dopri8)")
    assert flows_row["error"] < 1e-6 and flows_row["run_s_min"] > 0


@pytest.mark.slow
def test_all_benchmarks_quick(tmp_path):
    out = tmp_path / "bench.jsonl"
    assert main(["--quick", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for r in rows:
        assert set(_harness._ROW_KEYS) <= set(r)


def test_scaling_plot_and_summary_from_rows(tmp_path):
    from benchmarks import plot_scaling, summary

    rows = [
        _harness.row(
            f"sys/scaling(d={d})", params={"d": d}, compile_s=0.1, run_s_min=0.01 * d, s_per_unit_time=1e-3 * d**1.5
        )
        for d in (8, 16, 32)
    ]
    rows.append(
        _harness.row("sys/scaling_fit", params={}, compile_s=None, run_s_min=None, exponent=1.5, exponent_ci=[1.4, 1.6])
    )
    rows.append(
        _harness.row(
            "sys/first_call(paper)",
            params={},
            compile_s=1.0,
            run_s_min=2.0,
            ratio=_harness.ratio(4.0, "GD / flow", target=10),
        )
    )
    series = plot_scaling.scaling_series(rows)
    ((key, s),) = series.items()
    assert key == ("sys", "scaling") and s["x"] == "d" and len(s["points"]) == 3
    assert s["fit"]["exponent"] == 1.5
    path = tmp_path / "results.json"
    path.write_text(json.dumps(rows))
    png = plot_scaling.plot(plot_scaling.read_rows([path]), tmp_path / "scaling.png")
    assert png.stat().st_size > 1000
    text = summary.table(rows)
    assert "### First call" in text
    assert "| `sys/first_call(paper)` | 2 s | 4x (GD / flow) | not measured | >= 10x | **missed** |" in text


def test_floor_restate_and_summary_sections():
    """A ratio target the floor does not allow moves to the floor (within 1.5x of it), with the reason; the
    summary groups the rows by what a user does, in the order of TASKS, and counts the verdicts."""
    from benchmarks import summary

    fl = _harness.versus(3.0, 2.0, "bare diffrax")
    assert fl["value"] == 2.0 / 3.0 and fl["kind"] == "floor" and fl["target"] is None and fl["met"] is None
    assert _harness.versus(1.0, 0.5, "x", kind="peer", target=0.6)["met"] is False
    with pytest.raises(ValueError, match="kind"):
        _harness.versus(1.0, 1.0, "x", kind="budget")
    # GD / flow >= 10 wanted, but GD / floor = 6: restated
    rat, moved = _harness.restate(_harness.ratio(4.0, "GD / flow", target=10), 6.0, fl)
    assert rat["target"] is None and rat["best_possible"] == 6.0 and "above the 6x" in rat["restated"]
    assert moved["target"] == _harness.FLOOR_TARGET and moved["met"] is True  # 3 s within 1.5x of 2 s
    # a target the floor allows stays where it was
    kept, same = _harness.restate(_harness.ratio(4.0, "GD / flow", target=2), 6.0, fl)
    assert kept["target"] == 2 and same is fl
    with pytest.raises(ValueError, match="task"):
        _harness.row("x", params={}, compile_s=None, run_s_min=None, task="lunch")
    rows = [
        _harness.row("a/sweep(n=4)", params={}, compile_s=0.0, run_s_min=3.0, task="sweep", ratio=rat, floor=moved),
        _harness.row(
            "a/first_call(x)", params={}, compile_s=0.0, run_s_min=1.0, floor=_harness.versus(1.0, 0.9, "bare")
        ),
        _harness.row("a/scaling(d=4)", params={}, compile_s=0.0, run_s_min=1.0),  # no ratio, no floor: not shown
    ]
    text = summary.table(rows)
    assert text.index("### First call") < text.index("### Sweep") and "scaling" not in text
    assert "1.5x its floor (2 s: bare diffrax)" in text and "<= 1.5x the floor (note 1)" in text
    assert "1. `a/sweep(n=4)`: target 10x is above" in text
    assert "1 targets met, 0 missed; 0 of 2 measures without a floor or peer measured yet." in text
    assert summary.task_of({"bench": "scan_snap/first_call_ratio(steps=30)"}) == "network beside its limit"
    assert summary.verdict(rows[1]) is None and summary.verdict(rows[0]) is True
    assert summary.TASKS == _harness.TASKS
