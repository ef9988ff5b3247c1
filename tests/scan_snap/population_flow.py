"""The full (Y, Z) population flow of Scan and Snap written out in numpy and integrated by scipy: a reference
for the trained network that is independent of `flows` (and needs no compile).

From Tian et al. 2023, Lemma 1 (eq. 4) at T -> inf with Lemma 2 (eq. 5) (real time: class weights P(n)):

    c_n = P(.|n) e^{z_m} / <P(.|n), e^{z_m}>,  f_n = c_n / ||c_n||,  alpha_n = softmax(Y^T f_n),
    Y' = eta_Y sum_n P(n) f_n (e_n - alpha_n)^T,
    z_m' = eta_Z sum_{psi(n) = m} P(n) diag(f_n) P_perp(f_n) Y (e_n - alpha_n).
"""

import numpy as np
from scipy.integrate import solve_ivp


def population_rhs(Y, Z, c, eta_Y, eta_Z):
    """(dY, dZ) of the population flow at (Y, Z) for the classes `c` (a SequenceClasses)."""
    K, M = c.cond_probs.shape
    dY, dZ = np.zeros((M, M)), np.zeros((M, M))
    for n in range(K):
        m, P = c.query[n], c.cond_probs[n]
        tilde = P * np.exp(Z[m])
        f = tilde / np.linalg.norm(tilde)  # c_n / ||c_n||
        logits = Y.T @ f
        alpha = np.exp(logits - logits.max())
        alpha /= alpha.sum()
        e = np.zeros(M)
        e[c.next_token[n]] = 1.0
        dY += eta_Y * c.class_probs[n] * np.outer(f, e - alpha)
        g = Y @ (e - alpha)
        dZ[m] += eta_Z * c.class_probs[n] * f * (g - f * (f @ g))
    return dY, dZ


def numpy_flow(c, eta_Y, eta_Z, ts, rtol=1e-10, atol=1e-12):
    """(Y, Z) of the population flow from Y = Z = 0 at the times `ts`: two arrays (len(ts), M, M)."""
    M = c.vocab_size

    def f(t, y):
        dY, dZ = population_rhs(y[: M * M].reshape(M, M), y[M * M :].reshape(M, M), c, eta_Y, eta_Z)
        return np.concatenate([dY.ravel(), dZ.ravel()])

    sol = solve_ivp(
        f, (0.0, float(np.max(ts))), np.zeros(2 * M * M), t_eval=np.sort(ts), method="DOP853", rtol=rtol, atol=atol
    )
    assert sol.success
    ys = sol.y.T[np.argsort(np.argsort(ts))]
    return ys[:, : M * M].reshape(-1, M, M), ys[:, M * M :].reshape(-1, M, M)
