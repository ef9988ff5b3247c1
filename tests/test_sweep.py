"""`flows._sweep`: how `solve_batch` runs a sweep (lockstep or vmapped). Each member of a lockstep sweep equals its
own solve to the tolerances (against closed forms and against the vmapped sweep), the stacked state keeps the
members apart, the error norm is each member's own, and a failed lockstep solve falls back to the vmapped one
so that every member reports its own status (on a divergence in the default run; on an exhausted step
budget in the slow one)."""

import jax.numpy as jnp
import numpy as np
import pytest

from flows import _sweep, solve, solve_batch
from flows._program import COMPILED
from flows.events import Event


def decay(t, y, args):
    return -args * y


def pair_field(t, y, args):
    """A pytree state of two leaves of different shapes: a (2,) vector rotating at rate w, a scalar decaying."""
    w, k = args["w"], args["k"]
    v = y["v"]
    return {"v": jnp.stack([-w * v[1], w * v[0]]), "s": -k * y["s"]}


@pytest.fixture
def strategy(monkeypatch):
    def use(name):
        monkeypatch.setattr(_sweep.config, "strategy", name)

    return use


def test_lockstep_members_equal_closed_forms_and_the_vmapped_sweep(strategy):
    """64 decay rates: lockstep (the default) and vmapped agree with exp(-k t) at rtol 1e-8 and with each
    other to the tolerances; in lockstep every member reports the one shared step count, which is at least
    the largest of the vmapped members' own."""
    rates = np.linspace(0.1, 4.0, 64)
    ts = np.linspace(0.0, 2.0, 9)
    kw = dict(t1=2.0, ts=ts, args=rates, rtol=1e-10, atol=1e-12)
    lock = solve_batch(decay, np.array([1.0, 2.0]), **kw)
    strategy("vmap")
    vm = solve_batch(decay, np.array([1.0, 2.0]), **kw)
    exact = np.exp(-np.outer(rates, ts))[:, :, None] * np.array([1.0, 2.0])
    for tr in (lock, vm):
        assert tr.ok and np.shape(tr.ys) == (64, 9, 2) and np.shape(tr.ts) == (64, 9)
        np.testing.assert_allclose(np.asarray(tr.ys), exact, rtol=1e-8)
        np.testing.assert_array_equal(np.asarray(tr.ts), np.broadcast_to(ts, (64, 9)))
    np.testing.assert_allclose(np.asarray(lock.ys), np.asarray(vm.ys), rtol=1e-8, atol=1e-12)
    assert len(set(np.asarray(lock.num_steps).tolist())) == 1
    assert int(lock.num_steps[0]) >= int(np.max(vm.num_steps))
    assert len(set(np.asarray(vm.num_steps).tolist())) > 1  # the vmapped members stepped on their own


def test_stacked_state_keeps_members_apart():
    """A pytree state (a (2,) vector and a scalar) with batched y0 and batched args: member i equals the single
    solve of member i (a wrong ravel order of the stacked state would mix members or leaves)."""
    n = 5
    y0 = {"v": np.stack([np.arange(1.0, n + 1), np.zeros(n)], axis=1), "s": np.linspace(1.0, 3.0, n)}
    args = {"w": np.linspace(0.5, 2.5, n), "k": np.linspace(0.2, 1.0, n)}
    kw = dict(t1=1.5, ts=np.linspace(0.0, 1.5, 4), rtol=1e-10, atol=1e-12)
    batch = solve_batch(pair_field, y0, args=args, batch_y0=True, **kw)
    assert batch.ok and np.shape(batch.ys["v"]) == (n, 4, 2) and np.shape(batch.ys["s"]) == (n, 4)
    for i in range(n):
        one = solve(pair_field, {k: v[i] for k, v in y0.items()}, args={k: v[i] for k, v in args.items()}, **kw)
        np.testing.assert_allclose(np.asarray(batch.ys["v"][i]), np.asarray(one.ys["v"]), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(np.asarray(batch.ys["s"][i]), np.asarray(one.ys["s"]), rtol=1e-8)
        t = np.linspace(0.0, 1.5, 4)
        r, w = y0["v"][i, 0], args["w"][i]
        np.testing.assert_allclose(np.asarray(batch.ys["v"][i]), np.stack([r * np.cos(w * t), r * np.sin(w * t)], 1),
                                   rtol=1e-8, atol=1e-10)  # fmt: skip


def test_unbatched_args_and_observables_only():
    """batch_y0 with shared args, observables without states: the observables per member, ys None."""
    y0 = np.linspace(1.0, 2.0, 6)[:, None]
    batch = solve_batch(
        decay,
        y0,
        t1=1.0,
        ts=np.array([0.0, 0.5, 1.0]),
        args=np.asarray(0.7),
        batch_y0=True,
        batch_args=False,
        observables={"half": lambda t, y, a: 0.5 * y[0]},
        save_states=False,
        rtol=1e-10,
        atol=1e-12,
    )
    assert batch.ys is None and np.shape(batch.observables["half"]) == (6, 3)
    want = 0.5 * y0[:, :1] * np.exp(-0.7 * np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(np.asarray(batch.observables["half"]), want, rtol=1e-9)


def test_error_norm_is_each_members_own():
    """63 members at rate 0 (exact in any step) and one at rate 3: the moving member's error equals its own
    solve's (each member's RMS norm, the largest taken). An RMS over all 64 members lets its scaled error grow
    8x: measured 1.0x its own solve's error here, 8.7x with that norm (28 steps instead of 40)."""
    rates = np.zeros(64)
    rates[17] = 3.0
    kw = dict(t1=4.0, ts=np.array([4.0]), rtol=1e-6, atol=1e-9)
    y0 = np.ones(3)
    batch = solve_batch(decay, y0, args=rates, **kw)
    alone = solve(decay, y0, args=np.asarray(3.0), **kw)
    exact = np.exp(-12.0)
    err_batch = np.max(np.abs(np.asarray(batch.ys[17, -1]) - exact))
    err_alone = np.max(np.abs(np.asarray(alone.ys[-1]) - exact))
    assert err_alone > 0 and err_batch <= 2.0 * err_alone, (err_batch, err_alone)
    np.testing.assert_array_equal(np.asarray(batch.ys[:17, -1]), 1.0)


def test_failed_lockstep_solve_falls_back_to_each_members_status(strategy, caplog):
    """A member that blows up ends the lockstep solve; the batch is then solved vmapped, so the other member
    is ok and carries its own result, statuses and messages as with strategy='vmap'."""

    def square(t, y, args):
        return y**2

    ys0 = np.array([[0.5], [1.0]])
    kw = dict(t1=1.5, batch_y0=True, batch_args=False, max_steps=4096)
    with caplog.at_level("DEBUG", logger="flows._sweep"):
        batch = solve_batch(square, ys0, **kw)
    assert "lockstep solve ended diverged" in caplog.text
    strategy("vmap")
    vm = solve_batch(square, ys0, **kw)
    assert batch.status == vm.status == ("ok", "diverged") and batch.message == vm.message
    np.testing.assert_allclose(float(batch.ys[0, -1, 0]), 0.5 / (1 - 0.5 * 1.5), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(batch.num_steps), np.asarray(vm.num_steps))


def bump(t, y, args):
    """A narrow pulse at time `args`: a solver needs small steps near it and large ones elsewhere."""
    return jnp.exp(-(((t - args) / 0.05) ** 2)) * jnp.ones_like(y)


@pytest.mark.slow
def test_max_steps_in_lockstep_falls_back(caplog):
    """Pulses at different times: the lockstep solve takes both members' small steps and exhausts a budget that
    each member meets alone (measured 69 and 79 steps alone, 127 in lockstep); the vmapped fallback solves every
    member (integral 0.05 sqrt(pi))."""
    centres = np.array([0.3, 0.7])
    kw = dict(t1=1.0, rtol=1e-8, atol=1e-10)
    budget = max(int(solve(bump, np.zeros(1), args=np.asarray(c), **kw).num_steps) for c in centres)
    with caplog.at_level("DEBUG", logger="flows._sweep"):
        batch = solve_batch(bump, np.zeros(1), args=centres, max_steps=budget, **kw)
    assert "lockstep solve ended max_steps" in caplog.text
    assert batch.ok and max(np.asarray(batch.num_steps)) <= budget
    np.testing.assert_allclose(np.asarray(batch.ys[:, -1, 0]), 0.05 * np.sqrt(np.pi), rtol=1e-7)


def test_event_runs_vmapped_and_one_program_per_strategy(strategy):
    """An event is per member (each stops at its own time): vmapped. Without one, the lockstep program is
    compiled once and reused for new rates."""
    ev = Event(lambda t, y, a: y[0] - 0.5)
    rates = np.array([1.0, 2.0, 4.0])
    batch = solve_batch(decay, np.ones(1), t1=3.0, args=rates, event=ev, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(batch.t_event), np.log(2.0) / rates, rtol=1e-8)
    assert len(set(np.asarray(batch.num_steps).tolist())) > 1
    before = set(COMPILED)
    solve_batch(decay, np.ones(4), t1=1.0, args=rates * 3)
    again = solve_batch(decay, np.ones(4), t1=1.0, args=rates * 5)
    assert again.compile_s == 0.0 and len(set(COMPILED) - before) <= 1
    strategy("bad")
    with pytest.raises(ValueError, match="strategy"):
        solve_batch(decay, np.ones(1), t1=1.0, args=rates)
    strategy("auto")
    for name, bad in (("chunk", 1), ("chunk", 8.5), ("chunk", True), ("chunk_entries", -1)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_sweep.config, name, bad)
            with pytest.raises(ValueError, match=f"config.{name} must be an integer"):
                solve_batch(decay, np.ones(1), t1=1.0, args=rates)


def test_chunks_split_into_equal_consecutive_pieces():
    """`chunks`: equal widths of at most `config.chunk` members, consecutive, the last padded with the last
    member; a small state takes as many members as `config.chunk_entries` entries need."""
    assert _sweep.config.chunk == 64 and _sweep.config.chunk_entries == 4096
    assert [(list(i), r) for i, r in _sweep.chunks(5, 1000)] == [([0, 1, 2, 3, 4], 5)]
    got = _sweep.chunks(130, 71)
    assert [len(i) for i, _ in got] == [44, 44, 44] and [r for _, r in got] == [44, 44, 42]
    np.testing.assert_array_equal(np.concatenate([i[:r] for i, r in got]), np.arange(130))
    np.testing.assert_array_equal(got[-1][0][-3:], [129, 129, 129])
    assert [len(i) for i, _ in _sweep.chunks(256, 71)] == [64] * 4
    assert [len(i) for i, _ in _sweep.chunks(256, 3)] == [256]  # 4096 / 3 entries: one chunk
    assert [len(i) for i, _ in _sweep.chunks(300, 32)] == [100] * 3  # at most 4096 / 32 = 128 members of 32 entries


def test_large_batch_runs_in_lockstep_chunks(monkeypatch, caplog):
    """130 decay rates in chunks of at most 32 (5 of 26): every member equals exp(-k t); the members of a chunk
    share its step count and the chunks of slow and fast rates take different counts (one lockstep solve would
    give every member the largest). A member that blows up (a negative rate) sends only its own chunk to the
    vmapped solve, through the same compiled lockstep program: the other chunks keep their shared counts."""
    monkeypatch.setattr(_sweep.config, "chunk", 32)
    monkeypatch.setattr(_sweep.config, "chunk_entries", 0)
    rates = np.linspace(0.1, 6.0, 130)
    ts = np.linspace(0.0, 2.0, 5)
    kw = dict(t1=2.0, ts=ts, rtol=1e-10, atol=1e-12, max_steps=4096)
    lock = solve_batch(decay, np.array([1.0]), args=rates, **kw)
    assert lock.ok and np.shape(lock.ys) == (130, 5, 1) and len(lock.status) == len(lock.segments) == 130
    np.testing.assert_allclose(np.asarray(lock.ys[:, :, 0]), np.exp(-np.outer(rates, ts)), rtol=1e-8)
    steps = np.asarray(lock.num_steps)
    per_chunk = [set(steps[i : i + 26].tolist()) for i in range(0, 130, 26)]
    assert all(len(s) == 1 for s in per_chunk) and len(set.union(*per_chunk)) > 1
    wild = rates.copy()
    wild[40] = -1000.0  # chunk 1: y = e^{1000 t} blows up
    with caplog.at_level("DEBUG", logger="flows._sweep"):
        mixed = solve_batch(decay, np.array([1.0]), args=wild, **kw)
    assert mixed.compile_s > 0 and caplog.text.count("lockstep solve ended") == 1
    assert mixed.status[40] not in ("ok", "event") and all(s == "ok" for i, s in enumerate(mixed.status) if i != 40)
    m = np.asarray(mixed.num_steps)
    assert len(set(m[26:52].tolist())) > 1  # chunk 1: each member its own count (vmapped)
    np.testing.assert_array_equal(m[:26], steps[:26])  # the others in lockstep, as before
    np.testing.assert_array_equal(m[52:], steps[52:])
    keep = np.arange(130) != 40
    np.testing.assert_allclose(np.asarray(mixed.ys[keep, :, 0]), np.exp(-np.outer(wild[keep], ts)), rtol=1e-8)
