"""JoMA's data (the official Fig. 2/3 synthetic classes): Config validation, the frequencies against a literal
transcription of the official script, the embedding, the random streams."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from flows import joma
from flows.joma import data


def official_frequencies(common: np.ndarray, n_distinct=10, K=20) -> np.ndarray:
    """draw_figure_2_3.py, transcribed: X = rand(Mc, K) / 2 (here: the given common rows; its distinct rows are
    overwritten), the Gaussian bump on the distinct tokens, each column normalised."""
    Mc = n_distinct + common.shape[0]
    X = np.zeros((Mc, K))
    X[n_distinct:] = common
    idx = np.arange(n_distinct)
    for i in range(K):
        X[:n_distinct, i] = np.exp(-((idx - i / K * n_distinct) ** 2) / 30)
    return X / X.sum(axis=0, keepdims=True)


def test_defaults_are_the_official_sizes():
    cfg = joma.Config()
    assert (cfg.attention, cfg.mlp, cfg.n_distinct, cfg.n_common, cfg.n_classes, cfg.d) == (
        "softmax",
        "linear",
        10,
        10,
        20,
        30,
    )
    assert (cfg.tau, cfg.bump_width, cfg.common_scale, cfg.init_scale, cfg.n_tokens) == (0.5, 30.0, 0.5, 0.01, 20)
    assert hash(cfg) == hash(joma.Config()) and cfg.replace(seed=3).seed == 3 and cfg.seed == 0


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(attention="relu"), "attention"),
        (dict(mlp="tanh"), "mlp"),
        (dict(n_distinct=0), "n_distinct"),
        (dict(n_common=1.5), "n_common"),
        (dict(n_classes=1), "n_classes"),
        (dict(d=20), "d"),
        (dict(d=True), "d"),
        (dict(tau=0.0), "tau"),
        (dict(tau=float("nan")), "tau"),
        (dict(bump_width=-1.0), "bump_width"),
        (dict(common_scale=float("inf")), "common_scale"),
        (dict(init_scale=0.0), "init_scale"),
        (dict(seed=-1), "seed"),
        (dict(seed="0"), "seed"),
    ],
)
def test_bad_values_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        joma.Config(**kw)


def test_frequencies_match_the_official_script():
    cfg = joma.Config()
    X = np.asarray(joma.frequencies(cfg))
    # the common rows before normalisation are U(0, 1/2) draws of the "data" stream
    raw = 0.5 * np.asarray(jax.random.uniform(cfg.key("data"), (10, 20)))
    np.testing.assert_allclose(X, official_frequencies(raw), rtol=1e-14, atol=0)
    np.testing.assert_allclose(X.sum(axis=0), 1.0, rtol=1e-14)
    # an even class k's distinct bump peaks at token k / 2 (the official centre i / K * Mdistinct)
    assert np.array_equal(np.argmax(X[:10, ::2], axis=0), np.arange(10))


def test_frequencies_follow_the_config():
    cfg = joma.Config(n_distinct=4, n_common=3, n_classes=5, d=9, bump_width=2.0, common_scale=0.1, seed=7)
    X = np.asarray(joma.frequencies(cfg))
    raw = 0.1 * np.asarray(jax.random.uniform(cfg.key("data"), (3, 5)))
    want = np.concatenate([np.exp(-((np.arange(4)[:, None] - np.arange(5)[None] * 4 / 5) ** 2) / 2.0), raw])
    np.testing.assert_allclose(X, want / want.sum(axis=0), rtol=1e-14)


def test_embedding_and_population():
    cfg = joma.Config()
    U = np.asarray(joma.embedding(cfg))
    assert U.shape == (30, 21) and np.array_equal(U[:21], np.eye(21)) and not U[21:].any()
    pop = joma.population(cfg)
    assert set(pop) == {"x", "y", "U", "xbar", "tau"} and float(pop["tau"]) == 0.5
    np.testing.assert_array_equal(pop["x"], np.asarray(joma.frequencies(cfg)).T)  # one row per class
    np.testing.assert_array_equal(pop["y"], np.eye(20))  # row k: label k
    np.testing.assert_allclose(pop["xbar"], np.asarray(pop["x"]).mean(axis=0), rtol=1e-15)


def test_streams_are_seeded_and_distinct():
    a, b = joma.Config(seed=1), joma.Config(seed=2)
    np.testing.assert_array_equal(joma.frequencies(a), joma.frequencies(joma.Config(seed=1)))
    assert not np.allclose(joma.frequencies(a), joma.frequencies(b))
    assert not np.array_equal(a.key("data"), a.key("init"))
    with pytest.raises(ValueError, match="stream"):
        a.key("test")
    assert data.STREAMS == ("data", "init", "batch", "noise")
