"""The continuous-depth reference: the node adjoint against re-solves and finite differences, the
closed-form velocity against autodiff, the scan of solver steps against diffrax.diffeqsolve, depth convergence of
the finite network to the reference (forward, velocity, and after training), K-convergence, the energy
identity (at tau = 0 in the default run, along the reference flow in `-m slow`), and input validation.

The tau-solves (`solve_reference`, the network flows to tau = 1) compile for about 10 s each on one core, so
the checks along the flow are `slow`; their tau = 0 versions (velocity convergence in L at L = 4, 8; the
energy identity as a derivative along the velocity) stay in the default run, and so does a short-horizon twin
of the trained-network check (tests/mean_field/test_reference_widths.py, which also holds the checks with
M_mlp != M: this module's config has equal widths)."""

import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows import mean_field as mf
from flows.mean_field import model
from flows.mean_field import reference as ref

CFG = mf.Config(d=2, D=3, N=4, L=4, M=4, n_train=8, n_test=8, lam=1e-2, init_scale=2.0, init="smooth", seed=1)
SCHEME = "tsit5"  # the depth solver of the default scheme
SUB = 8  # depth substeps per node interval for the forward checks (Tsit5: ODE error far below the gaps)
_net_forward = jax.jit(model.predict, static_argnums=(2, 3))
TAUS = np.linspace(0.0, 1.0, 11)  # save times of the flows in tau


def _max_abs(tree):
    return max(float(np.max(np.abs(np.asarray(a)))) for a in jax.tree_util.tree_leaves(tree))  # on the host


def _max_diff(a, b):
    return _max_abs(jax.tree_util.tree_map(lambda x, y: np.asarray(x) - np.asarray(y), a, b))


def _normal(key, shape):
    """`jax.random.normal(key, shape)` drawn flat and reshaped (the same values: the threefry bits depend on
    the flat index only; a rank-1 draw compiles several times faster than a rank-4 one), as numpy."""
    return np.asarray(jax.random.normal(key, (math.prod(shape),))).reshape(shape)


@pytest.fixture(scope="module")
def data():
    return mf.training_set(CFG)


@pytest.fixture(scope="module")
def curved_nodes():
    """K = 5 nodes of non-linear curves: the smooth initial law plus a node-wise perturbation."""
    base = ref.init_reference(CFG, 5)
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    return {
        k: jnp.asarray(np.asarray(base[k]) + 0.3 * CFG.init_radius * _normal(key, base[k].shape))
        for k, key in zip(("V", "W", "W1", "W2"), keys, strict=True)
    }


@pytest.fixture(scope="module")
def adjoint(curved_nodes, data):
    return ref.reference_adjoint(CFG, curved_nodes, data, substeps=4)


def _risk_from(tail, Zk, y, grid, delta):
    """R re-solved from node k with the sub-curve tail = nodes[k:] starting at Z(s_k) (no eps machinery)."""
    K = tail["V"].shape[0]
    Zs = ref._integrate(tail, Zk, jnp.zeros((K,) + Zk.shape), grid, jnp.asarray(CFG.threshold), SCHEME, delta=delta)
    err = Zs[-1][:, CFG.d, -1] - y
    return 0.5 * jnp.mean(err * err)


# --------------------------------------------------------------------------- 1. adjoint and velocity


def test_adjoint_at_the_end_node_is_the_readout_gradient(curved_nodes, data, adjoint):
    Z, P = (np.asarray(x) for x in adjoint)  # host checks: no compiled programs
    yhat = Z[-1][:, CFG.d, -1]
    want = np.zeros_like(Z[-1])
    want[:, CFG.d, -1] = (yhat - np.asarray(data.y)) / data.y.shape[0]
    assert np.max(np.abs(P[-1] - want)) <= 1e-15
    assert np.max(np.abs(Z[0] - np.asarray(data.Z0))) == 0.0
    fwd = np.asarray(ref.reference_forward(CFG, curved_nodes, data.Z0, substeps=4))
    assert np.max(np.abs(fwd - yhat)) <= 1e-14


def test_node_adjoint_equals_the_gradient_of_a_resolve_from_that_node(curved_nodes, data, adjoint):
    """P(s_k) from the eps perturbations (one reverse pass) = jax.grad of R re-solved from s_k with the
    sub-curve nodes[k:] (to 1e-12; measured: bitwise equal), and = central finite differences of that
    re-solve (to 1e-7 relative; measured 7e-10), at the interior node k = 1 (three segments behind it)."""
    k = 1
    Z, P = adjoint
    tail = {name: v[k:] for name, v in curved_nodes.items()}
    grid, delta = ref.depth_grid(4), 1.0 / (curved_nodes["V"].shape[0] - 1)
    direction = jnp.asarray(_normal(jax.random.PRNGKey(k), Z[k].shape))
    h = 1e-4

    @jax.jit
    def grad_and_fd(Zk, direction):  # one compiled program: the gradient and the two re-solves
        g = jax.grad(_risk_from, argnums=1)(tail, Zk, data.y, grid, delta)
        fd = (
            _risk_from(tail, Zk + h * direction, data.y, grid, delta)
            - _risk_from(tail, Zk - h * direction, data.y, grid, delta)
        ) / (2 * h)
        return g, fd

    g, fd = grad_and_fd(Z[k], direction)
    P_k = np.asarray(P[k])
    scale = float(np.max(np.abs(P_k)))
    assert scale > 1e-4  # a non-trivial adjoint
    assert float(np.max(np.abs(np.asarray(g) - P_k))) <= 1e-12 * scale
    exact = float(np.sum(P_k * np.asarray(direction)))
    assert abs(float(fd) - exact) <= 1e-7 * max(abs(exact), 1e-3), (float(fd), exact)


def test_velocity_is_the_pointwise_first_variation_gradient(curved_nodes, data, adjoint):
    """v(s_k) = -grad_theta sum_prompts <P(s_k), f(Z(s_k), theta) + h(Z(s_k), w)> - lam theta at every node,
    the gradient by jax.grad of the sums (separable over particles) instead of the closed form."""
    Z, P = adjoint
    v = ref.reference_velocity(CFG, curved_nodes, data, substeps=4)

    def pairing(p, Zk, Pk):
        upd = attention_and_mlp(Zk, p)
        return jnp.sum(Pk * upd)

    def attention_and_mlp(Zk, p):
        return model.attention_update(Zk, p["V"], p["W"]) + model.mlp_update(Zk, p["W1"], p["W2"], CFG.threshold)

    grad = jax.jit(jax.vmap(jax.grad(pairing)))(curved_nodes, Z, P)
    want = {k: -grad[k] - CFG.lam * curved_nodes[k] for k in curved_nodes}
    assert _max_diff(v, want) <= 1e-10 * _max_abs(want)
    assert _max_abs(v) > 1e-3


def _diffeqsolve_adjoint(nodes, Z0, y, substeps):
    """The states and node adjoints of the depth ODE through one `diffrax.diffeqsolve` per node interval
    (`StepTo` the grid, `RecursiveCheckpointAdjoint`): the plain form of the library's scan of solver steps."""
    K, M, Mm = nodes["V"].shape[0], nodes["V"].shape[1], nodes["W1"].shape[1]
    grid = ref.depth_grid(substeps, Z0.dtype)

    def field(u, Z, ab):
        p = {k: (1.0 - u) * ab[0][k] + u * ab[1][k] for k in ab[0]}
        att = model.attention_update(Z, p["V"], p["W"]) / M
        return (att + model.mlp_update(Z, p["W1"], p["W2"], CFG.threshold) / Mm) / (K - 1)

    def segment(Z, ab):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            diffrax.Tsit5(),
            t0=0.0,
            t1=1.0,
            dt0=None,
            y0=Z,
            args=ab,
            stepsize_controller=diffrax.StepTo(ts=grid),
            max_steps=substeps,
            saveat=diffrax.SaveAt(t1=True),
            adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=substeps),
        )
        return sol.ys[0]

    def risk_of_eps(eps):
        states = [Z0 + eps[0]]
        for k in range(K - 1):
            ab = ({g: v[k] for g, v in nodes.items()}, {g: v[k + 1] for g, v in nodes.items()})
            states.append(segment(states[-1], ab) + eps[k + 1])
        err = states[-1][:, CFG.d, -1] - y
        return 0.5 * jnp.mean(err * err), jnp.stack(states)

    P, Z = jax.jit(jax.grad(risk_of_eps, has_aux=True))(jnp.zeros((K,) + Z0.shape, Z0.dtype))
    return Z, P


def test_the_scan_of_solver_steps_matches_diffeqsolve(curved_nodes, data, adjoint):
    """The reverse pass through one `diffrax.diffeqsolve` per interval (RecursiveCheckpointAdjoint) gives
    the same states and node adjoints as the library's scan of the solver's steps (same arithmetic)."""
    Z, P = (np.asarray(x) for x in _diffeqsolve_adjoint(curved_nodes, data.Z0, data.y, 4))
    Z_scan, P_scan = (np.asarray(x) for x in adjoint)
    assert np.max(np.abs(Z - Z_scan)) <= 1e-13
    assert np.max(np.abs(P - P_scan)) <= 1e-13 * np.max(np.abs(P_scan))


# --------------------------------------------------------------------------- 2. depth convergence at tau = 0


def test_network_forward_converges_to_the_reference_like_one_over_L(data):
    """Same curves (init "smooth": linear in t, represented exactly by any K): the network samples them at
    t_l = l / L (Euler with splitting), the reference integrates the ODE (K = 9; K = 5 with 4 substeps is the
    program of the first test). Measured (max over prompts): gaps 1.46e-01, 7.60e-02, 3.87e-02 at L = 4, 8, 16
    (ratios 1.92, 1.96; 1.95e-02 at L = 32, ratio 1.98); the reference moves by 1.9e-07 from K = 5 to K = 9
    (ODE error only: twice the depth steps)."""
    y5, y9 = (np.asarray(ref.reference_forward(CFG, ref.init_reference(CFG, K), data.Z0, substeps=4)) for K in (5, 9))
    ref_change = float(np.max(np.abs(y9 - y5)))
    gaps = []
    for L in (4, 8, 16):
        cfg = CFG.replace(L=L)
        yL = _net_forward(mf.init_particles(cfg), data.Z0, CFG.threshold, CFG.d)
        gaps.append(float(np.max(np.abs(np.asarray(yL) - y9))))
    ratios = np.array(gaps[:-1]) / np.array(gaps[1:])
    assert ref_change <= 1e-3 * min(gaps), (ref_change, gaps)
    assert np.all((ratios > 1.8) & (ratios < 2.2)), (gaps, ratios)


@jax.jit
def _network_flow(particles, Z0, y):
    """The network's particle flow d theta/d tau = `flow.vector_field` (the velocity of `solve_flow`)
    integrated by diffrax (Tsit5, constant steps tau = 0.05: the tau-error, ~1e-9, is far below the depth
    gaps; a bare diffeqsolve compiles faster than `solve_flow` with its failure checks), with Q at the
    saves `TAUS`; also the initial velocity."""
    args = {
        "Z0": Z0,
        "y": y,
        "lam": jnp.asarray(CFG.lam),
        "threshold": jnp.asarray(CFG.threshold),
        "d": jnp.asarray(CFG.d, jnp.int32),
    }
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(mf.vector_field),
        diffrax.Tsit5(),
        t0=0.0,
        t1=float(TAUS[-1]),
        dt0=0.05,
        y0=particles,
        args=args,
        saveat=diffrax.SaveAt(ts=jnp.asarray(TAUS), fn=mf.observables.objective_Q),
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=int(round(TAUS[-1] / 0.05)) + 2,
    )
    return mf.vector_field(0.0, particles, args), sol.ys


@pytest.fixture(scope="module")
def network_runs(data):
    """L -> (initial velocity, Q at `TAUS`) of the network on the smooth curves sampled at l / L."""
    return {L: _network_flow(mf.init_particles(CFG.replace(L=L)), data.Z0, data.y) for L in (4, 8, 16)}


def _velocity_gaps(data, velocities):
    """max |v_L(layer L s_k) - v_ref(s_k)| over particles and the nodes s = 0, 1/4, 1/2, 3/4, per L."""
    K = 5
    v_ref = ref.reference_velocity(CFG, ref.init_reference(CFG, K), data, substeps=4)  # the program of test 1
    gaps = []
    for L, v in velocities.items():
        layers = np.arange(K - 1) * L // (K - 1)
        gaps.append(_max_diff({k: v[k][layers] for k in v}, {k: v_ref[k][:-1] for k in v_ref}))
    return np.array(gaps)


def test_network_velocity_converges_to_the_reference_velocity(data):
    """The network's particle velocity at layer l = L s_k tends to the reference velocity at s_k (same
    curves), at rate 1/L: L = 4 and 8 here (one program per depth; L = 16 too in the slow test below).
    Measured: gaps 4.63e-02, 2.23e-02 (ratio 2.07)."""
    velocities = {L: mf.velocity(CFG.replace(L=L), mf.init_particles(CFG.replace(L=L)), data) for L in (4, 8)}
    gaps = _velocity_gaps(data, velocities)
    ratio = gaps[0] / gaps[1]
    assert 1.8 < ratio < 2.3, (gaps, ratio)


@pytest.mark.slow
def test_network_velocity_converges_to_the_reference_velocity_to_L16(data, network_runs):
    """As above at L = 4, 8, 16 (the initial velocities of the flows of `network_runs`). Measured (max over
    particles, nodes s = 0, 1/4, 1/2, 3/4): gaps 4.63e-02, 2.23e-02, 1.10e-02 (ratios 2.07, 2.04)."""
    gaps = _velocity_gaps(data, {L: v for L, (v, _) in network_runs.items()})
    ratios = gaps[:-1] / gaps[1:]
    assert np.all((ratios > 1.8) & (ratios < 2.3)), (gaps, ratios)


# --------------------------------------------------------------------------- 3-5. training, K, energy


@pytest.fixture(scope="module")
def reference_flow(data):
    obs = {k: ref.REFERENCE_OBSERVABLES[k] for k in ("Q", "dissipation")}
    return mf.solve_reference(CFG, TAUS, K=9, substeps=4, data=data, observables=obs, rtol=1e-9, atol=1e-11)


@pytest.mark.slow
def test_trained_network_converges_to_the_trained_reference(reference_flow, network_runs):
    """Both flows from the same smooth curves to tau = 1 (network: Tsit5 in tau, `_network_flow`; reference:
    `solve_reference`, adaptive Tsit5, K = 9); the Q gap along the flow falls like 1/L. Measured:
    max_tau |Q_L - Q_ref| = 9.20e-03, 4.27e-03, 2.04e-03 at L = 4, 8, 16 (ratios 2.15, 2.09); Q_ref falls
    from 0.2203 to 0.1919. Default-run twin: `test_short_reference_flow_tracks_the_network_flow_like_one_over_L`
    in tests/mean_field/test_reference_widths.py (tau = 1/2, L = 4, 8, the particle gap)."""
    Q_ref = np.asarray(reference_flow.observables["Q"])
    gaps = []
    for _, Q_L in network_runs.values():
        gaps.append(float(np.max(np.abs(np.asarray(Q_L) - Q_ref))))
    ratios = np.array(gaps[:-1]) / np.array(gaps[1:])
    assert np.all((ratios > 1.8) & (ratios < 2.4)), (gaps, ratios)
    assert Q_ref[-1] < Q_ref[0] - 0.02  # training did something


def test_reference_energy_identity_at_tau_0(curved_nodes, data):
    """The energy identity dQ_ref/dtau = -dissipation at tau = 0: the derivative of Q_ref along the velocity
    (central differences, step h = 1e-4 in tau: the O(h^2) error is far below the tolerance) matches
    `reference_dissipation` to the O(1/K^2) velocity-interpolation error. K = 5 here (the programs of the tests
    above), so the bound is 1e-2, not the 5e-3 of the K = 9 flow below. Measured: relative mismatch 4.03e-03
    on the smooth initial curves, 7.59e-03 on the curved nodes (the same at h = 1e-3). Also: the tau-vector
    field and the Q observable that `solve_reference` hands to `flows.solve` are these functions."""
    h = 1e-4
    args = ref.make_reference_args(CFG, data, substeps=4)
    for nodes, tol in ((ref.init_reference(CFG, 5), 6e-3), (curved_nodes, 1e-2)):
        v = ref.reference_velocity(CFG, nodes, data, substeps=4)
        dissipation = float(ref.reference_dissipation(nodes, v))
        Q_plus, Q_minus = (
            float(ref.reference_objective(CFG, {k: nodes[k] + s * h * v[k] for k in v}, data, substeps=4))
            for s in (1.0, -1.0)
        )
        rate = -(Q_plus - Q_minus) / (2 * h)
        assert dissipation > 1e-3 and abs(rate / dissipation - 1.0) <= tol, (rate, dissipation)
        field = ref.reference_vector_field(0.0, nodes, args)
        assert _max_diff(field, v) == 0.0
        assert float(ref.REFERENCE_OBSERVABLES["Q"](0.0, nodes, args)) == float(
            ref.reference_objective(CFG, nodes, data, substeps=4)
        )


@pytest.mark.slow
def test_reference_energy_decreases_at_the_dissipation_rate(reference_flow):
    """Q_ref is non-increasing along the flow, and -dQ_ref/dtau (central differences of the saves) matches
    the dissipation int (1/M) sum |v|^2 dt to the O(1/K^2) velocity-interpolation error. Measured (K = 9):
    relative mismatch 1.19e-03 to 1.27e-03 at the interior saves (3.0e-04 at K = 17; the same with 4x
    denser saves, so not a finite-difference error)."""
    Q = np.asarray(reference_flow.observables["Q"])
    dissipation = np.asarray(reference_flow.observables["dissipation"])
    assert np.all(np.diff(Q) <= 1e-12), np.diff(Q)
    rate = -(Q[2:] - Q[:-2]) / (TAUS[2:] - TAUS[:-2])
    rel = np.abs(rate / dissipation[1:-1] - 1.0)
    assert np.all(rel <= 5e-3), rel


def _hat_matrix(K_coarse, K_fine):
    """(K_fine, K_coarse): the piecewise-linear interpolant on K_coarse nodes evaluated at K_fine nodes."""
    s = np.linspace(0.0, 1.0, K_fine) * (K_coarse - 1)
    i = np.minimum(np.floor(s).astype(int), K_coarse - 2)
    u = s - i
    H = np.zeros((K_fine, K_coarse))
    H[np.arange(K_fine), i] += 1.0 - u
    H[np.arange(K_fine), i + 1] += u
    return jnp.asarray(H)


def test_reference_converges_in_K(data):
    """Q_ref of fixed non-linear curves theta_j(t) = A_j + sin(pi t) C_j interpolated on K = 3, 5, 9, 17
    nodes: successive differences fall like 1/K^2 (linear interpolation). A K-node interpolant is evaluated
    exactly on 17 nodes (the coarse nodes are fine nodes; one compiled program), checked against the direct
    K = 5 evaluation. Measured: Q = 0.28720, 0.28244, 0.28141, 0.28116; differences 4.8e-03, 1.0e-03,
    2.5e-04 (ratios 4.6, 4.2); direct (4 substeps) vs refined K = 5: 1.2e-08 (ODE error; 3.3e-10 with 8
    substeps)."""
    A = {k: np.asarray(v) for k, v in ref.init_reference(CFG.replace(init="tied"), 2).items()}
    keys = jax.random.split(jax.random.PRNGKey(11), 4)
    C = {
        k: 0.3 * CFG.init_radius * _normal(key, A[k].shape[1:])
        for k, key in zip(("V", "W", "W1", "W2"), keys, strict=True)
    }

    def curve(K):  # numpy: no compiled program per K
        s = ref.reference_nodes(CFG, K)
        return {k: A[k][0][None] + np.sin(np.pi * s).reshape((-1,) + (1,) * C[k].ndim) * C[k][None] for k in A}

    def refined(K):
        H = np.asarray(_hat_matrix(K, 17))
        return {k: np.tensordot(H, v, axes=1) for k, v in curve(K).items()}

    Qs = [float(ref.reference_objective(CFG, refined(K), data, substeps=SUB)) for K in (3, 5, 9, 17)]
    direct = float(ref.reference_objective(CFG, curve(5), data, substeps=4))  # the program of the energy test
    diffs = np.abs(np.diff(Qs))
    ratios = diffs[:-1] / diffs[1:]
    assert abs(direct - Qs[1]) <= 1e-3 * diffs[-1]
    assert np.all((ratios > 3.5) & (ratios < 5.0)), (diffs, ratios)


# --------------------------------------------------------------------------- 6. validation


def test_validation_names_the_field(data):
    with pytest.raises(ValueError, match="K"):
        ref.init_reference(CFG, 1)
    with pytest.raises(ValueError, match="K"):
        ref.reference_nodes(CFG, 2.0)
    with pytest.raises(ValueError, match="init"):
        ref.init_reference(CFG.replace(init="iid"), 5)
    with pytest.raises(ValueError, match="init"):
        mf.solve_reference(CFG.replace(init="iid"), [0.0, 1.0])
    nodes = ref.init_reference(CFG, 3)
    with pytest.raises(ValueError, match=r"nodes\['W'\]"):
        ref.reference_forward(CFG, dict(nodes, W=nodes["W"][:, :, :2]), data.Z0)
    with pytest.raises(ValueError, match=r"nodes\['W1'\]"):
        ref.reference_risk(CFG, dict(nodes, W1=nodes["W1"][:2]), data)
    with pytest.raises(ValueError, match=r"nodes\['V'\]"):
        ref.reference_objective(CFG, {k: v[:1] for k, v in nodes.items()}, data)
    with pytest.raises(ValueError, match="nodes must be a dict"):
        ref.reference_velocity(CFG, {"V": nodes["V"]}, data)
    with pytest.raises(ValueError, match="substeps"):
        ref.reference_forward(CFG, nodes, data.Z0, substeps=0)
    with pytest.raises(ValueError, match="depth_solver"):
        ref.reference_forward(CFG, nodes, data.Z0, depth_solver="euler")
    with pytest.raises(ValueError, match="K = 5"):
        mf.solve_reference(CFG, [0.0, 1.0], K=5, nodes=nodes)
    # the spec's "reference" limit starts from the curves of the system's own config, not another seed's
    with pytest.raises(ValueError, match="seed"):
        flows.solve_flow(mf.system(CFG), [0.0, 1.0], reduced="reference", seed=CFG.seed + 1)
    with pytest.raises(ValueError, match="data.Z0"):
        ref.reference_forward(CFG, nodes, data.Z0[:, :2])
