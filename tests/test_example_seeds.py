"""Every example's `--quick` verdicts hold at seeds 0-4, so that a failure of the main job is never the luck of one
seed on one machine: the whole main job (`python -m flows reproduce --quick --seed S`) once per seed, each
example's record held to the same rules as `tests/test_examples.py` (every prediction holds or is not tested at
this size, the known findings fail as listed, a metric named after a prediction agrees with it).

Slow (five main jobs: about five times the `--quick` time of `benchmarks/results/reproduce_quick.json`);
`.ci/run` runs it among its slow steps. Every example's line of each job is echoed to the log.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.experiments import records

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
SEEDS = range(5)


def _rules():
    """tests/test_examples.py, whose checks of a record this test applies at every seed."""
    spec = importlib.util.spec_from_file_location("example_rules", ROOT / "tests" / "test_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_quick_verdicts_hold_at_every_seed(seed, tmp_path, capsys):
    out = tmp_path / f"seed{seed}"
    cmd = [sys.executable, "-m", "flows", "reproduce", "--quick", "--seed", str(seed), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    lines = []
    with capsys.disabled():
        print(f"\n$ {' '.join(cmd)}", flush=True)
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(lines[-1], flush=True)
    rc = proc.wait(timeout=60)
    log = "\n".join(lines)
    assert rc == 0, f"the main job at seed {seed} exited {rc}\n{log[-6000:]}"
    done = {m.group(1) for line in lines if (m := re.match(r"\[\d+/\d+\] (\w+): done in ", line))}
    assert done == set(EXAMPLES), f"seed {seed}: examples that did not finish: {sorted(set(EXAMPLES) - done)}"

    rules, broken = _rules(), {}
    for stem in EXAMPLES:
        rec = records.load_record(out / stem)
        assert rec["meta"]["seed"] == seed, f"{stem} ran at seed {rec['meta']['seed']}, not {seed}"
        preds = {k: v for k, v in rec["metrics"].items() if isinstance(v, dict) and "holds" in v}
        try:
            rules.check_verdicts(stem, preds)
            rules.check_names_agree(stem, rec["metrics"])
        except AssertionError as err:
            broken[stem] = str(err)
    with capsys.disabled():
        print(f"seed {seed}: {len(EXAMPLES)} examples in {time.perf_counter() - t0:.1f} s", flush=True)
    assert not broken, f"seed {seed}: verdicts that depend on the seed:\n" + "\n".join(
        f"{stem}: {why}" for stem, why in broken.items()
    )
