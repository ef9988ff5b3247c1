"""The benchmark harness runs and writes well-formed JSON lines (timings are not asserted here)."""

import json

from benchmarks.__main__ import main


def test_benchmarks_quick(tmp_path, capsys):
    out = tmp_path / "bench.jsonl"
    assert main(["--quick", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    names = {r["bench"] for r in rows}
    assert {"decoder_h/flows.solve(dopri8)", "decoder_h/scipy.solve_ivp(DOP853)",
            "decoder_h/sweep_vmap"} <= names
    for r in rows:
        assert {"bench", "params", "compile_s", "run_s_min", "repeats", "num_steps", "error_vs_ref"} <= set(r)
        assert r["run_s_min"] > 0
    fit = next(r for r in rows if r["bench"] == "mean_field/gd_scaling_fit")
    assert len(fit["params"]["P"]) == 3 and fit["exponent_time_per_step"] > 0
    flows_row = next(r for r in rows if r["bench"] == "decoder_h/flows.solve(dopri8)")
    assert flows_row["error_vs_ref"] < 1e-6
