"""The sympy-reduced co-occurrence trajectories pinned against the exact Gram ODE.

On a **symmetric instance** (theory variant: every random token occurs once; exact group proportions; random
tokens start inert: G = 0, zero scores as keys and as queries, no Gram coupling to mu_1..mu_3, identical
random blocks) the 3-token right-hand side equals the exact one (tests/cooccurrence/test_reduced.py). Along a
trajectory the two still differ by what the reduction drops on purpose (reduced.py, derivations.cooccurrence,
Lemmas E.6/F.14): the random tokens learn, each by O(1/n) (z_r = c_i sum_l p_l, c_i = g_i y_i / n), so the
exact flow is the reduced one plus a/n + O(1/n^2). The pins, observable by observable, for n = 48 and 96:

- the relative error falls like 1/n (ratio 1.6-2.4 between n = 48 and 96);
- the Richardson limit 2 x(96) - x(48) equals the reduced trajectory to 2 % of the observable's change
  (measured <= 0.9 %): the reduction is the n -> infinity limit of the exact flow, and a wrong factor in it
  (which does not fall with n) fails both.

The phase-2 skeleton drops the m1 M_V term and freezes the attention: it is the exact flow's n -> infinity
limit where those vanish exactly, at A = M_K = M_Q = 0 (then dA = dM_K = dM_Q = 0: uniform attention for
ever) and m1 = 0 (no M_V term; S constant). Its dS equation (m1 > 0) is pinned at the level of the
right-hand side in test_reduced.py.

The default run integrates the reduced and the exact right-hand sides with scipy (jitted, no solve compile);
the slow tests repeat the comparison through `solve_flow` (the limits "three_token", "phase2" and "gram").
"""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import flows
from flows import cooccurrence as co
from flows.cooccurrence import reduced

L, M_WIDTH, M1 = 3, 16, 8
NS = (48, 96)
TS = np.linspace(0.0, 2.0, 9)  # the loss falls from 0.65 to ~0.23
ERR_MAX = 0.12  # relative error at n = 96 (the 1/n term: measured 3-9 %)
RATIO = (1.6, 2.4)  # err(48) / err(96), 2 for a 1/n error
RICHARDSON_TOL = 0.02  # |2 x(96) - x(48) - reduced| / (change of x), measured <= 0.009
_ORDER = ("G", "S", "M_V", "M_K", "M_Q", "A")
BLOCKS = {
    "G": slice(0, 3),
    "S": slice(3, 4),
    "A": slice(4, 13),
    "M_V": slice(13, 22),
    "M_K": slice(22, 31),
    "M_Q": slice(31, 40),
}


def config(n):
    return co.Config(n=n, L=L, d=3 + co.num_random_slots(n, L), m=M_WIDTH, m1=M1)


def symmetric_state(d, phase2=False, seed=1):
    """Random special blocks, random tokens inert and alike (scale I/L blocks, no coupling)."""
    rng = np.random.default_rng(seed)
    st = {"G": np.zeros(d), "S": np.asarray(16.0), "A": np.zeros((d, d))}
    for k in ("M_V", "M_K", "M_Q"):
        st[k] = np.eye(d) / L
    st["G"][:3] = 0.3 * rng.normal(size=3)
    if phase2:
        st["A"][:] = st["M_K"][:] = st["M_Q"][:] = 0.0
    else:
        st["A"][:3, :3] = 2.0 * rng.normal(size=(3, 3))
        for k in ("M_V", "M_K", "M_Q"):
            X = 0.5 * rng.normal(size=(3, 3))
            st[k][:3, :3] = X @ X.T + 0.1 * np.eye(3)
    return {k: jnp.asarray(v, jnp.float64) for k, v in st.items()}


def _unflat(y, d):
    out, i = {}, 0
    for k in _ORDER:
        shape = (d,) if k == "G" else () if k == "S" else (d, d)
        size = int(np.prod(shape))
        out[k] = y[i : i + size].reshape(shape)
        i += size
    return out


def _flat(state):
    return jnp.concatenate([jnp.ravel(state[k]) for k in _ORDER])


@functools.partial(jax.jit, static_argnames="d")
def _exact_rhs(t, y, args, d):
    return _flat(co.vector_field(t, _unflat(y, d), args))


def _numpy_generated(module):
    """The generated right-hand side, its very source evaluated with numpy instead of jax.numpy: the 3-token
    system is ~300k characters of scalar algebra whose XLA compile alone takes 4-10 s on two busy cores.
    (The jnp version is checked against it at the initial state.)"""
    src = inspect.getsource(module)
    assert src.count("import jax.numpy as jnp") == 1
    namespace = {}
    exec(compile(src.replace("import jax.numpy as jnp", "import numpy as jnp"), module.__file__, "exec"), namespace)
    return lambda t, y, args: namespace["vector_field"](t, y, {k: float(v) for k, v in args.items()})


def numpy_loss(G, A, tokens, labels, sqrt_m):
    """(1/n) sum_i log(1 + e^{-y_i F_i}), F_i = sum_l sum_h softmax_h(A[x_h, x_l] / sqrt m) G(x_h) (eq. 1 with
    G), written out in numpy."""
    total = 0.0
    for x, y in zip(np.asarray(tokens), np.asarray(labels), strict=True):
        s = A[np.ix_(x, x)] / sqrt_m  # s[h, l]: key h, query l
        p = np.exp(s - s.max(axis=0))
        p /= p.sum(axis=0)
        F = float(np.sum(p * G[x][:, None]))
        total += np.logaddexp(0.0, -y * F)
    return total / len(labels)


def _integrate(rhs, y0, args, **static):
    # t as a Python float on every call (scipy passes a float first, numpy floats after: two jit signatures
    # of one program, compiled twice)
    sol = solve_ivp(
        lambda t, y: np.asarray(rhs(float(t), jnp.asarray(y), args, **static)),
        (TS[0], TS[-1]),
        np.asarray(y0),
        t_eval=TS,
        method="DOP853",
        rtol=1e-10,
        atol=1e-12,
    )
    assert sol.success
    return sol.y.T


def _integrate_numpy(rhs, y0, args):
    sol = solve_ivp(
        lambda t, y: rhs(t, y, args),
        (TS[0], TS[-1]),
        np.asarray(y0),
        t_eval=TS,
        method="DOP853",
        rtol=1e-10,
        atol=1e-12,
    )
    assert sol.success
    return sol.y.T


def _exact(n, phase2):
    """The exact flow on the symmetric instance of size n: 3-token coordinates and loss at TS."""
    cfg = config(n)
    args = co.spec.data(cfg, num_test=6)
    if phase2:
        args = dict(args, m1=jnp.asarray(0.0, jnp.float64))
    state = symmetric_state(cfg.d, phase2)
    ys = _integrate(_exact_rhs, _flat(state), args, d=cfg.d)
    d, sqrt_m = cfg.d, float(args["sqrt_m"])
    G, S = ys[:, :d], ys[:, d : d + 1]
    mats = [ys[:, d + 1 + i * d * d : d + 1 + (i + 1) * d * d].reshape(-1, d, d) for i in range(4)]
    M_V, M_K, M_Q, A = mats
    y3 = np.concatenate([G[:, :3], S] + [X[:, :3, :3].reshape(-1, 9) for X in (A, M_V, M_K, M_Q)], axis=1)
    loss = np.array([numpy_loss(G[k], A[k], args["tokens"], args["labels"], sqrt_m) for k in range(len(TS))])
    return y3, loss, state, cfg, args


def _lifted_loss(y3s, cfg, args):
    """The loss of 3-token states read as full states whose random tokens are inert."""
    out = []
    for y in y3s:
        G = np.zeros(cfg.d)
        G[:3] = y[:3]
        A = np.zeros((cfg.d, cfg.d))
        A[:3, :3] = y[BLOCKS["A"]].reshape(3, 3)
        out.append(numpy_loss(G, A, args["tokens"], args["labels"], float(args["sqrt_m"])))
    return np.array(out)


def _check_limit(name, x48, x96, xr):
    """x(n) = xr + a/n + O(1/n^2), xr the reduced trajectory (arrays over saved times)."""
    scale = float(np.max(np.abs(xr - xr[:1])))
    assert scale > 0, name
    e48, e96 = (float(np.max(np.abs(x - xr))) / scale for x in (x48, x96))
    rich = float(np.max(np.abs(2 * x96 - x48 - xr))) / scale
    assert e96 <= ERR_MAX, (name, e96)
    assert RATIO[0] <= e48 / e96 <= RATIO[1], (name, e48, e96)
    assert rich <= RICHARDSON_TOL, (name, rich)
    return e96, rich


def test_reduced_trajectories_are_the_large_n_limit_of_the_exact_flow():
    """One test (four exact solves, two compiles; under pytest-xdist a shared fixture would be built on
    every worker). The 3-token system on the generic symmetric instance, then the phase-2 skeleton."""
    exact = {(n, phase2): _exact(n, phase2) for n in NS for phase2 in (False, True)}
    (p48, l48, *_), (p96, l96, state, cfg, args) = exact[48, False], exact[96, False]
    y0 = reduced.three_token_state(state)
    np.testing.assert_allclose(p96[0], np.asarray(y0), rtol=0, atol=0)
    rhs = _numpy_generated(reduced._gen3)
    a3 = reduced.three_token_args(cfg)
    y_check = np.asarray(y0) + 0.1 * np.sin(np.arange(40.0))
    np.testing.assert_allclose(
        rhs(0.0, y_check, a3), reduced.three_token_vector_field(0.0, jnp.asarray(y_check), a3), rtol=1e-12, atol=1e-14
    )
    y3 = _integrate_numpy(rhs, y0, a3)
    for name, sl in BLOCKS.items():
        _check_limit(name, p48[:, sl], p96[:, sl], y3[:, sl])
    _check_limit("loss", l48, l96, _lifted_loss(y3, cfg, args))
    assert l96[-1] < 0.5 * l96[0]  # it trains
    # phase 2
    (p48, l48, *_), (p96, l96, state, *_) = exact[48, True], exact[96, True]
    for p in (p48, p96):  # exact invariance of the instance: no score or key/query Gram ever moves
        assert np.all(p[:, 4:13] == 0.0) and np.all(p[:, 22:40] == 0.0)
        np.testing.assert_allclose(p[:, 3], p[0, 3], rtol=1e-13)  # S frozen at m1 = 0
    y0 = np.asarray(reduced.three_token_state(state))[:4]
    y2 = _integrate_numpy(_numpy_generated(reduced._gen2), y0, {"m1": 0.0})
    _check_limit("G", p48[:, :3], p96[:, :3], y2[:, :3])
    loss2 = np.asarray(jax.vmap(lambda y: reduced.phase2_loss(0.0, y, None))(jnp.asarray(y2)))  # its "loss"
    _check_limit("loss", l48, l96, loss2)
    assert l96[-1] < 0.5 * l96[0]


@pytest.mark.slow
def test_library_solves_three_token_and_phase2_against_solve_flow():
    """The same limits through the library's solves: the named limits "gram", "three_token" and "phase2" of the
    spec (m1 = 0 for the phase-2 skeleton: the spec's data with m1 replaced)."""
    flows_, red = {}, {}
    for n in NS:
        for phase2 in (False, True):
            spec = co.system(config(n), num_test=6)
            data = spec.dataset(spec.keys()["data"])
            if phase2:
                spec = spec.replace(data=dict(data, m1=jnp.asarray(0.0, jnp.float64)))
            state = symmetric_state(config(n).d, phase2)
            tight = dict(rtol=1e-10, atol=1e-12)
            flows_[n, phase2] = flows.solve_flow(spec, TS, reduced="gram", y0=state, **tight).observables
            y0 = reduced.three_token_state(state)
            red[phase2] = flows.solve_flow(
                spec, TS, reduced="phase2" if phase2 else "three_token", y0=y0[:4] if phase2 else y0, **tight
            )
    three = red[False].observables
    for name in ("G", "S", "A"):
        _check_limit(name, *(np.asarray(flows_[n, False][name]) for n in NS), np.asarray(three[name]))
    two = red[True]
    _check_limit("G", *(np.asarray(flows_[n, True]["G"]) for n in NS), np.asarray(two.observables["G"]))
    _check_limit("loss", *(np.asarray(flows_[n, True]["loss"]) for n in NS), np.asarray(two.observables["loss"]))
