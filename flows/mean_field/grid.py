"""The Wasserstein gradient flow of the charted mean-field transformer, solved on a grid (no particles).

For a chart (`flows.mean_field.chart`) the law of depth slice t_l lives on R^p (attention; and R^q, MLP) and
follows the continuity (Fokker-Planck) equation of Gao et al. (NeurIPS 2024, the Wasserstein gradient flow of
eq. 2.4; with noise Mei-Montanari-Nguyen 2018, Thm 5)

    d rho_l / d tau = div_c( rho_l grad_c delta Q/delta rho [rho](c, t_l) ) + T Laplacian_c rho_l,

whose velocity u = -grad_c delta Q/delta rho = A^T (-grad_theta g(A c, t_l)) - lam A^T A c is the charted first
variation (`chart.charted_probe_velocity`): the data part from the adjoint of the network whose heads are the
law's atoms, plus the weight-decay drift. Switching the data term off: with zero prompts (Z0 = 0, y = 0, see
`grid_laws.zero_data`) every layer's output is 0 = y, the adjoint vanishes, and the equation is the Ornstein-Uhlenbeck
Fokker-Planck equation d rho/d tau = div(lam A^T A c rho) + T Laplacian rho, whose Gaussian solution has mean
exp(-lam tau) mu_0 and variance T/lam + (s_0^2 - T/lam) exp(-2 lam tau) (orthonormal chart;
`grid_laws.ou_moments`).

**The scheme** (method of lines, finite volumes). Each group's box [lower, upper] is cut into cells of widths
h_k; the state holds the cell masses m_i (probabilities) of every depth slice and the mass that left the box.
Through the face between cells i and i+1 along axis k the mass flux is

    G_{i+1/2} = (u_f^+ m^-_{i+1/2} + u_f^- m^+_{i+1/2}) / h_k - T (m_{i+1} - m_i) / h_k^2,

with u_f the k-th component of the velocity at the face centre, and m^-, m^+ the upwind states: the cell
masses (`flux="upwind"`, first order) or van Leer-limited linear reconstructions (`flux="muscl"`, second order
on smooth laws, no new extrema). Then dm_i/dtau = -(G_{i+1/2} - G_{i-1/2}) summed over the axes: conservative,
so the masses sum to their initial total up to rounding. Outside the box the density is zero; what crosses the
boundary faces is added to the state's `escaped` mass (total mass in box + escaped is conserved), and a solve
whose escaped mass passes `mass_tol` ends with status "left_box". The forward pass of the grid law is that of
the atoms at the cell centres with weights their masses (`model.weighted`), so Q, R and the velocity field
come from the particles' code. The ODE in tau is integrated by `flows.solve` ("auto" by default,
switching to "kvaerno5" where the diffusion makes it stiff: its Newton steps differentiate the field in forward
mode).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import driver
from .._checks import check_choice, check_int, check_real
from .._solve import Trajectory
from ..system import Reduced
from .chart import CHARTED_GROUPS, Chart, chart_key, charted_probe_velocity, expand
from .data import Config, Prompts, training_set
from .model import check_data, objective_value, risk_value
from .observables import make_args, objective_inputs
from .spec import solve_options, system

__all__ = ["FLUXES", "Box", "GridFlow", "GridSolution", "grid_limit", "solve_grid"]

#: Face fluxes: first-order upwind, or van Leer-limited MUSCL (second order).
FLUXES = ("upwind", "muscl")


@dataclasses.dataclass(frozen=True)
class Box:
    """A box [lower, upper] in R^p cut into `cells` equal cells per axis (p = 1 or 2).

    **Raises:** `ValueError` naming the field (lengths, lower < upper, cells >= 2).
    """

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    cells: tuple[int, ...]

    def __post_init__(self) -> None:
        lower = tuple(float(x) for x in np.atleast_1d(self.lower))
        upper = tuple(float(x) for x in np.atleast_1d(self.upper))
        cells = tuple(check_int("cells", int(c), 2) for c in np.atleast_1d(self.cells))
        if not len(lower) == len(upper) == len(cells) or len(cells) not in (1, 2):
            raise ValueError("lower, upper and cells must have one entry per axis (1 or 2 axes)")
        if not all(np.isfinite(lo) and np.isfinite(hi) and lo < hi for lo, hi in zip(lower, upper, strict=True)):
            raise ValueError(f"lower must be < upper (finite) on every axis, got {lower} and {upper}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "cells", cells)

    @property
    def dim(self) -> int:
        """p, the number of axes."""
        return len(self.cells)

    @property
    def widths(self) -> tuple[float, ...]:
        """h_k, the cell width on every axis."""
        return tuple((hi - lo) / n for lo, hi, n in zip(self.lower, self.upper, self.cells, strict=True))

    def edges(self, axis: int) -> np.ndarray:
        """The cells + 1 face coordinates along `axis`."""
        return np.linspace(self.lower[axis], self.upper[axis], self.cells[axis] + 1)

    def mids(self, axis: int) -> np.ndarray:
        """The cell-centre coordinates along `axis`."""
        e = self.edges(axis)
        return 0.5 * (e[1:] + e[:-1])

    def centres(self) -> np.ndarray:
        """(prod cells, p): every cell centre, in C order of the mass array."""
        return np.stack([g.ravel() for g in np.meshgrid(*(self.mids(k) for k in range(self.dim)), indexing="ij")], -1)

    def faces(self, axis: int) -> np.ndarray:
        """(faces, p): the centres of the faces normal to `axis`, in C order of the flux array."""
        axes = [self.edges(k) if k == axis else self.mids(k) for k in range(self.dim)]
        return np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], -1)


def _sl(x, start, stop, axis):
    return jax.lax.slice_in_dim(x, start, stop, axis=axis)


def _van_leer(a, b):
    ab = a * b
    return jnp.where(ab > 0, 2.0 * ab / jnp.where(ab > 0, a + b, 1.0), 0.0)


def _upwind_states(m, axis, flux):
    """(m^-, m^+) at the n + 1 faces along `axis` (zero mass outside the box)."""
    if flux == "upwind":
        pad = [(0, 0)] * m.ndim
        pad[axis] = (1, 1)
        mp = jnp.pad(m, pad)
        return _sl(mp, 0, -1, axis), _sl(mp, 1, None, axis)
    pad = [(0, 0)] * m.ndim
    pad[axis] = (2, 2)
    mp = jnp.pad(m, pad)  # n + 4
    diff = _sl(mp, 1, None, axis) - _sl(mp, 0, -1, axis)  # n + 3 differences
    slope = _van_leer(_sl(diff, 0, -1, axis), _sl(diff, 1, None, axis))  # slopes of cells 1 .. n + 2 of mp
    centre = _sl(mp, 1, -1, axis)
    left = _sl(centre + 0.5 * slope, 0, -1, axis)  # face j between mp cells j + 1 and j + 2
    right = _sl(centre - 0.5 * slope, 1, None, axis)
    return left, right


_PROGRAMS: dict = {}


@dataclasses.dataclass(frozen=True, eq=False)
class GridFlow:
    """The grid discretisation of the charted flow (module docstring).

    **Arguments:**

    - `config`: the model (depth L, lam, threshold, d; its widths M are not used: the law is the grid's).
    - `chart`: the `Chart`; `boxes`: {"attention": Box of dimension p} and, when the chart keeps the MLP (q > 0),
      "mlp": a Box of dimension q.
    - `temperature`: T >= 0 (the diffusion T Laplacian rho); `flux`: "upwind" or "muscl".
    """

    config: Config
    chart: Chart
    boxes: dict
    temperature: float = 0.0
    flux: str = "upwind"

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            raise ValueError(f"config must be a mean_field.Config, got {type(self.config).__name__}")
        if not isinstance(self.chart, Chart) or self.chart.D != self.config.D:
            raise ValueError("chart must be a Chart of the config's D")
        dims = self.chart.dims
        want = {g for g in CHARTED_GROUPS if dims[g] > 0}
        if not isinstance(self.boxes, dict) or set(self.boxes) != want:
            raise ValueError(f"boxes must be a dict with keys {sorted(want)} (the charted groups of dimension > 0)")
        for g in want:
            if not isinstance(self.boxes[g], Box) or self.boxes[g].dim != dims[g]:
                raise ValueError(f"boxes[{g!r}] must be a Box of dimension {dims[g]}")
        object.__setattr__(self, "temperature", check_real("temperature", self.temperature, low=0.0))
        check_choice("flux", self.flux, FLUXES)
        # one (field, observables) pair per content: equal flows share flows.solve's compiled program
        key = (self.config, chart_key(self.chart), tuple(sorted(self.boxes.items())), self.temperature, self.flux)
        if key not in _PROGRAMS:
            field, observe = self._make_field(), self._make_observables()
            _PROGRAMS[key] = (field, observe, _limit(field, observe))
        object.__setattr__(self, "_field", _PROGRAMS[key][0])
        object.__setattr__(self, "_observe", _PROGRAMS[key][1])
        object.__setattr__(self, "_limit", _PROGRAMS[key][2])

    @property
    def groups(self) -> tuple[str, ...]:
        """The groups that live on a grid."""
        return tuple(g for g in CHARTED_GROUPS if g in self.boxes)

    def initial_state(self, masses: dict) -> dict:
        """The state of `solve_grid` from cell masses {group: (*cells) or (L, *cells)} (each slice summing to 1):
        {group: (L, *cells), group + "_escaped": (L,)}."""
        L = self.config.L
        state = {}
        for g in self.groups:
            cells = self.boxes[g].cells
            m = np.asarray(masses[g], float)
            if m.shape == cells:
                m = np.broadcast_to(m, (L,) + cells)
            if m.shape != (L,) + cells:
                raise ValueError(f"masses[{g!r}] must have shape {cells} or {(L,) + cells}, got {m.shape}")
            if np.any(m < 0) or not np.allclose(m.reshape(L, -1).sum(1), 1.0, rtol=1e-12, atol=0):
                raise ValueError(f"masses[{g!r}] must be >= 0 and sum to 1 per depth slice")
            state[g] = jnp.asarray(m)
            state[g + "_escaped"] = jnp.zeros((L,))
        return state

    def atoms(self, state: dict) -> tuple[dict, dict]:
        """(charted atoms {"attention": (L, n, p), "mlp": (L, n_mlp, q)}, relative weights): the cell centres
        and n times their masses; a group without a grid is one zero atom of weight 1."""
        L = self.config.L
        atoms, weights = {}, {}
        for g in CHARTED_GROUPS:
            if g in self.boxes:
                c = jnp.asarray(self.boxes[g].centres())
                atoms[g] = jnp.broadcast_to(c[None], (L,) + c.shape)
                weights[g] = state[g].reshape(L, -1) * c.shape[0]
            else:
                atoms[g] = jnp.zeros((L, 1, 0))
                weights[g] = jnp.ones((L, 1))
        return atoms, weights

    def _probes(self, points: dict) -> dict:
        L = self.config.L
        out = {}
        for g in CHARTED_GROUPS:
            p = self.chart.dims[g]
            pts = jnp.asarray(points[g]) if g in points else jnp.zeros((0, p))
            out[g] = jnp.broadcast_to(pts[None], (L,) + pts.shape)
        return out

    def velocity(self, state: dict, points: dict, args: dict) -> dict:
        """-grad delta Q/delta rho of the grid law at `points` {group: (P, dim)} -> {group: (L, P, dim)}."""
        atoms, weights = self.atoms(state)
        return charted_probe_velocity(self.chart, atoms, self._probes(points), *objective_inputs(args), weights=weights)

    def rhs(self, t: ArrayLike, state: dict, args: dict) -> dict:
        """d state / d tau (module docstring)."""
        faces = {g: np.concatenate([self.boxes[g].faces(k) for k in range(self.boxes[g].dim)]) for g in self.groups}
        u_all = self.velocity(state, faces, args)
        L, T = self.config.L, self.temperature
        out = {}
        for g in self.groups:
            box, m = self.boxes[g], state[g]
            dm = jnp.zeros_like(m)
            escaped = jnp.zeros((L,))
            start = 0
            for k in range(box.dim):
                shape = list(box.cells)
                shape[k] += 1
                count = math.prod(shape)
                u = u_all[g][:, start : start + count, k].reshape((L, *shape))
                start += count
                axis, h = k + 1, box.widths[k]
                lo, hi = _upwind_states(m, axis, self.flux)
                G = (jnp.maximum(u, 0.0) * lo + jnp.minimum(u, 0.0) * hi) / h
                if T > 0:
                    pad = [(0, 0)] * m.ndim
                    pad[axis] = (1, 1)
                    mp = jnp.pad(m, pad)
                    G = G - T * (_sl(mp, 1, None, axis) - _sl(mp, 0, -1, axis)) / (h * h)
                dm = dm - (_sl(G, 1, None, axis) - _sl(G, 0, -1, axis))
                leave = jnp.squeeze(_sl(G, -1, None, axis), axis) - jnp.squeeze(_sl(G, 0, 1, axis), axis)
                escaped = escaped + leave.reshape(L, -1).sum(1)
            out[g] = dm
            out[g + "_escaped"] = escaped
        return out

    def _make_field(self):
        def field(t, state, args):
            return self.rhs(t, state, args)

        return field

    def summary(self, t: ArrayLike, state: dict, args: dict) -> dict:
        """Q, R, dissipation (1/L) sum_l sum_c m_c |u(c)|^2 per group summed, the mass per slice (in box +
        escaped), the escaped mass, the smallest cell mass, and the mean and variance of every slice's law."""
        atoms, weights = self.atoms(state)
        full = expand(self.chart, atoms)
        Q = objective_value(full, *objective_inputs(args), False, weights)
        R = risk_value(full, args["Z0"], args["y"], args["threshold"], args["d"], False, weights)
        centres = {g: self.boxes[g].centres() for g in self.groups}
        u = self.velocity(state, centres, args)
        L = self.config.L
        out = {"Q": Q, "R": R}
        diss = jnp.zeros(())
        for g in self.groups:
            m = state[g].reshape(L, -1)
            c = jnp.asarray(centres[g])
            diss = diss + jnp.sum(m * jnp.sum(u[g] ** 2, axis=-1)) / L
            mean = m @ c / jnp.sum(m, axis=1, keepdims=True)
            out[g + "_mass"] = jnp.sum(m, axis=1) + state[g + "_escaped"]
            out[g + "_escaped"] = state[g + "_escaped"]
            out[g + "_min"] = jnp.min(m)
            out[g + "_mean"] = mean
            sq = jnp.einsum("lc,cp->lp", m, c * c) / jnp.sum(m, axis=1, keepdims=True)
            out[g + "_var"] = sq - mean * mean
        out["dissipation"] = diss
        return out

    def _make_observables(self):
        def observe(t, state, args):
            return self.summary(t, state, args)

        return observe


@dataclasses.dataclass(frozen=True)
class GridSolution:
    """The result of `solve_grid`: `ts`, `observables` (of `GridFlow.summary`, at `ts`), `states` (the saved
    states, or `None`), `status` ("ok", "left_box", or the solver's failure), `message`, and the
    `flows.Trajectory` of the solve (`trajectory`)."""

    ts: np.ndarray
    observables: dict
    states: dict | None
    status: str
    message: str
    trajectory: Trajectory

    @property
    def ok(self) -> bool:
        """Whether the solve finished with the law inside the box."""
        return self.status == "ok"


def _needs_masses(params, data):
    raise ValueError("y0: the grid flow starts from cell masses, y0=GridFlow.initial_state(masses) (see solve_grid)")


def _data_args(data):
    return data


def _limit(field, observe):
    return Reduced(
        vector_field=field,
        initial=_needs_masses,
        args=_data_args,
        observe=observe,
        description="the Wasserstein gradient flow of a charted model on a grid (finite volumes)",
    )


def grid_limit(flow: GridFlow) -> Reduced:
    """The grid flow as a `flows.Reduced` of the mean field's spec (`spec.system(flow.config)`, whose `data`
    are its args): state `GridFlow.initial_state(masses)` (given as `y0`), field `GridFlow.rhs`, observables
    `GridFlow.summary`. `solve_grid` solves it."""
    if not isinstance(flow, GridFlow):
        raise ValueError(f"flow must be a GridFlow, got {type(flow).__name__}")
    return flow._limit  # type: ignore[attr-defined]


def solve_grid(
    flow: GridFlow,
    ts: ArrayLike,
    masses: dict,
    *,
    data: Prompts | None = None,
    solver: str = "auto",
    rtol: float = 1e-7,
    atol: float = 1e-10,
    dt: float | None = None,
    max_steps: int | None = None,
    save_states: bool = False,
    mass_tol: float = 1e-6,
) -> GridSolution:
    """Integrate the grid flow from cell masses `masses` (`GridFlow.initial_state`) on the shared driver
    (`flows.solve_flow(system, ts, reduced="grid")` with the spec `spec.system(flow.config)` on `data`).

    **Arguments:**

    - `ts`: save times in tau starting at 0; `data`: the prompts (default `training_set(flow.config)`;
      `grid_laws.zero_data` switches the data term off).
    - `solver`, `rtol`, `atol`, `max_steps`: as in `flows.solve` ("kvaerno5" for stiff diffusion); `dt`:
      constant steps instead (with "euler" or "heun").
    - `mass_tol`: the escaped mass above which the status is "left_box".

    **Returns:** a `GridSolution`.
    """
    limit = grid_limit(flow)
    data = check_data(flow.config, training_set(flow.config) if data is None else data)
    mass_tol = check_real("mass_tol", mass_tol, low=0.0, strict=True)
    ts = np.asarray(ts, float)
    state0 = flow.initial_state(masses)
    options = solve_options("solve_grid", dt, dict(solver=solver, rtol=rtol, atol=atol, max_steps=max_steps))
    spec = system(flow.config, "basic").replace(data=make_args(flow.config, data), reduced={"grid": limit})
    traj = driver.solve_flow(spec, ts, reduced="grid", y0=state0, save_states=save_states, throw=False, **options)
    observables = {k: np.asarray(v) for k, v in traj.observables.items()}
    status, message = str(traj.status), str(traj.message)
    if traj.ok:
        escaped = max(float(np.max(observables[g + "_escaped"])) for g in flow.groups)
        if escaped > mass_tol:
            status = "left_box"
            message = f"mass {escaped:.3g} (> mass_tol = {mass_tol:.3g}) left the box by tau = {ts[-1]:.4g}"
    return GridSolution(ts, observables, traj.ys if save_states else None, status, message, traj)
