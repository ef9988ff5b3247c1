"""The README's first command on a fresh machine, as a new user meets it: a clone of the committed HEAD, a new
virtual environment without the system's site packages, the README's install step, then the whole main job
(`python -m flows reproduce --quick`, every example) with an empty compilation cache. It fails when any example
fails or records a FAIL verdict, and prints every example's line of the job, so that CI's log shows each.

The slow test downloads the dependencies the first time (pip's cache is kept, so later runs are faster);
`.ci/run` runs it among its slow steps.
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
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
#: the optional packages the README's install step must bring (examples use them: POT, ott-jax)
OPTIONAL_IMPORTS = ("ot", "ott")


def _readme_first_command() -> tuple[list[str], list[str]]:
    """(install argv, main-job argv) of the first line of the README's set-up block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README.md has no ```bash block"
    first = block.group(1).splitlines()[0]
    install, job = (shlex.split(part) for part in first.split("&&"))
    assert install[:2] == ["pip", "install"] and job[:3] == ["python", "-m", "flows"], first
    return install, job


def test_readme_first_command_parses():
    install, job = _readme_first_command()
    assert install == ["pip", "install", "-e", "."]
    assert job == ["python", "-m", "flows", "reproduce", "--quick"]


def test_ci_runs_the_whole_main_job_and_the_seed_sweep_as_its_slow_steps():
    """.ci/run lists its slow steps in one place, and they include this module's main job on a fresh clone and
    the main job at seeds 0-4."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    block = re.search(r"^slow_steps=\((.*?)^\)", text, re.DOTALL | re.MULTILINE)
    assert block is not None, ".ci/run has no slow_steps=( ... ) list"
    steps = re.findall(r"^\s*(tests/\S+\.py)", block.group(1), re.MULTILINE)
    assert {"tests/test_fresh_install.py", "tests/test_example_seeds.py", "tests/test_docs.py"} <= set(steps)
    for step in steps:
        assert "pytest.mark.slow" in (ROOT / step).read_text(encoding="utf-8"), f"{step} has no slow test"
    assert len(re.findall(r"pytest -m slow", text)) == 1, "the slow steps run from one place: the slow_steps loop"


def summary_rows(report: str) -> dict[str, list[str]]:
    """{example: its cells} of REPORT.md's summary table: status, wall time, holding, failing, not tested, known
    findings."""
    rows = re.finditer(r"^\| \[(\w+)\]\(#\w+\) \| (.*) \|$", report, re.MULTILINE)
    return {m.group(1): m.group(2).split(" | ") for m in rows}


def test_summary_rows_read_the_report(tmp_path):
    from flows.experiments import records
    from flows.experiments.report import Outcome, render_report

    for stem, holds in (("good", True), ("bad", False)):
        with records.RunRecord(tmp_path / stem, name=stem, config={}, quick=True) as rec:
            rec.add_prediction("p", 1.0, "== 1", holds)
            rec.add_prediction("q", 1.0, "== 1", None, tested_at="the full run")
    outcomes = [Outcome("good", "ok", 1.0, 0), Outcome("bad", "ok", 2.0, 0), Outcome("crashed", "failed", 3.0, 1)]
    rows = summary_rows(render_report(outcomes, tmp_path, ["reproduce", "--quick"], quick=True))
    assert rows == {
        "good": ["ok", "1.0", "1/1", "0", "1", "0"],
        "bad": ["ok", "2.0", "0/1", "1", "1", "0"],
        "crashed": ["FAILED", "3.0", "-", "-", "-", "-"],
    }


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
def test_readme_first_command_on_a_fresh_clone_and_venv(tmp_path, capsys):
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
        [str(python), "-c", f"import flows, {', '.join(OPTIONAL_IMPORTS)}; print(flows.__file__)"],
        cwd=tmp_path,
        env=env,
        timeout=300,
    ).stdout.strip()
    assert Path(where).resolve().is_relative_to(repo.resolve()), f"flows imported from {where}, not the clone"

    out = tmp_path / "out"
    env["FLOWS_CACHE_DIR"] = str(tmp_path / "compile-cache")  # empty: a first run pays every compile
    t0 = time.perf_counter()
    lines, rc = _stream([str(python), *job[1:], "--out", str(out)], cwd=repo, env=env, timeout=3600, capsys=capsys)
    t_job = time.perf_counter() - t0
    log = "\n".join(lines)
    assert rc == 0, f"the main job exited {rc}\n{log[-6000:]}"
    done = {m.group(1) for line in lines if (m := re.match(r"\[\d+/\d+\] (\w+): done in ", line))}
    assert done == set(EXAMPLES), f"examples without a done line: {sorted(set(EXAMPLES) - done)}\n{log[-4000:]}"
    rows = summary_rows((out / "REPORT.md").read_text(encoding="utf-8"))
    assert set(rows) == set(EXAMPLES), sorted(set(EXAMPLES) ^ set(rows))
    bad = {stem: row for stem, row in rows.items() if row[0] != "ok" or row[3] != "0"}
    assert not bad, f"examples that failed or record a FAIL verdict: {bad}"
    with capsys.disabled():
        print(f"\ninstall {t_install:.1f} s, main job on {len(EXAMPLES)} examples {t_job:.1f} s")


def _stream(cmd: list[str], *, cwd: Path, env: dict, timeout: float, capsys) -> tuple[list[str], int]:
    """Run `cmd`, echoing each line of its output to the terminal as it comes (pytest's capture aside), so that
    CI's log shows every example's line of the main job; returns (the lines, the exit code)."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    with capsys.disabled():
        print(f"\n$ {shlex.join(cmd)}", flush=True)
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(lines[-1], flush=True)
            if time.monotonic() > deadline:
                proc.kill()
                break
    rc = proc.wait()
    return lines, rc
