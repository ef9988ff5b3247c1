"""The mutation check (tests/mutations.py) as a slow test: every listed mistake in the physics is caught by the
default tests. `pytest -m slow tests/test_mutations.py` (one test run per mutation; about half an hour)."""

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _module():
    spec = importlib.util.spec_from_file_location("flows_mutations", HERE / "mutations.py")
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_mutation_list_is_current():
    """Every mutation's text occurs exactly once in its file and names existing tests (cheap, default run)."""
    m = _module()
    assert len(m.MUTATIONS) >= 30
    m._check_list(m.MUTATIONS)
    for mutation in m.MUTATIONS:
        assert mutation.old != mutation.new, mutation.id


@pytest.mark.slow
def test_every_mutation_is_killed():
    m = _module()
    rows = m.run(m.MUTATIONS, jobs=2)
    survivors = [r["id"] for r in rows if not r["killed"]]
    assert not survivors, m.table(rows)
