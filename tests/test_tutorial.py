"""The tutorial "Bring your own theory" (docs/tutorials/bring_your_own_theory.md) runs as written: its python
code blocks, in order, as one script from a temporary folder outside the repository, against the installed
package. The tutorial asserts its own agreements (the spec's network against its limits, the SGD SDE against
SGD, `flows.compare`'s first order in the learning rate, the derived flow against the closed form and
`jax.grad`, the trained networks against their flows).

The acceptance of the spec: a theory outside the package, written as a `flows.System` in at most 40 lines of
user code (the tutorial's first block), gets `train`, `solve_flow` with gd, momentum, sign and Adam, the SGD
SDE, and `compare` with its figure and run record, with no package edit."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorials" / "bring_your_own_theory.md"


def tutorial_blocks() -> list[str]:
    blocks = re.findall(r"^```python\n(.*?)^```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert len(blocks) >= 3, f"expected the tutorial's python blocks, found {len(blocks)}"
    return blocks


def tutorial_script() -> str:
    return "\n\n".join(tutorial_blocks())


def test_the_theory_is_a_spec_of_at_most_40_lines():
    """The first block is the whole theory: a `flows.System` built from plain functions, in at most 40 lines
    (blank lines aside); the next ones use only the public driver on it."""
    theory, use, compare = tutorial_blocks()[:3]
    lines = [line for line in theory.splitlines() if line.strip()]
    assert len(lines) <= 40, len(lines)
    assert "flows.System(" in theory
    for name in ("flows.train(", "flows.solve_flow(", "noise=True", '"momentum"', '"sign"', '"adam"'):
        assert name in use, name
    assert "flows.compare(" in compare and "out=" in compare and ".figure()" in compare


@pytest.mark.slow  # .ci/run runs the tutorial's tests after the default suite
def test_tutorial_runs_from_a_temporary_folder(tmp_path):
    assert ROOT not in tmp_path.parents
    (tmp_path / "tutorial.py").write_text(tutorial_script(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package, not the checkout
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "tutorial.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "da/dt =" in out and "('eta', 'lambda')" in out, out
    # the user's generated module is in the user's folder
    assert (tmp_path / "generated" / "two_layer_scalar.py").is_file()
    assert re.search(r"^gd: loss .* \|net - flow\|", out, re.M) and re.search(r"^adam: loss ", out, re.M), out
    # the spec's comparison: its run record and its figure, in the user's folder
    record = tmp_path / "compare_gd"
    assert (record / "meta.json").is_file() and (record / "compare.png").is_file(), sorted(tmp_path.iterdir())
    assert '"holds": true' in (record / "metrics.json").read_text()
    assert (tmp_path / "compare_gd_again.png").is_file()
