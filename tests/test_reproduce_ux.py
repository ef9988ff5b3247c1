"""What a user meets around the main job: missing optional packages named with the extra that installs them,
the start banner of ``python -m flows reproduce`` (count and measured time), and ``--help`` listing the
example names that ``--only`` accepts."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flows._optional import require

# --------------------------------------------------------------------------- optional packages


def _hide(monkeypatch, top: str) -> None:
    """Make the package `top` (and its submodules) unimportable for this test."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, top, None)


def test_require_returns_the_module():
    import scipy.spatial

    assert require("scipy.spatial", "ot") is scipy.spatial


@pytest.mark.parametrize(
    "module, top, dist",
    [("ot", "ot", "POT"), ("ott.tools.sinkhorn_divergence", "ott", "ott-jax"), ("torch", "torch", "torch")],
)
def test_require_names_the_extra_when_missing(monkeypatch, module, top, dist):
    _hide(monkeypatch, top)
    with pytest.raises(ImportError) as info:
        require(module, "bench", purpose="the thing")
    err = info.value
    assert not isinstance(err, ModuleNotFoundError)  # the named error, not the bare one it replaces
    assert err.name == top
    assert "pip install 'transformer-gradient-flows[bench]'" in str(err)
    assert f"the thing needs the package {dist!r}" in str(err)


def test_require_keeps_a_broken_install_s_own_error(monkeypatch):
    import scipy

    # a package that is installed but lacks a submodule: its own error, not "install the extra"
    with pytest.raises(ModuleNotFoundError, match="no_such_submodule"):
        require("scipy.no_such_submodule", "ot")
    assert scipy  # still importable


@pytest.mark.parametrize("module, extra", [("", "ot"), ("ot", ""), (None, "ot")])
def test_require_bad_arguments(module, extra):
    with pytest.raises(ValueError, match="module" if not module else "extra"):
        require(module, extra)


def _clouds(L, M, Mm, D, seed):
    rng = np.random.default_rng(seed)
    return {
        "V": rng.normal(size=(L, M, D, D)),
        "W": rng.normal(size=(L, M, D, D)),
        "W1": rng.normal(size=(L, Mm, D)),
        "W2": rng.normal(size=(L, Mm, D)),
    }


@pytest.mark.parametrize("method, top", [("exact", "ot"), ("sinkhorn", "ott")])
def test_w2_per_slice_without_its_package_names_the_extra(monkeypatch, method, top):
    from flows.mean_field import observables as obs

    # cloud sizes no other test uses, so the Sinkhorn program is traced (and imports) afresh here
    a, b = _clouds(1, 7, 5, 2, 0), _clouds(1, 6, 5, 2, 1)
    _hide(monkeypatch, top)
    with pytest.raises(ImportError, match=r"pip install 'transformer-gradient-flows\[ot\]'") as info:
        obs.w2_per_slice(a, b, method=method)
    assert not isinstance(info.value, ModuleNotFoundError)
    assert f"w2_per_slice(method='{method}')" in str(info.value)


def test_w2_per_slice_with_its_packages_still_runs():
    from flows.mean_field import observables as obs

    a = _clouds(1, 4, 3, 2, 0)
    w = obs.w2_per_slice(a, a, method="exact")
    np.testing.assert_allclose(w["attention"], 0.0, atol=1e-12)
    np.testing.assert_allclose(w["mlp"], 0.0, atol=1e-12)


# --------------------------------------------------------------------------- the start banner

_EXAMPLE = '''\
"""Tiny example for the banner tests."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from flows.experiments.records import RunRecord

    with RunRecord(args.out, name="{name}", config={{"quick": args.quick}}, seed=0, quick=args.quick) as rec:
        rec.add_metric("answer", 42.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.fixture
def checkout(tmp_path):
    """A checkout-like folder: examples/ with three tiny examples; benchmarks/results/ left to each test."""
    examples = tmp_path / "examples"
    examples.mkdir()
    for stem in ("alpha", "beta", "gamma"):
        (examples / f"{stem}.py").write_text(_EXAMPLE.format(name=stem))
    return tmp_path


def _write_times(root, examples, *, jobs=2, cpus=2, total=None):
    import json

    from flows.experiments.reproduce import QUICK_TIMES

    path = root / QUICK_TIMES
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"examples": examples, "jobs": jobs, "cpus": cpus}
    if total is not None:
        data["total_wall_s"] = total
    path.write_text(json.dumps(data))
    return path


def test_estimate_scales_the_measured_sum_by_the_run_s_packing():
    from flows.experiments.reproduce import estimate_s

    times = {"examples": {"a": 100.0, "b": 60.0, "c": 40.0}, "jobs": 2, "cpus": 2, "total_wall_s": 120.0}
    assert estimate_s(["a", "b", "c"], times) == pytest.approx(120.0, rel=1e-12)  # the whole measured run
    assert estimate_s(["a"], times) == pytest.approx(60.0, rel=1e-12)  # its share: 100 * 120 / 200
    del times["total_wall_s"]
    assert estimate_s(["a", "b", "c"], times) == pytest.approx(100.0, rel=1e-12)  # 200 s over 2 at once
    assert estimate_s(["a", "new"], times) is None  # an example never measured: no invented number
    assert estimate_s([], times) is None


def test_banner_counts_and_measured_minutes():
    from flows.experiments.reproduce import banner

    stems = [f"e{i}" for i in range(18)]
    times = {"examples": dict.fromkeys(stems, 60.0), "jobs": 2, "cpus": 2, "total_wall_s": 540.0}
    assert (
        banner(18, stems, quick=True, times=times)
        == "[reproduce] 18 examples (--quick), about 9 min (measured on 2 CPU cores, 2 at once)"
    )
    assert (
        banner(18, stems[:1], quick=True, times=times)
        == "[reproduce] 18 examples (--quick): 17 complete (skipped), 1 to run, about 30 s "
        "(measured on 2 CPU cores, 2 at once)"
    )
    assert (
        banner(18, [], quick=True, times=times) == "[reproduce] 18 examples (--quick): 18 complete (skipped), 0 to run"
    )
    # no measured times, or not --quick (the times are of --quick runs): the count alone
    assert banner(18, stems, quick=True, times=None) == "[reproduce] 18 examples (--quick)"
    assert banner(18, stems, quick=False, times=times) == "[reproduce] 18 examples"
    assert banner(1, ["x"], quick=True, times=times) == "[reproduce] 1 example (--quick)"


def test_reproduce_prints_the_banner_first(checkout, capsys):
    from flows.__main__ import main

    _write_times(checkout, {"alpha": 30.0, "beta": 30.0, "gamma": 60.0}, total=100.0)
    args = [
        "reproduce",
        "--quick",
        "--examples-dir",
        str(checkout / "examples"),
        "--out",
        str(checkout / "out"),
        "--jobs",
        "2",
        "--only",
        "alpha",
        "gamma",
    ]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    # (30 + 60) s of the 120 s summed, in a run of 100 s
    assert lines[0] == "[reproduce] 2 examples (--quick), about 75 s (measured on 2 CPU cores, 2 at once)"
    assert main(args) == 0  # resumed: both complete
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[reproduce] 2 examples (--quick): 2 complete (skipped), 0 to run"
    assert lines[1] == "[1/2] alpha: complete, skipped"


def test_reproduce_banner_without_measured_times(checkout, capsys):
    from flows.__main__ import main

    out = str(checkout / "out")
    assert (
        main(["reproduce", "--quick", "--examples-dir", str(checkout / "examples"), "--out", out, "--only", "beta"])
        == 0
    )
    assert capsys.readouterr().out.splitlines()[0] == "[reproduce] 1 example (--quick)"


@pytest.mark.parametrize(
    "content",
    [
        '{"examples": {"a": -1.0}, "jobs": 2, "cpus": 2}',
        '{"examples": {"a": 1.0}, "jobs": 0, "cpus": 2}',
        '{"examples": {}, "jobs": 2, "cpus": 2}',
        '{"examples": {"a": 1.0}, "jobs": 2, "cpus": 2, "total_wall_s": "x"}',
        "[1, 2]",
        "not json",
    ],
)
def test_load_quick_times_ignores_a_malformed_file(tmp_path, capsys, content):
    from flows.experiments.reproduce import QUICK_TIMES, load_quick_times

    path = tmp_path / QUICK_TIMES
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert load_quick_times(tmp_path) is None
    assert "not a file of measured times" in capsys.readouterr().err


def test_load_quick_times_absent_and_valid(tmp_path):
    from flows.experiments.reproduce import load_quick_times

    assert load_quick_times(tmp_path) is None
    _write_times(tmp_path, {"a": 12.5}, jobs=1, cpus=2)
    assert load_quick_times(tmp_path) == {"examples": {"a": 12.5}, "jobs": 1, "cpus": 2}


def test_committed_quick_times_cover_every_example_if_present():
    """The committed measurements, where there are any, are of exactly the examples the main job runs."""
    from pathlib import Path

    from flows.experiments.reproduce import QUICK_TIMES, list_scripts, load_quick_times

    root = Path(__file__).resolve().parents[1]
    if not (root / QUICK_TIMES).exists():
        pytest.skip("no measured --quick times committed (the banner shows the count alone)")
    times = load_quick_times(root)
    assert times is not None
    assert sorted(times["examples"]) == [s.stem for s in list_scripts(root / "examples")]


# --------------------------------------------------------------------------- regenerating the measured times


def test_reproduce_times_from_a_finished_run(checkout, capsys):
    import json

    from benchmarks import reproduce_times
    from flows.__main__ import main

    out = checkout / "out"
    assert (
        main(["reproduce", "--quick", "--examples-dir", str(checkout / "examples"), "--out", str(out), "--jobs", "1"])
        == 0
    )
    target = checkout / "times.json"
    assert reproduce_times.main([str(out), "--output", str(target)]) == 0
    data = json.loads(target.read_text())
    assert sorted(data["examples"]) == ["alpha", "beta", "gamma"]
    assert data["jobs"] == 1  # from the report's command line
    assert str(checkout) not in json.dumps(data)  # no path of this machine in the file to commit
    assert data["command"].startswith("python -m flows reproduce --quick --examples-dir DIR --out DIR")
    walls = data["examples"].values()
    assert all(w > 0 for w in walls)
    # one at a time: the run spans at least the longest example and at most their sum, up to the
    # rounding to 0.1 s and the time between one example's end and the next one's start
    assert max(walls) - 0.1 <= data["total_wall_s"] <= sum(walls) + 0.15 + 2.0
    from flows.experiments.reproduce import load_quick_times

    _write_times(checkout, data["examples"], jobs=data["jobs"], cpus=data["cpus"], total=data["total_wall_s"])
    assert load_quick_times(checkout)["examples"] == data["examples"]


def test_reproduce_times_refuses_a_folder_without_a_quick_run(tmp_path, capsys):
    from benchmarks import reproduce_times

    assert reproduce_times.main([str(tmp_path), "--output", str(tmp_path / "t.json")]) == 2
    assert "no REPORT.md" in capsys.readouterr().err
    (tmp_path / "REPORT.md").write_text("# Reproduction report\n")
    assert reproduce_times.main([str(tmp_path), "--output", str(tmp_path / "t.json")]) == 2
    assert "not the report of a --quick run" in capsys.readouterr().err
    (tmp_path / "REPORT.md").write_text("# Reproduction report (quick)\n")
    assert reproduce_times.main([str(tmp_path), "--output", str(tmp_path / "t.json")]) == 2
    assert "exit code 0 after X s" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


# --------------------------------------------------------------------------- --help and --only


def test_help_lists_the_names_only_accepts():
    import subprocess
    from pathlib import Path

    from flows.experiments.reproduce import list_scripts

    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-m", "flows", "reproduce", "--help"], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert res.returncode == 0, res.stderr
    names = [s.stem for s in list_scripts(root / "examples")]
    assert len(names) >= 18
    listed = res.stdout.split("examples that --only accepts", 1)[1].split()
    for name in names:
        assert name in listed, f"{name} missing from reproduce --help"
    assert "mean_field_w2" in listed and "_" not in [n[0] for n in listed]


def test_unknown_only_name_lists_the_valid_ones(checkout, capsys):
    from flows.__main__ import main

    assert (
        main(
            [
                "reproduce",
                "--examples-dir",
                str(checkout / "examples"),
                "--out",
                str(checkout / "out"),
                "--only",
                "alpha",
                "nope",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "unknown example(s) nope" in err and "available: alpha, beta, gamma" in err
    assert not (checkout / "out" / "alpha").exists()  # nothing ran


_SEEDED = '''\
"""Tiny example that takes a seed."""
import sys

from flows.experiments import records


def main(argv=None):
    ns = records.example_parser("seeded", __doc__, seed=7).parse_args(argv)
    with records.RunRecord(ns.out, name="seeded", config={}, seed=ns.seed, quick=ns.quick) as rec:
        rec.add_prediction("seed_is_odd", ns.seed, "odd", ns.seed % 2 == 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def test_reproduce_passes_the_seed_and_reruns_a_record_of_another_seed(tmp_path, capsys):
    from flows.__main__ import main
    from flows.experiments import records

    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "seeded.py").write_text(_SEEDED)
    out = tmp_path / "out"
    base = [
        "reproduce",
        "--quick",
        "--examples-dir",
        str(tmp_path / "examples"),
        "--out",
        str(out),
        "--no-compile-cache",
    ]

    def seed_of_record():
        return records.load_record(out / "seeded")["meta"]["seed"]

    assert main(base) == 0 and seed_of_record() == 7  # the example's own seed
    assert main([*base, "--seed", "3"]) == 0 and seed_of_record() == 3  # another seed: rerun
    capsys.readouterr()
    assert main([*base, "--seed", "3"]) == 0
    assert "[1/1] seeded: complete, skipped" in capsys.readouterr().out  # the same seed: resumed
    assert main(base) == 0 and seed_of_record() == 3  # no --seed: any complete record stands
    assert main([*base, "--seed", "4"]) == 0 and seed_of_record() == 4
    assert "| [seeded](#seeded) | ok |" in (out / "REPORT.md").read_text()
    assert "FAIL seed_is_odd" in (out / "REPORT.md").read_text()  # the verdict is the seed's


def test_each_example_is_launched_with_the_run_settings(tmp_path):
    """The command of every example of a ``reproduce`` run: the script with `--out` its record folder, then
    `--quick`, `--seed N` and `--no-compile-cache` exactly when the run asks for them."""
    from flows.experiments.reproduce import _Launch

    script, rec = tmp_path / "ex.py", tmp_path / "out" / "ex"
    base = [sys.executable, str(script.resolve()), "--out", str(rec.resolve())]
    assert _Launch(quick=False, cwd=tmp_path).command(script, rec) == base
    full = _Launch(quick=True, cwd=tmp_path, cache=False, seed=3).command(script, rec)
    assert full == [*base, "--quick", "--seed", "3", "--no-compile-cache"]
    assert _Launch(quick=False, cwd=tmp_path, seed=0).command(script, rec) == [*base, "--seed", "0"]
