"""The experiment tooling's old module paths (`flows.records`, `flows.findings`, `flows.compile_cache`,
`flows.plotting`) still give the moved modules' names for one release, each use with a DeprecationWarning;
the library, examples, benchmarks and tests import `flows.experiments.*`."""

import importlib

import pytest

MOVED = {"records": "RunRecord", "findings": "known", "compile_cache": "enable", "plotting": "figure"}


@pytest.mark.parametrize("module, name", MOVED.items())
def test_old_path_warns_and_gives_the_moved_name(module, name):
    old = importlib.import_module(f"flows.{module}")
    new = importlib.import_module(f"flows.experiments.{module}")
    with pytest.warns(DeprecationWarning, match=f"flows.experiments.{module}"):
        value = getattr(old, name)
    assert value is getattr(new, name)


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning, match="flows.experiments.records"):
        from flows.records import RunRecord
    from flows.experiments.records import RunRecord as moved

    assert RunRecord is moved


def test_old_path_has_only_the_moved_names():
    import flows.records

    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        flows.records.no_such_name  # noqa: B018
