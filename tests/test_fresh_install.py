"""The README's first command on a fresh machine, as a new user meets it: a clone of the committed HEAD, a new
virtual environment without the system's site packages, the README's install step, then the main job on
every example that needs a package beyond the core of the library.

The slow test downloads the dependencies the first time (pip's cache is kept, so later runs are faster);
`.ci/run` runs it as a step of its own after the test suite.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: every example that needs a package some installs lack (POT, ott-jax); `test_selection_covers_...` keeps it so
SELECTION = ("mean_field_gd_vs_flow", "mean_field_w2")

# imports and calls that mark an example as needing more than jax, diffrax, numpy, scipy, sympy, matplotlib
_OPTIONAL_USE = re.compile(r"^\s*(import|from)\s+(ot|ott|torch|threadpoolctl)\b|w2_per_slice", re.MULTILINE)


def _readme_first_command() -> tuple[list[str], list[str]]:
    """(install argv, main-job argv) of the first line of the README's set-up block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README.md has no ```bash block"
    first = block.group(1).splitlines()[0]
    install, job = (shlex.split(part) for part in first.split("&&"))
    assert install[:2] == ["pip", "install"] and job[:3] == ["python", "-m", "flows"], first
    return install, job


def test_selection_covers_every_example_with_an_optional_dependency():
    users = sorted(
        p.stem
        for p in (ROOT / "examples").glob("*.py")
        if not p.name.startswith("_") and _OPTIONAL_USE.search(p.read_text(encoding="utf-8"))
    )
    assert users, "no example uses an optional package: the pattern no longer matches the examples"
    missing = sorted(set(users) - set(SELECTION))
    assert not missing, f"examples needing an optional package but not in SELECTION: {missing}"


def test_readme_first_command_parses():
    install, job = _readme_first_command()
    assert install == ["pip", "install", "-e", "."]
    assert job == ["python", "-m", "flows", "reproduce", "--quick"]


def _run(cmd: list[str], *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    res = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 0, (
        f"{shlex.join(cmd)} exited {res.returncode}\n--- stdout (end)\n"
        f"{res.stdout[-6000:]}\n--- stderr (end)\n{res.stderr[-6000:]}"
    )
    return res


@pytest.mark.slow
def test_readme_first_command_on_a_fresh_clone_and_venv(tmp_path):
    git = shutil.which("git")
    assert git is not None, "git is needed to clone the repository"
    head = subprocess.run(
        [git, "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    repo = tmp_path / "transformer-flows"
    subprocess.run([git, "clone", "--quiet", "--no-checkout", str(ROOT), str(repo)], check=True, timeout=300)
    subprocess.run([git, "-C", str(repo), "checkout", "--quiet", "--detach", head], check=True, timeout=300)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    # a user's shell: the new environment first on PATH, nothing of this process's Python leaking in
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE")
    }
    env.update(
        PATH=os.pathsep.join([str(bindir), env.get("PATH", "")]),
        VIRTUAL_ENV=str(venv),
        MPLBACKEND="Agg",
        PYTHONNOUSERSITE="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )

    install, job = _readme_first_command()
    t0 = time.perf_counter()
    _run([str(python), "-m", *install], cwd=repo, env=env, timeout=3600)  # `pip ...` as the venv's pip
    t_install = time.perf_counter() - t0

    where = _run(
        [str(python), "-c", "import flows, ot, ott; print(flows.__file__)"], cwd=tmp_path, env=env, timeout=300
    ).stdout.strip()
    assert Path(where).resolve().is_relative_to(repo.resolve()), f"flows imported from {where}, not the clone"

    out = tmp_path / "out"
    t0 = time.perf_counter()
    res = _run([str(python), *job[1:], "--only", *SELECTION, "--out", str(out)], cwd=repo, env=env, timeout=3600)
    t_job = time.perf_counter() - t0
    report = out / "REPORT.md"
    assert report.is_file(), f"no REPORT.md after the main job\n{res.stdout[-4000:]}"
    text = report.read_text(encoding="utf-8")
    for stem in SELECTION:
        assert f"| [{stem}](#{stem}) | ok |" in text, f"{stem} did not finish ok:\n{text[:3000]}"
    print(f"install {t_install:.1f} s, main job on {len(SELECTION)} examples {t_job:.1f} s")
