"""The tutorial "Bring your own theory" (docs/tutorials/bring_your_own_theory.md) runs as written: its python
code blocks, in order, as one script from a temporary folder outside the repository, against the installed
package. The tutorial asserts its own agreements (derived flow against the closed form and `jax.grad`, the
trained networks against their flows, first order in the learning rate)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorials" / "bring_your_own_theory.md"


def tutorial_script() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert len(blocks) >= 3, f"expected the tutorial's python blocks, found {len(blocks)}"
    return "\n\n".join(blocks)


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
