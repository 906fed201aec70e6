"""Numba kernels of the latent feature relational model (probit link).

Notation (METHODS.md section 1, [Ji] supplement): N entities with D binary
features z_id ~ Bernoulli(rho); an observed undirected pair (i, j) has the link
x_ij in {0, 1} with p(x_ij = 1 | z) = Phi(eta_ij), eta_ij = w_0 + sum_d w_d
z_id z_jd. The mean-field posterior is q(z_id = 1) = q[i, d]. Pairs are given
as two int64 arrays ``rows``, ``cols`` and the links as float64 ``x`` (0/1).

All kernels write into preallocated ``out`` arrays and never into their inputs.
"""

import math

from .._math import log_ndtr
from .._numba import njit


@njit
def pair_log_likelihood(x, eta):
    """g(eta) = x log Phi(eta) + (1 - x) log Phi(-eta), nats."""
    return log_ndtr(eta) if x > 0.5 else log_ndtr(-eta)


@njit
def expected_pair_log_likelihood(rows, cols, x, q, w0, w, uniforms, out):
    """E_q[g_ij(eta_ij)] of every observed pair, by Monte Carlo, nats.

    For a fixed pair the products z_id z_jd are independent Bernoulli(q_id
    q_jd) across d, so the expectation is over D independent bits: with
    common random numbers ``b_sd = 1{uniforms[s, d] < q_id q_jd}``,
    ``out[p] = 1/S sum_s g(w_0 + sum_d w_d b_sd)``. The same uniforms serve
    every pair, so the estimate is deterministic and a pair's value does not
    depend on the others. Cost O(S D) per pair.

    Parameters
    ----------
    rows, cols : int64 arrays of shape (P,)
        Entities of each observed pair.
    x : float64 array of shape (P,)
        Links, 0 or 1.
    q : float64 array of shape (N, D)
        Posterior probabilities q(z_id = 1).
    w0 : float
        Intercept w_0.
    w : float64 array of shape (D,)
        Feature weights w_d.
    uniforms : float64 array of shape (S, D), values in [0, 1)
    out : float64 array of shape (P,) (out)
    """
    D = q.shape[1]
    S = uniforms.shape[0]
    for p in range(rows.shape[0]):
        i, j = rows[p], cols[p]
        total = 0.0
        for s in range(S):
            eta = w0
            for d in range(D):
                if uniforms[s, d] < q[i, d] * q[j, d]:
                    eta += w[d]
            total += pair_log_likelihood(x[p], eta)
        out[p] = total / S


@njit
def kl_features(q, rho):
    """sum_id KL(Bern(q_id) || Bern(rho)), nats: minus E_q[log p(z)] + H[q]."""
    total = 0.0
    log_rho, log_1m_rho = math.log(rho), math.log1p(-rho)
    for i in range(q.shape[0]):
        for d in range(q.shape[1]):
            p = q[i, d]
            if p > 0.0:
                total += p * (math.log(p) - log_rho)
            if p < 1.0:
                total += (1.0 - p) * (math.log1p(-p) - log_1m_rho)
    return total
