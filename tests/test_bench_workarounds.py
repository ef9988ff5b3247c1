"""benchmarks/bench_workarounds.py: the children switch one workaround each, the verdict rule, and one row measured
end to end at a tiny size through `python -m benchmarks` (no timing asserted)."""

import json

import pytest

from benchmarks import _harness, bench_workarounds
from benchmarks.__main__ import available, main
from flows import _xla


def test_verdict_rule():
    assert bench_workarounds.verdict(1.5, (1.2, 1.8)) == "pays"
    assert bench_workarounds.verdict(1.05, (1.01, 1.1)) == "small"
    assert bench_workarounds.verdict(1.3, (0.9, 1.6)) == "noise"  # one pair slower: within the noise
    assert bench_workarounds.verdict(0.8, (0.7, 0.95)) == "costs"


def test_every_config_switch_is_measured_and_children_differ_in_the_switch_only():
    measured = {w.switch for w in bench_workarounds.workarounds("tiny")}
    switches = {name for name in _xla.Config.__dataclass_fields__ if name != "xla_defaults"}
    assert measured == switches | {"attention_vjp"}
    for w in bench_workarounds.workarounds("tiny"):
        on, off = w.child(True), w.child(False)
        assert on != off and w.call in on and w.bench.startswith(f"workarounds/{w.switch}(")
        if w.switch == "attention_vjp":
            assert "if True:" in off and "if False:" in on and "{}.items()" in on
        else:
            assert f"{{'{w.switch}': True}}" in on and f"{{'{w.switch}': False}}" in off
    assert "workarounds" in available()


@pytest.mark.slow
def test_tiny_run_writes_harness_rows(tmp_path, monkeypatch):
    """One workaround at the tiny size, one pair of fresh processes, through the module's main and the harness."""
    real_run = bench_workarounds.run
    monkeypatch.setattr(
        bench_workarounds, "run", lambda quick: real_run(quick, size="tiny", only=("one_shot_level0",), repeats=1)
    )
    out = tmp_path / "bench.jsonl"
    assert main(["--quick", "--only", "workarounds", "--out", str(out), "--results", str(tmp_path)]) == 0
    (r,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(_harness._ROW_KEYS) <= set(r) and {"machine", "versions"} <= set(r) and r["machine"]["date"]
    assert r["bench"] == "workarounds/one_shot_level0(mean_field data)" and r["repeats"] == 1
    assert len(r["on_s"]) == len(r["off_s"]) == len(r["pair_ratios"]) == 1 and min(r["on_s"] + r["off_s"]) > 0
    assert r["ratio"]["value"] == pytest.approx(r["off_s"][0] / r["on_s"][0])
    assert r["ratio"]["target"] == bench_workarounds.TARGET and r["spread"] == [r["pair_ratios"][0]] * 2
    assert r["verdict"] == bench_workarounds.verdict(r["ratio"]["value"], tuple(r["spread"]))
    assert json.loads((tmp_path / "workarounds.json").read_text())[0]["bench"] == r["bench"]
