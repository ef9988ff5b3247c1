"""What a new user meets without a warning, pinned: a derived config field that follows its source through
`replace`, a Scan-and-Snap run driven to saturation by an absurd learning rate, the full flow's `paper_time`,
the paper's Syn-Medium sizes, `event_time` on a series that never crosses, and the attention observables that
a network record and its flow's Trajectory share by name."""

import math
import pickle
import types

import jax
import numpy as np
import pytest

from flows import FlowError, TrainingError
from flows import mean_field as mf
from flows import scan_snap as ss
from flows.scan_snap import observables as ss_obs
from flows.scan_snap.data import SYN_MEDIUM_QUERIES
from flows.scan_snap.model import blowup_bound
from flows.training import event_time

# --- mean field: a defaulted M_mlp follows M through replace -----------------------------------------------


def test_replace_lets_a_defaulted_M_mlp_follow_M():
    base = mf.Config(M=6)
    assert base.M_mlp == 6
    wide = base.replace(M=24)
    assert wide.M_mlp == 24 and wide == mf.Config(M=24)
    # through other replacements and a pickle round trip (what a process pool does to a config)
    assert base.replace(seed=3).replace(M=24).M_mlp == 24
    assert pickle.loads(pickle.dumps(base)).replace(M=24).M_mlp == 24
    # given explicitly, at construction or in a replace, it is kept
    assert mf.Config(M=6, M_mlp=6).replace(M=24).M_mlp == 6
    assert mf.Config(M=6, M_mlp=9).replace(M=24).M_mlp == 9
    assert base.replace(M_mlp=5).replace(M=24).M_mlp == 5
    # ... until it is handed back to the default
    assert mf.Config(M=6, M_mlp=9).replace(M_mlp=None).replace(M=24).M_mlp == 24
    # both spellings compare equal: the flag is not a field
    assert mf.Config(M=6) == mf.Config(M=6, M_mlp=6)
    with pytest.raises(ValueError, match="M_mlp"):
        base.replace(M_mlp=0)


def test_cooccurrence_replace_derives_defaulted_init_stds_again():
    from flows import cooccurrence as co

    base = co.Config(n=12, L=4, d=35, m=16, m1=8)
    wider = base.replace(m=64, m1=32)
    assert wider == co.Config(n=12, L=4, d=35, m=64, m1=32)
    assert wider.sigma0 == pytest.approx(1 / math.sqrt(4 * 64), rel=1e-15)
    assert wider.sigma1 == pytest.approx(1 / math.sqrt(32), rel=1e-15)
    assert pickle.loads(pickle.dumps(base)).replace(L=6, d=47).sigma0 == pytest.approx(1 / math.sqrt(6 * 16))
    # given explicitly, it is kept
    fixed = co.Config(n=12, L=4, d=35, m=16, m1=8, sigma0=0.3)
    assert fixed.replace(m=64).sigma0 == 0.3 and fixed.replace(m1=32).sigma1 == pytest.approx(1 / math.sqrt(32))
    with pytest.raises(ValueError, match="sigma1"):
        base.replace(sigma1=-1.0)


# --- Scan and Snap: an absurd learning rate raises TrainingError -------------------------------------------

SMALL_RUN = dict(T=8, batch_size=4, steps=6, save_every=2)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_absurd_learning_rate_raises_training_error(optimizer):
    """At lr = 1e8 the bounded gradients drive Y, Z to huge finite values and the loss to exactly 0 (no NaN);
    the run stops at the first step past `blowup_bound`, with the record of the saved steps before it."""
    with pytest.raises(TrainingError, match="non-finite at step 1") as info:
        ss.train(ss.syn_small(), optimizer, lr=1e8, **SMALL_RUN)
    err = info.value
    assert isinstance(err, FlowError) and err.step == 1
    assert err.record.steps.tolist() == [0] and len(err.record.batch_loss) == 1
    assert np.max(np.abs(err.record.Y)) <= blowup_bound(np.float64)


def test_blowup_bound_is_where_the_exponential_overflows_and_ordinary_rates_pass():
    for dtype in (np.float32, np.float64):
        bound = blowup_bound(dtype)
        assert np.isfinite(np.exp(np.asarray(bound * (1 - 1e-6), dtype)))
        with np.errstate(over="ignore"):
            assert np.isinf(np.exp(np.asarray(bound * (1 + 1e-6), dtype)))
    # the rates of the paper's figures (SGD 1, Adam 1) train without an error
    for optimizer in ("sgd", "adam"):
        rec = ss.train(ss.syn_small(), optimizer, lr=1.0, **SMALL_RUN)
        assert rec.steps.tolist() == [0, 2, 4, 6]


# --- Scan and Snap: paper_time on the full flow ------------------------------------------------------------


def test_paper_time_is_honoured_by_the_full_flow():
    """paper_time=True runs Z at K eta_Z (Lemma 4 drops P(n) = 1/K from the Z-flow only), Y at eta_Y; not given,
    the full flow runs on the network's clock (paper_time=False)."""
    classes = ss.syn_small()
    K = classes.num_classes
    ts = np.linspace(0.0, 20.0, 5)
    kw = dict(ts=ts, rtol=1e-10, atol=1e-12)
    default = ss.solve_flow(classes, lr=1.0, **kw)
    network = ss.solve_flow(classes, lr=1.0, paper_time=False, **kw)
    paper = ss.solve_flow(classes, lr=1.0, paper_time=True, **kw)
    faster_z = ss.solve_flow(classes, lr={"Y": 1.0, "Z": float(K)}, paper_time=False, **kw)
    for name in ("Y", "Z"):
        np.testing.assert_array_equal(default.ys[name], network.ys[name])
        scale = np.max(np.abs(faster_z.ys[name]))
        assert np.max(np.abs(paper.ys[name] - faster_z.ys[name])) <= 1e-8 * scale, name
    # and it changes the flow, by far more than the solver tolerance
    gap = np.max(np.abs(paper.ys["Z"] - network.ys["Z"]))
    assert gap >= 0.1 * np.max(np.abs(network.ys["Z"])), gap
    with pytest.raises(ValueError, match="paper_time"):
        ss.solve_flow(classes, lr=1.0, ts=ts, optimizer="gd", paper_time=True)


# --- Scan and Snap: the paper's Syn-Medium sizes -----------------------------------------------------------


def test_syn_medium_names_the_papers_sizes():
    assert SYN_MEDIUM_QUERIES == (1, 3, 5, 10)
    sizes = [(c.num_classes, c.vocab_size) for c in map(ss.syn_medium, SYN_MEDIUM_QUERIES)]
    assert sizes == [(2, 33), (6, 79), (10, 125), (20, 240)]
    doc = ss.syn_medium.__doc__
    assert "{1, 3, 5, 10}" in doc and "33, 79, 125, 240" in doc


# --- event_time when the level is never crossed -------------------------------------------------------------


def _record(ts, **observables):
    return types.SimpleNamespace(
        ts=np.asarray(ts, float), observables={k: np.asarray(v, float) for k, v in observables.items()}
    )


def test_event_time_is_nan_when_the_level_is_never_crossed():
    ts = np.linspace(0.0, 3.0, 31)
    rec = _record(ts, loss=np.exp(-ts), back=np.cos(ts))  # loss: 1 -> 0.05; cos: 1 -> -1 -> ~-0.99
    # starting past the level is not a crossing: the decreasing loss never upcrosses 0.5, never goes below 0.01
    assert math.isnan(event_time(rec, "loss", 0.5, direction=True))
    assert math.isnan(event_time(rec, "loss", 0.01, direction=False))
    assert math.isnan(event_time(rec, "loss", 2.0, direction=None))
    # a series that starts past the level, comes back and crosses it: that later crossing
    lin = _record([0.0, 1.0, 2.0, 3.0], z=[1.0, -1.0, -0.5, 1.5])
    assert event_time(lin, "z", 0.0, direction=True) == pytest.approx(2.25, abs=1e-14)
    assert event_time(lin, "z", 0.0, direction=False) == pytest.approx(0.5, abs=1e-14)
    assert event_time(rec, "back", 0.0, direction=False) == pytest.approx(math.pi / 2, abs=2e-3)
    # exactly at the level at the first saved time: that time
    assert event_time(_record([0.0, 1.0], y=[0.5, 0.7]), "y", 0.5, direction=True) == 0.0
    # no interpolation across a non-finite saved value: the finite point past the level
    gap = _record([0.0, 1.0, 2.0, 3.0], y=[-1.0, math.nan, -0.5, 1.0])
    assert event_time(gap, "y", 0.0) == pytest.approx(2.0 + 1.0 / 3.0, abs=1e-14)
    assert event_time(_record([0.0, 1.0, 2.0], y=[-1.0, math.nan, 1.0]), "y", 0.0) == 2.0
    assert math.isnan(event_time(_record([0.0, 1.0], y=[math.nan, math.nan]), "y", 0.0))


# --- every flow exposes its network record's observables, by name --------------------------------------------

ATTENTION_NAMES = ("attention", "entropy", "entropy_distinct", "common_mass")


@pytest.mark.slow  # the observables are pinned in tests/scan_snap/test_observables.py
def test_scan_snap_flow_and_record_share_the_attention_observables():
    """The names are identical (the flow's state-specific `loss`/`gamma` aside), computed by the same
    `observables.attention_observables`. At lr = 1 (T = 512, batch 128, 64 SGD steps) the record follows the
    flow to within 0.3 of how far the flow moves each observable: measured 0.24 for the total entropy (it moves
    by 0.3% of its value, so the finite-T bias of the attention shows most there), 0.06 or less for the others;
    the gap is set by T and the batch, not by the rate (lr = 0.5 at T = 1024, batch 256: 0.14)."""
    classes = ss.syn_small()
    rec = ss.train(classes, "sgd", lr=1.0, T=512, batch_size=128, steps=64, save_every=16, history=False)
    full = ss.solve_flow(classes, lr=1.0, ts=rec.ts, rtol=1e-8, atol=1e-10)
    assert ss_obs.ATTENTION_OBSERVABLES == ATTENTION_NAMES
    assert set(rec.observables) == set(full.observables) == set(ATTENTION_NAMES) | {"loss"}
    # the reduced flow saves them too (its observables traced abstractly: no compile)
    args = ss.flow.flow_args(classes, 1.0, 1.0, query_rows=True)
    state = {
        "Z": np.zeros((len(classes.query_tokens), classes.vocab_size)),
        "h": np.zeros(()),
        "B": np.zeros(classes.num_classes),
    }
    observe = ss.system(classes).reduced["reduced"].observe
    assert set(jax.eval_shape(observe, 0.0, state, args)) == set(ATTENTION_NAMES) | {"gamma"}
    # the same functions on both sides
    np.testing.assert_array_equal(np.asarray(ss_obs.distinct_tokens(classes.cond_probs)), classes.distinct_mask)
    np.testing.assert_array_equal(np.asarray(ss_obs.common_tokens(classes.cond_probs)), classes.common_mask)
    for source in (rec.observables, full.observables):
        c = np.asarray(source["attention"])
        np.testing.assert_allclose(source["entropy"], ss_obs.entropy(c), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(
            source["entropy_distinct"], ss_obs.entropy_distinct(c, classes.distinct_mask), rtol=1e-12, atol=1e-14
        )
        np.testing.assert_allclose(
            source["common_mass"], ss_obs.common_mass(c, classes.common_mask), rtol=1e-12, atol=1e-14
        )
    for name in ATTENTION_NAMES:
        flow = np.asarray(full.observables[name])
        moved = np.max(np.abs(flow - flow[0]))
        gap = np.max(np.abs(np.asarray(rec[name]) - flow))
        assert moved > 0 and gap <= 0.3 * moved, (name, gap, moved)
