"""Every example runs under --quick and writes a complete record whose verdicts are the known ones (that the main
job resumes after interruption is tested in `tests/test_cli.py`).

Verdicts at quick size: every prediction holds or is not tested at this size (with the size that tests it),
except the known findings of `flows.experiments.findings.KNOWN_FINDINGS` that apply at quick size, which must still fail
and carry the record's ``known_finding`` marker (verdict "known finding") -- so a prediction that stops holding
fails here, and so does a finding that starts holding, a listed prediction recorded without its marker, and a
marker on a prediction that is not listed. The record's REPORT.md section then has no FAIL line. (The page
docs/findings.md renders the same list; `findings.markdown()` is checked below.)
"""

import importlib.util
import json
from pathlib import Path

import pytest

from flows.experiments import findings, records
from flows.experiments.report import Outcome, render_report

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def _check_fig4(out):
    trace = json.loads((out / "loss_trace.json").read_text())
    assert set(trace) == {"etaY1_etaZ1", "etaY10_etaZ1"} and len(trace["etaY1_etaZ1"]) == 30


def _check_fig6(out):
    table = json.loads((out / "entropy_table.json").read_text())
    assert {"K", "eta_Z", "ratio", "mean", "sem"} <= set(table[0])


# Files an example promises beyond the standard record.
EXTRA_CHECKS = {"scan_snap_fig4": _check_fig4, "scan_snap_fig6": _check_fig6}


def _load(stem):
    spec = importlib.util.spec_from_file_location(f"example_{stem}", ROOT / "examples" / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fig4_pairs_share_one_colour_scale_and_say_the_optimiser():
    """Network and flow heat maps of one pair are drawn on one colour scale with one colour bar, so the rows
    that agree (iteration 0 of both starts from the same zero init) have the same colours; the labels say the
    final iteration and the optimiser."""
    import numpy as np

    from flows.experiments import plotting

    fig4 = _load("scan_snap_fig4")
    fig, axes = plotting.figure(1, 2, squeeze=False)
    net = np.array([[0.2, 0.2], [0.1, 0.5]])
    flow = np.array([[0.2, 0.2], [0.15, 0.3]])  # first row equal to the network's, the rest inside its range
    labels = ["0", "30 (final)"]
    fig4.draw_pair(fig, axes[0, 0], axes[0, 1], net, flow, labels, "network", "flow")
    (im_n,), (im_f,) = axes[0, 0].get_images(), axes[0, 1].get_images()
    assert im_n.get_clim() == im_f.get_clim() == (0.1, 0.5)
    assert np.array_equal(im_n.to_rgba(net)[0], im_f.to_rgba(flow)[0])  # equal values, equal colours
    assert len(fig.axes) == 3, "one colour bar for the pair"
    assert [t.get_text() for t in axes[0, 1].get_yticklabels()] == labels
    plotting.plt.close(fig)
    assert fig4.optimizer_label("sgd", 0.9, 10.0, 1.0) == "SGD, momentum 0.9, lr_Y 10, lr_Z 1"
    assert fig4.optimizer_label("adam", 0.0, 0.5, 0.5) == "Adam, lr 0.5"


def test_distinct_token_verdict_reads_the_mean_over_runs():
    """scan_snap_fig4's distinct-token verdict: a token falls only when its mean change over the runs is below 0
    by more than FALL_SE standard errors; one run's sign does not decide it."""
    import numpy as np

    fig4 = _load("scan_snap_fig4")
    rng = np.random.default_rng(0)
    runs = 8
    rising = 0.05 + 0.01 * rng.normal(size=(runs, 18))
    noisy = 0.001 * rng.normal(size=(runs, 1))  # a rarest token: its sign changes from run to run
    noisy -= noisy.mean() + 0.0003  # mean -0.0003, far less than 4 standard errors below 0
    falling = -0.01 + 0.001 * rng.normal(size=(runs, 1))
    fraction, holds, extras = fig4.distinct_verdict(np.hstack([rising, noisy]))
    assert holds and fraction == 1.0 and extras["falling_tokens"] == [] and extras["runs"] == runs
    assert 0.0 < extras["runs_raising_every_dt_logit"] < 1.0  # single runs disagree; the mean decides
    fraction, holds, extras = fig4.distinct_verdict(np.hstack([rising, noisy, falling]))
    assert not holds and fraction == 19 / 20 and extras["falling_tokens"] == [19]
    assert extras["lowest_mean_change"][0] == pytest.approx(falling.mean())


def test_p1_ratio_of_the_means_and_its_interval():
    import numpy as np

    coocc = _load("cooccurrence_predictions")
    products = np.array([[1.0, 2.0, 1.5], [1.2, 1.8, 1.5], [0.8, 2.2, 1.5]])  # draws x widths, means 1, 2, 1.5
    r, lo, hi = coocc.p1_ratio(products)
    assert r == pytest.approx(2.0) and lo <= r <= hi and hi > 2.0
    same = np.tile([1.0, 1.5, 1.2], (5, 1))  # identical draws: no spread
    assert coocc.p1_ratio(same) == pytest.approx((1.5, 1.5, 1.5))


def _overlapping_tick_labels(fig):
    """(axes title, axis) pairs whose visible tick labels overlap once drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.get_axes():
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = [lab for lab in axis.get_ticklabels(which="both") if lab.get_visible() and lab.get_text()]
            boxes = [lab.get_window_extent(renderer) for lab in labels]
            if any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]):
                found.append((ax.get_title(), name))
    return found


@pytest.mark.parametrize("temps", [(0.0,), (0.0, 0.02)], ids=["quick", "full"])
def test_pde_figure_has_a_colour_bar_labels_and_no_empty_slot(temps):
    """mean_field_pde's figure at its quick (one temperature) and full (two) shapes, from small synthetic data:
    the density maps share one colour scale and one colour bar, every panel says what its axes are, no tick
    labels overlap, and no panel slot is left empty."""
    import numpy as np

    from flows.mean_field import grid as gd

    pde = _load("mean_field_pde")
    rng = np.random.default_rng(0)
    box = gd.Box((-2.0, -2.0), (3.0, 3.0), (6, 6))
    taus = np.array([0.0, 2.0, 6.0, 12.0])
    masses, clouds = rng.random((4, 2, 36)), rng.normal(size=(4, 2, 16, 2))
    ou = np.array([[40, 2e-2, 0.3, 0.1], [80, 5e-3, 0.3, 0.1]])
    box1 = gd.Box((-3.0,), (3.0,), (80,))
    ou_last = (box1, rng.random(80), rng.random(80))
    rows = np.array(
        [(M, g, 0.1 / np.sqrt(M), 0.12 / np.sqrt(M), 1 / np.sqrt(M)) for M in (16, 64, 256) for g in range(3)]
    )
    rows[:, 2:] *= np.exp(0.1 * rng.normal(size=(9, 3)))
    fig = pde.draw_figure(ou, ou_last, dict.fromkeys(temps, rows), (box, masses, clouds), taus)
    panels = [ax for ax in fig.get_axes() if ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.get_axes() if ax.get_label() == "<colorbar>"]
    assert len(panels) == len(taus) + 2 + len(temps) and len(bars) == 1, "one panel per slot, one colour bar"
    images = [im for ax in panels for im in ax.get_images()]
    assert len(images) == len(taus) and len({im.get_clim() for im in images}) == 1, "one colour scale"
    assert bars[0].get_ylabel(), "the colour bar says what it shows"
    assert all(ax.get_visible() and ax.axison and (ax.lines or ax.images) for ax in panels), "no empty slot"
    unlabelled = [ax.get_title() for ax in panels if not ax.get_xlabel()]
    unlabelled += [ax.get_title() for ax in panels if not ax.get_ylabel() and not ax.images]
    assert not unlabelled and panels[0].get_ylabel(), f"panels without axis labels: {unlabelled}"
    assert not _overlapping_tick_labels(fig), _overlapping_tick_labels(fig)
    pde.plotting.plt.close(fig)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_quick_writes_a_complete_record(script, tmp_path):
    spec = importlib.util.spec_from_file_location(f"example_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / script.stem
    assert module.main(["--quick", "--out", str(out)]) in (0, None)
    assert records.is_complete(out)
    rec = records.load_record(out)
    assert rec["figures"], "an example must draw at least one figure"
    assert rec["meta"]["quick"] is True
    preds = {k: v for k, v in rec["metrics"].items() if isinstance(v, dict) and "holds" in v}
    assert preds, "an example must record at least one checked prediction"
    if script.stem in EXTRA_CHECKS:
        EXTRA_CHECKS[script.stem](out)
    check_verdicts(script.stem, preds)
    check_names_agree(script.stem, rec["metrics"])
    check_report(script.stem, tmp_path, preds)


def check_names_agree(stem, metrics):
    """A metric and a prediction whose names extend one another (`weak_order`, `weak_order_sea`) read as one
    quantity in the report's table and verdict line: both scalars, they must be equal."""
    preds = {k: v["measured"] for k, v in metrics.items() if isinstance(v, dict) and "holds" in v}
    scalars = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    clashes = [
        f"prediction {p} = {measured!r}, metric {m} = {value!r}"
        for p, measured in preds.items()
        for m, value in scalars.items()
        if (m.startswith(p + "_") or p.startswith(m + "_"))
        and not (isinstance(measured, int | float) and abs(measured - value) <= 1e-12 * max(1.0, abs(value)))
    ]
    assert not clashes, f"{stem}: a metric named after a prediction shows another value: {clashes}"


def check_report(stem, out, preds):
    """REPORT.md of the record: no FAIL line, and a KNOWN FINDING line linked to its explanation for each
    known finding."""
    report = render_report([Outcome(stem, "ok", 1.0, 0)], out, ["reproduce", "--quick"], quick=True)
    assert "\n- FAIL " not in report, [line for line in report.splitlines() if line.startswith("- FAIL ")]
    for name, p in preds.items():
        if records.verdict(p) == records.KNOWN:
            line = next(line for line in report.splitlines() if line.startswith(f"- KNOWN FINDING {name}:"))
            assert (
                f"](#{p['known_finding']})" in line
                and f"\n### {findings.by_anchor(p['known_finding']).title}\n" in report
            )


def check_verdicts(stem, preds):
    """The quick verdicts of one example's predictions against the known findings (see the module doc)."""
    verdicts = {name: records.verdict(p) for name, p in preds.items()}
    listed = {name: f for (ex, name), f in findings.KNOWN_FINDINGS.items() if ex == stem}
    stale = sorted(set(listed) - set(preds))
    assert not stale, f"KNOWN_FINDINGS names predictions that {stem} no longer records: {stale}"
    markers = {name: p.get("known_finding") for name, p in preds.items()}
    wrong = {
        name: markers[name] for name in preds if markers[name] != (listed[name].anchor if name in listed else None)
    }
    assert not wrong, (
        f"{stem}: the known_finding markers do not match flows.experiments.findings "
        f"(pass known_finding="
        f"findings.known(example, name) to add_prediction): {wrong}"
    )
    unexpected = {
        name: preds[name]["measured"]
        for name, v in verdicts.items()
        if v == records.FAILS or (v == records.KNOWN and not listed[name].at_quick)
    }
    assert not unexpected, (
        f"{stem}: predictions fail at quick size that are not known findings at that size (a "
        f"regression, or a new finding for flows/experiments/findings.py): "
        f"{unexpected}"
    )
    started = {
        name: (verdicts[name], preds[name]["measured"])
        for name, f in listed.items()
        if f.at_quick and verdicts[name] != records.KNOWN
    }
    assert not started, (
        f"{stem}: known findings no longer fail at quick size; update flows/experiments/findings.py: {started}"
    )
    for name, p in preds.items():
        if verdicts[name] == records.NOT_TESTED:
            assert isinstance(p.get("tested_at"), str) and p["tested_at"], f"{stem} {name}: no tested_at"
        else:
            assert isinstance(p["holds"], bool), f"{stem} {name}: holds = {p['holds']!r}"


def test_check_names_agree():
    pred = {"measured": 6.76, "expected": "> 1", "holds": None, "tested_at": "the full run"}
    check_names_agree("ex", {"weak_order": 1.0, "weak_order_sea": {**pred, "measured": 1.0}, "other_x": 2.0})
    with pytest.raises(AssertionError, match="another value"):  # the old cooccurrence_fig1 record
        check_names_agree("ex", {"gd_over_flow_wall_time": pred, "gd_over_flow_wall_time_end_to_end": 0.44})
    with pytest.raises(AssertionError, match="another value"):
        check_names_agree("ex", {"slope": {**pred, "measured": [1.0, 2.0]}, "slope_ci_lo": 0.9})


def test_known_findings_are_listed_once_each_and_documented():
    assert "<!-- generated: findings -->" in (ROOT / findings.PAGE).read_text(encoding="utf-8")
    section = findings.markdown()
    bullets = [line for line in section.splitlines() if line.startswith("- ")]
    distinct = {id(f) for f in findings.KNOWN_FINDINGS.values()}
    assert len(bullets) == len(distinct), "one bullet per known finding, nothing else"
    stems = {p.stem for p in EXAMPLES}
    for (stem, name), f in findings.KNOWN_FINDINGS.items():
        assert stem in stems, f"KNOWN_FINDINGS names an example that does not exist: {stem}"
        assert f.title and f.claim and f.measured and f.reason and "\n" not in f.reason, (stem, name)
        assert f"`{name}`" in section, f"findings.markdown() does not name {stem} {name}"
        assert f.reason in f.note and findings.known(stem, name) is f, (stem, name)
    assert findings.known("no_such_example", "x") is None


def _verdict_preds(marked=(), **verdicts):
    """Predictions with the given verdicts (holds, fails, not tested); those named in `marked` carry the marker
    of the finding `findings.KNOWN_FINDINGS` lists for them (so a failing one is a known finding)."""
    holds = {records.HOLDS: True, records.FAILS: False, records.NOT_TESTED: None}
    preds = {}
    for name, v in verdicts.items():
        preds[name] = {"measured": 0.0, "expected": "", "holds": holds[v]}
        if v == records.NOT_TESTED:
            preds[name]["tested_at"] = "the full run"
        if name in marked:
            preds[name]["known_finding"] = findings.KNOWN_FINDINGS[("ex", name)].anchor
    return preds


def test_check_verdicts_catches_regressions_and_findings_that_start_holding(monkeypatch):
    known = {
        ("ex", "finding"): findings.Finding("title", "claim", "0.5", "why"),
        ("ex", "full_only"): findings.Finding("other title", "claim", "0.5", "why", at_quick=False),
    }
    monkeypatch.setattr(findings, "KNOWN_FINDINGS", known)
    H, F, N = records.HOLDS, records.FAILS, records.NOT_TESTED
    both = ("finding", "full_only")
    check_verdicts("ex", _verdict_preds(both, a=H, b=N, finding=F, full_only=N))
    check_verdicts("ex", _verdict_preds(both, a=H, finding=F, full_only=H))
    cases = [
        (both, dict(a=F, finding=F, full_only=N), "not known findings"),  # a prediction stopped holding
        (both, dict(a=H, finding=F, full_only=F), "not known findings"),  # fails at quick, full only
        (both, dict(a=H, finding=H, full_only=N), "no longer fail"),  # a finding started holding
        (both, dict(a=H, finding=N, full_only=N), "no longer fail"),  # ... or is no longer decided
        (both, dict(a=H, full_only=N), "no longer records"),  # a stale name
        (("full_only",), dict(a=H, finding=F, full_only=N), "markers do not match"),  # recorded without it
    ]
    for marked, verdicts, message in cases:
        with pytest.raises(AssertionError, match=message):
            check_verdicts("ex", _verdict_preds(marked, **verdicts))
    stray = _verdict_preds(both, a=F, finding=F, full_only=N)
    stray["a"]["known_finding"] = known[("ex", "finding")].anchor  # a marker on a prediction that is not listed
    with pytest.raises(AssertionError, match="markers do not match"):
        check_verdicts("ex", stray)
    untested = _verdict_preds(both, a=N, finding=F, full_only=N)
    del untested["a"]["tested_at"]
    with pytest.raises(AssertionError, match="no tested_at"):
        check_verdicts("ex", untested)


def test_check_report_shows_no_fail_for_a_known_finding(tmp_path):
    finding = findings.known("scan_snap_fig4", "etaY1_etaZ1_distinct_logits_rise_network_fraction")
    with records.RunRecord(tmp_path / "ex", name="ex", config={}, seed=0, quick=True) as rec:
        rec.add_prediction("a", 1.0, "== 1", True)
        rec.add_prediction("finding", 0.9, "== 1", False, known_finding=finding)
    check_report("ex", tmp_path, rec.predictions)
    with records.RunRecord(tmp_path / "ex", name="ex", config={}, seed=0, quick=True) as rec:
        rec.add_prediction("a", 2.0, "== 1", False)  # deliberately broken
    with pytest.raises(AssertionError, match="- FAIL a"):
        check_report("ex", tmp_path, rec.predictions)
