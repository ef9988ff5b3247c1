"""Run records: atomic writes, round trip, completeness marker, validation, JSON conversion."""

import json
import math

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest

from flows.experiments import findings, records
from flows.experiments.plotting import annotate_vline, colors, figure, log_time_axis


def _no_temp_files(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]


def test_atomic_writes_leave_no_temp_files(tmp_path):
    records.atomic_write_text(tmp_path / "a.txt", "hello\n")
    records.atomic_write_json(tmp_path / "b.json", {"x": 1.5, "y": [1, 2]})
    records.atomic_savez(tmp_path / "c.npz", z=np.arange(3))
    records.atomic_write_json(tmp_path / "b.json", {"x": 2})  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "c.npz"]
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 2}
    with np.load(tmp_path / "c.npz") as data:
        np.testing.assert_array_equal(data["z"], np.arange(3))


def test_failed_atomic_write_keeps_old_file_and_no_temp(tmp_path):
    path = tmp_path / "b.json"
    records.atomic_write_json(path, {"ok": True})
    with pytest.raises(TypeError):
        records.atomic_write_json(path, {"bad": object()})
    with pytest.raises(ValueError, match="arrays"):
        records.atomic_savez(tmp_path / "c.npz", bad=np.array([object()]))
    assert json.loads(path.read_text()) == {"ok": True}
    assert _no_temp_files(tmp_path) == []


def test_numpy_jax_scalars_and_nonfinite_serialise(tmp_path):
    obj = {
        "np_f": np.float32(1.5),
        "np_i": np.int64(3),
        "np_b": np.bool_(True),
        "jax_f": jnp.asarray(2.5),
        "jax_arr": jnp.arange(3),
        "np_arr": np.eye(2),
        "tuple": (1, 2),
        "nan": float("nan"),
        "inf": np.inf,
        "ninf": -np.inf,
        4: "int key",
    }
    records.atomic_write_json(tmp_path / "x.json", obj)
    text = (tmp_path / "x.json").read_text()
    back = json.loads(text)  # strict JSON: no NaN/Infinity tokens
    assert "NaN" not in text and "Infinity" not in text
    assert back["np_f"] == 1.5 and back["np_i"] == 3 and back["np_b"] is True
    assert back["jax_f"] == 2.5 and back["jax_arr"] == [0, 1, 2]
    assert back["np_arr"] == [[1.0, 0.0], [0.0, 1.0]] and back["tuple"] == [1, 2]
    assert (back["nan"], back["inf"], back["ninf"]) == ("nan", "inf", "-inf")
    assert back["4"] == "int key"


def _make_record(out, **kw):
    rec = records.RunRecord(out, name="demo", config={"n": 3, "ts": (0.1, 1.0), "arr": np.arange(2)}, seed=7, **kw)
    rec.add_metric("loss", np.float64(0.25))
    rec.add_metric("steps", jnp.asarray(10))
    rec.add_prediction("slope", measured=-1.01, expected="-1 +/- 0.05", holds=True, tol=0.05)
    rec.add_prediction("gap", measured=jnp.asarray(0.3), expected="< 0.1", holds=jnp.asarray(False))
    rec.add_prediction("blowup", measured=float("nan"), expected="finite", holds=False)
    rec.add_series(t=np.linspace(0, 1, 5), y=jnp.ones((5, 2)))
    rec.add_timing("solve", 1.25)

    class Traj:
        status, message, num_steps, compile_s, run_s = 0, "ok", np.int64(42), 0.5, 0.1

    rec.add_solver_stats("main", Traj())
    fig, ax = figure()
    ax.plot([1, 2, 3], [1, 4, 9])
    log_time_axis(ax)
    annotate_vline(ax, 2.0, "t*")
    path = rec.save_figure(fig, "curve.png")
    assert path.endswith("curve.png")
    return rec


def test_run_record_round_trip(tmp_path):
    out = tmp_path / "nested" / "rec"
    rec = _make_record(out, quick=True)
    assert not records.is_complete(out)
    assert set(rec.predictions) == {"slope", "gap", "blowup"} and not rec.all_hold
    rec.finish()
    assert records.is_complete(out)
    assert _no_temp_files(out) == []
    loaded = records.load_record(out)
    m = loaded["metrics"]
    assert m["loss"] == 0.25 and m["steps"] == 10
    assert m["slope"] == {"measured": -1.01, "expected": "-1 +/- 0.05", "holds": True, "verdict": "holds", "tol": 0.05}
    assert m["gap"]["holds"] is False and m["gap"]["measured"] == pytest.approx(0.3)
    assert math.isnan(m["blowup"]["measured"])
    assert json.loads((out / "metrics.json").read_text())["blowup"]["measured"] == "nan"
    assert set(loaded["series"]) == {"t", "y"} and loaded["series"]["y"].shape == (5, 2)
    assert loaded["figures"] == ["curve.png"] and (out / "curve.png").stat().st_size > 0
    meta = loaded["meta"]
    assert meta["complete"] is True and meta["name"] == "demo" and meta["seed"] == 7
    assert meta["quick"] is True
    assert meta["config"] == {"n": 3, "ts": [0.1, 1.0], "arr": [0, 1]}
    assert meta["solver"]["main"]["num_steps"] == 42 and meta["timings"]["solve"] == 1.25
    for key in ("python", "jax", "numpy", "jax_backend", "jax_enable_x64", "git_sha"):
        assert key in meta["versions"]
    assert meta["versions"]["jax_enable_x64"] is True
    assert meta["wall_s"] >= 0 and meta["started"] <= meta["finished"]


def test_context_manager_exception_leaves_record_incomplete(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with records.RunRecord(tmp_path, name="x", config={}) as rec:
            rec.add_metric("a", 1)
            raise RuntimeError("boom")
    assert not records.is_complete(tmp_path)
    assert not (tmp_path / "meta.json").exists()
    with records.RunRecord(tmp_path, name="x", config={}) as rec:
        rec.add_metric("a", 1)
    assert records.is_complete(tmp_path)
    assert records.load_record(tmp_path)["series"] == {}
    assert not (tmp_path / "series.npz").exists()


def test_reopening_complete_record_makes_it_incomplete(tmp_path):
    _make_record(tmp_path).finish()
    assert records.is_complete(tmp_path)
    rec = records.RunRecord(tmp_path, name="demo", config={})
    assert not records.is_complete(tmp_path)
    assert not (tmp_path / "meta.json").exists()
    assert not (tmp_path / "curve.png").exists()  # stale outputs of the old run are gone
    rec.finish()
    assert records.is_complete(tmp_path)
    assert records.load_record(tmp_path)["figures"] == []


def test_is_complete_on_bad_meta(tmp_path):
    assert not records.is_complete(tmp_path / "missing")
    (tmp_path / "meta.json").write_text("{not json")
    assert not records.is_complete(tmp_path)
    (tmp_path / "meta.json").write_text('{"complete": "yes"}')
    assert not records.is_complete(tmp_path)


def test_validation(tmp_path):
    with pytest.raises(ValueError, match="name"):
        records.RunRecord(tmp_path, name="", config={})
    with pytest.raises(ValueError, match="config"):
        records.RunRecord(tmp_path, name="x", config={"f": object()})
    with pytest.raises(ValueError, match="seed"):
        records.RunRecord(tmp_path, name="x", config={}, seed=1.5)
    rec = records.RunRecord(tmp_path, name="x", config={})
    with pytest.raises(ValueError, match="name"):
        rec.add_metric("", 1.0)
    with pytest.raises(ValueError, match="scalar"):
        rec.add_metric("v", np.arange(9))
    with pytest.raises(ValueError, match="scalar"):
        rec.add_metric("v", [[1.0, 2.0]])
    rec.add_metric("ci", np.array([-1.1, -0.9]))  # a short flat list: an interval
    assert rec._metrics["ci"] == [-1.1, -0.9]
    with pytest.raises(ValueError, match="expected"):
        rec.add_prediction("p", 1.0, expected=1.0, holds=True)
    with pytest.raises(ValueError, match="holds"):
        rec.add_prediction("p", 1.0, expected="1", holds=np.array([True, False]))
    with pytest.raises(ValueError, match="tested_at"):
        rec.add_prediction("p", 1.0, expected="1", holds=None)
    with pytest.raises(ValueError, match="seconds"):
        rec.add_timing("t", -1.0)
    fig = figure()[0]
    with pytest.raises(ValueError, match="filename"):
        rec.save_figure(fig, "../x.png")
    plt.close(fig)
    rec.add_metric("m", 1)
    with pytest.raises(ValueError, match="already used"):
        rec.add_prediction("m", 1.0, expected="1", holds=True)


def test_an_untested_prediction_carries_no_second_verdict(tmp_path):
    """A prediction has one verdict: an extra field beside it that reads as one (``holds_at_this_size``) or that
    would overwrite a field of the record is refused."""
    rec = records.RunRecord(tmp_path / "r", name="r", config={})
    for extra in ({"holds_at_this_size": True}, {"holds_here": False}, {"verdict": "holds"}, {"expected_": 1}):
        if "expected_" in extra:
            rec.add_prediction("fine", 1.0, "1", None, tested_at="the full run", **extra)
            continue
        with pytest.raises(ValueError, match="one verdict"):
            rec.add_prediction("p", 1.0, "1", None, tested_at="the full run", **extra)
    assert "p" not in rec.predictions and rec.predictions["fine"]["expected_"] == 1


def test_colors():
    assert len(colors(3)) == 3 and len(set(colors(12))) == 12
    with pytest.raises(ValueError, match="n"):
        colors(-1)


def test_four_verdicts(tmp_path):
    """holds / fails / known finding / not tested at this size: stored, counted and logged; untested ones do
    not fail a record; a known finding's marker survives the round trip through metrics.json."""
    finding = findings.known("scan_snap_fig4", "etaY1_etaZ1_distinct_logits_rise_network_fraction")
    rec = records.RunRecord(tmp_path / "r", name="r", config={})
    rec.add_prediction("a", 1.0, expected="1", holds=True)
    rec.add_prediction("c", 0.3, expected="slope -1", holds=None, tested_at="the full run (L up to 32)")
    assert rec.all_hold
    rec.add_prediction("b", 2.0, expected="1", holds=False)
    rec.add_prediction("d", 0.9, expected="1.0", holds=False, known_finding=finding)
    assert not rec.all_hold
    preds = rec.predictions
    assert [records.verdict(preds[k]) for k in "abcd"] == ["holds", "fails", "not tested at this size", "known finding"]
    assert [records.verdict_tag(preds[k]) for k in "abcd"] == ["PASS", "FAIL", "NOT TESTED", "KNOWN FINDING"]
    assert records.verdict_counts(preds) == "1 hold, 1 fails, 1 known finding, 1 not tested at this size"
    rec.finish()
    m = records.load_record(tmp_path / "r")["metrics"]
    assert m["c"]["holds"] is None and m["c"]["tested_at"] == "the full run (L up to 32)"
    assert m["c"]["verdict"] == "not tested at this size"
    assert m["d"]["known_finding"] == finding.anchor and m["d"]["verdict"] == records.KNOWN
    assert records.verdict(m["d"]) == records.KNOWN and "known_finding" not in m["b"]
    assert m["d"]["expected"] == "1.0" + finding.note
