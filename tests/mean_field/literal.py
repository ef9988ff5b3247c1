"""The mean-field network written out with explicit loops (numpy): the independent reference of the tests."""

import numpy as np


def _softmax_cols(A):
    E = np.exp(A - A.max(axis=0, keepdims=True))
    return E / E.sum(axis=0, keepdims=True)


def _huber(z, h0):
    out = np.zeros_like(z)
    mid = (z > 0) & (z <= h0)
    out[mid] = z[mid] ** 2 / (2 * h0)
    out[z > h0] = z[z > h0] - h0 / 2
    return out


def literal_objective(cfg, p, Z0s, ys):
    """Eqs. (2.1)-(2.3) with explicit loops over prompts, layers, particles and columns (numpy)."""
    p = {k: np.asarray(v) for k, v in p.items()}
    L, M, Mm, h0 = cfg.L, cfg.M, cfg.M_mlp, cfg.threshold
    risk = 0.0
    for Z0, y in zip(np.asarray(Z0s), np.asarray(ys), strict=True):
        Z = Z0.copy()
        for layer in range(L):
            upd = np.zeros_like(Z)
            for j in range(M):
                V, W = p["V"][layer, j], p["W"][layer, j]
                S = _softmax_cols(Z.T @ W @ Z)  # S[k, i] = softmax over keys k of z_k^T W z_i
                for i in range(Z.shape[1]):
                    col = sum(S[k, i] * Z[:, k] for k in range(Z.shape[1]))
                    upd[:, i] += V @ col
            Z = Z + upd / (M * L)
            upd = np.zeros_like(Z)
            for j in range(Mm):
                w1, w2 = p["W1"][layer, j], p["W2"][layer, j]
                for i in range(Z.shape[1]):
                    upd[:, i] += w2 * _huber(np.array([w1 @ Z[:, i]]), h0)[0]
            Z = Z + upd / (Mm * L)
        risk += 0.5 * (Z[cfg.d, cfg.N] - y) ** 2
    risk /= len(ys)
    decay = cfg.lam / (2 * M * L) * (np.sum(p["V"] ** 2) + np.sum(p["W"] ** 2)) + cfg.lam / (2 * Mm * L) * (
        np.sum(p["W1"] ** 2) + np.sum(p["W2"] ** 2)
    )
    return risk + decay, risk
