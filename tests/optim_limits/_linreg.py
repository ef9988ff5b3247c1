"""Linear regression for the SGD-noise tests: n = 16 samples, P = 3, and the EXACT first and second moments
of SGD (every batch enumerated), of the SGD SDE (matrix exponential) and of its Euler-Maruyama scheme."""

import itertools
from math import comb

import jax.numpy as jnp
import numpy as np
from scipy.linalg import expm

N, P = 16, 3
_rng = np.random.default_rng(7)
X = _rng.standard_normal((N, P)) * np.array([1.0, 0.8, 0.6])
THETA_STAR = np.array([1.0, -0.7, 0.5])
Y = X @ THETA_STAR + 0.6 * _rng.standard_normal(N)
DATA = {"x": jnp.asarray(X), "y": jnp.asarray(Y)}
THETA0 = jnp.zeros(P)


def per_sample_loss(theta, sample):
    return 0.5 * (sample["x"] @ theta - sample["y"]) ** 2


def loss_obs(t, theta, args):
    r = args["data"]["x"] @ theta - args["data"]["y"]
    return 0.5 * jnp.mean(r**2)


def theta0_obs(t, theta, args):
    return theta[0]


OBS = {"loss": loss_obs, "theta0": theta0_obs}

# z = (theta, 1): g_i = A_i z with A_i = [x_i x_i^T, -x_i y_i] (P x (P+1)); the full-batch loss is z^T Q z
A_I = np.concatenate([np.einsum("ni,nj->nij", X, X), -(X * Y[:, None])[:, :, None]], axis=2)
A_BAR = A_I.mean(0)
C_I = np.concatenate([A_I - A_BAR, np.zeros((N, 1, P + 1))], axis=1)  # padded deviations, (n, P+1, P+1)
D = np.concatenate([-A_BAR, np.zeros((1, P + 1))], axis=0)  # dz/dt = D z (the last row keeps z_P = 1)
Q = 0.5 * np.mean(np.einsum("ni,nj->nij", np.c_[X, -Y], np.c_[X, -Y]), axis=0)
Z0 = np.r_[np.asarray(THETA0), 1.0]
NOISE_OP = sum(np.kron(c, c) for c in C_I) / N  # vec(C M C^T) = kron(C, C) vec(M), row-major


def factor(n, b, replacement):
    return 1.0 if replacement else (n - b) / (n - 1)


def sde_moments(t, lr, b, replacement=False):
    """Exact (mean z, E[z z^T]) of the SGD SDE at t: dM/dt = D M + M D^T + s/n sum C_i M C_i^T."""
    s = lr * factor(N, b, replacement) / b
    eye = np.eye(P + 1)
    L = np.kron(D, eye) + np.kron(eye, D) + s * NOISE_OP
    return expm(D * t) @ Z0, (expm(L * t) @ np.outer(Z0, Z0).ravel()).reshape(P + 1, P + 1)


def em_moments(t, dt, lr, b, replacement=False):
    """Exact moments of the Euler-Maruyama scheme of the SDE with step dt (t / dt steps)."""
    s = lr * factor(N, b, replacement) / b
    k = int(round(t / dt))
    step = np.eye(P + 1) + dt * D
    op = np.kron(step, step) + s * dt * NOISE_OP
    return np.linalg.matrix_power(step, k) @ Z0, (np.linalg.matrix_power(op, k) @ np.outer(Z0, Z0).ravel()).reshape(
        P + 1, P + 1
    )


def sgd_moments(t, lr, b):
    """Exact moments of SGD(lr) with batches of b distinct samples (all comb(n, b) batches enumerated):
    z <- T_B z, T_B = [[I - lr H_B, lr b_B], [0, 1]]; E[z z^T] <- E_B[T_B M T_B^T]."""
    k = int(round(t / lr))
    T_mean = np.zeros((P + 1, P + 1))
    op = np.zeros(((P + 1) ** 2, (P + 1) ** 2))
    for batch in itertools.combinations(range(N), b):
        T = np.eye(P + 1) - lr * np.concatenate([A_I[list(batch)].mean(0), np.zeros((1, P + 1))], axis=0)
        T_mean += T
        op += np.kron(T, T)
    T_mean /= comb(N, b)
    op /= comb(N, b)
    return np.linalg.matrix_power(T_mean, k) @ Z0, (np.linalg.matrix_power(op, k) @ np.outer(Z0, Z0).ravel()).reshape(
        P + 1, P + 1
    )


def summary(mean, second):
    """(E theta_0, Var theta_0, E loss) from the moments of z."""
    return mean[0], second[0, 0] - mean[0] ** 2, float(np.sum(Q * second))
