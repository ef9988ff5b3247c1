"""Data model and config validation (Yang et al. 2024, Def. 2.1, Assumption 2.3)."""

import jax
import numpy as np
import pytest

from flows import cooccurrence as co


def _config(**kw):
    base = dict(n=12, L=4, d=3 + co.num_random_slots(12, 4), m=8, m1=4, seed=0)
    return co.Config(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(d=10), "d"),  # theory variant needs d >= 3 + random slots
        (dict(L=2, d=100), "L"),
        (dict(n=10), "n"),  # not a multiple of 6
        (dict(n=0), "n"),
        (dict(sigma0=0.0), "sigma0"),
        (dict(sigma1=-1.0), "sigma1"),
        (dict(sigma0=float("nan")), "sigma0"),
        (dict(m=0), "m"),
        (dict(m1=0), "m1"),
        (dict(variant="other"), "variant"),
        (dict(init="xavier"), "init"),
        (dict(variant="paper", d=3), "d"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _config(**kw)


def test_bad_lr_and_optimizer_raise():
    cfg = _config()
    with pytest.raises(ValueError, match="lr"):
        co.train(cfg, "gd", lr=0.0, steps=2)
    with pytest.raises(ValueError, match="lr"):
        co.train(cfg, "gd", lr=-1e-3, steps=2)
    with pytest.raises(ValueError, match="optimizer"):
        co.train(cfg, "rmsprop", lr=1e-3, steps=2)
    with pytest.raises(ValueError, match="batch_size"):
        co.train(cfg, "sgd", lr=1e-3, steps=2)


def test_config_is_immutable_and_defaults():
    cfg = co.Config()
    assert (cfg.n, cfg.L, cfg.d, cfg.m, cfg.m1) == (60, 5, 163, 128, 256)
    assert cfg.sigma0 == pytest.approx(1 / np.sqrt(5 * 128))
    assert cfg.sigma1 == pytest.approx(1 / np.sqrt(256))
    with pytest.raises(AttributeError):
        cfg.n = 6  # frozen
    assert co.Config(variant="paper", d=64).d == 64


@pytest.mark.parametrize("variant", ["theory", "paper"])
def test_training_set_structure(variant):
    cfg = _config(n=24, L=5, d=3 + co.num_random_slots(24, 5) if variant == "theory" else 20, variant=variant, seed=4)
    ds = co.training_set(cfg)
    tok = np.asarray(ds.tokens)
    groups = np.asarray(ds.groups)
    labels = np.asarray(ds.labels)
    assert tok.shape == (24, 5) and tok.dtype == np.int32
    assert np.bincount(groups).tolist() == [12, 4, 4, 4]  # exact proportions
    count = lambda k: (tok == k).sum(axis=1)  # noqa: E731
    assert np.all(count(2) == 1)  # mu_3 exactly once
    np.testing.assert_array_equal(count(0), np.isin(groups, [0, 1]).astype(int))
    np.testing.assert_array_equal(count(1), np.isin(groups, [0, 2]).astype(int))
    np.testing.assert_array_equal(labels, np.where(groups == 0, 1.0, -1.0))
    rand = tok[tok >= 3]
    assert rand.size == co.num_random_slots(24, 5) and rand.max() < cfg.d
    if variant == "theory":
        assert len(np.unique(rand)) == rand.size  # Assumption 2.3(ii)
    # positions are shuffled: mu_3 is not always at the same position
    assert len(np.unique(np.argmax(tok == 2, axis=1))) > 1
    # same seed, same data
    np.testing.assert_array_equal(tok, np.asarray(co.training_set(cfg).tokens))


def test_test_draws_are_fresh_and_follow_D():
    cfg = _config(variant="paper", d=30)
    test = co.sample_test(cfg, 6000)
    frac = np.bincount(np.asarray(test.groups), minlength=4) / 6000
    np.testing.assert_allclose(frac, [0.5, 1 / 6, 1 / 6, 1 / 6], atol=0.03)
    tok = np.asarray(test.tokens)
    assert np.all((tok == 2).sum(axis=1) == 1)
    other = co.sample_test(cfg, 6000, key=np.asarray(cfg.keys()[0]))
    assert not np.array_equal(np.asarray(other.tokens), tok)


def test_keys_seed_the_numpy_streams_and_bad_keys_are_refused():
    cfg = _config(variant="paper", d=30)
    by_int = co.training_set(cfg, key=7)
    np.testing.assert_array_equal(np.asarray(by_int.tokens), np.asarray(co.training_set(cfg, key=7).tokens))
    assert not np.array_equal(np.asarray(by_int.tokens), np.asarray(co.training_set(cfg).tokens))
    typed = co.training_set(cfg, key=jax.random.key(3))
    raw = co.training_set(cfg, key=jax.random.PRNGKey(3))
    np.testing.assert_array_equal(np.asarray(typed.tokens), np.asarray(raw.tokens))
    # the streams of one seed are independent: data, init and test draws differ
    assert not np.array_equal(cfg.rng("data").random(5), cfg.rng("test").random(5))
    for bad in (-1, "seed", np.array([0.5]), np.array([], np.uint32)):
        with pytest.raises(ValueError, match="key"):
            co.training_set(cfg, key=bad)
