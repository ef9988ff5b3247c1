"""`import flows` and a records-only script import neither jax nor diffrax (the CLI's main job pays for neither),
and `flows.solve` stays the function however its submodule is first imported."""

import subprocess
import sys

CODE = """
import sys
import flows, flows.experiments.records
assert "jax" not in sys.modules and "diffrax" not in sys.modules, sorted(m for m in sys.modules if "jax" in m)
import flows.scan_snap  # imports the submodule flows.solve first
assert callable(flows.solve) and flows.solve.__name__ == "solve", flows.solve
from flows._solve import Trajectory
assert flows.Trajectory is Trajectory
print("ok")
"""


def test_import_flows_is_light_and_solve_stays_the_function():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
