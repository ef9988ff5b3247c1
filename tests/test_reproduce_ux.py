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


@pytest.mark.parametrize("module, top, dist", [("ot", "ot", "POT"),
                                               ("ott.tools.sinkhorn_divergence", "ott", "ott-jax"),
                                               ("torch", "torch", "torch")])
def test_require_names_the_extra_when_missing(monkeypatch, module, top, dist):
    _hide(monkeypatch, top)
    with pytest.raises(ImportError) as info:
        require(module, "bench", purpose="the thing")
    err = info.value
    assert not isinstance(err, ModuleNotFoundError)  # the named error, not the bare one it replaces
    assert err.name == top
    assert "pip install 'transformer-flows[bench]'" in str(err)
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
    return {"V": rng.normal(size=(L, M, D, D)), "W": rng.normal(size=(L, M, D, D)),
            "W1": rng.normal(size=(L, Mm, D)), "W2": rng.normal(size=(L, Mm, D))}


@pytest.mark.parametrize("method, top", [("exact", "ot"), ("sinkhorn", "ott")])
def test_w2_per_slice_without_its_package_names_the_extra(monkeypatch, method, top):
    from flows.mean_field import observables as obs

    # cloud sizes no other test uses, so the Sinkhorn program is traced (and imports) afresh here
    a, b = _clouds(1, 7, 5, 2, 0), _clouds(1, 6, 5, 2, 1)
    _hide(monkeypatch, top)
    with pytest.raises(ImportError, match=r"pip install 'transformer-flows\[ot\]'") as info:
        obs.w2_per_slice(a, b, method=method)
    assert not isinstance(info.value, ModuleNotFoundError)
    assert f"w2_per_slice(method='{method}')" in str(info.value)


def test_w2_per_slice_with_its_packages_still_runs():
    from flows.mean_field import observables as obs

    a = _clouds(1, 4, 3, 2, 0)
    w = obs.w2_per_slice(a, a, method="exact")
    np.testing.assert_allclose(w["attention"], 0.0, atol=1e-12)
    np.testing.assert_allclose(w["mlp"], 0.0, atol=1e-12)
