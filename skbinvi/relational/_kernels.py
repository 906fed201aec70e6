"""Numba kernels of the latent feature relational model (probit link).

Notation (METHODS.md section 1, [Ji] supplement): N entities with D binary
features z_id ~ Bernoulli(rho); an observed undirected pair (i, j) has the link
x_ij in {0, 1} with p(x_ij = 1 | z) = Phi(eta_ij), eta_ij = w_0 + sum_d w_d
z_id z_jd. The mean-field posterior is q(z_id = 1) = q[i, d]. Pairs are given
as two int64 arrays ``rows``, ``cols`` and the links as float64 ``x`` (0/1).

All kernels write into preallocated ``out`` arrays and never into their inputs.
"""

import math

import numpy as np
from numba import prange

from .._math import inverse_mills_ratio, log_ndtr, sigmoid
from .._numba import njit


@njit
def pair_log_likelihood(x, eta):
    """g(eta) = x log Phi(eta) + (1 - x) log Phi(-eta), nats."""
    return log_ndtr(eta) if x > 0.5 else log_ndtr(-eta)


@njit(parallel=True)
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
    for p in prange(rows.shape[0]):  # pairs are independent: threads over pairs
        i, j = rows[p], cols[p]
        total = 0.0
        for s in range(S):
            eta = w0
            for d in range(D):
                if uniforms[s, d] < q[i, d] * q[j, d]:
                    eta += w[d]
            total += pair_log_likelihood(x[p], eta)
        out[p] = total / S


# Largest |logit q| that the estimator lets a posterior probability reach:
# q stays within 1e-13 of 0 and 1, so log q and log(1 - q) are finite.
MAX_LOGIT = 30.0


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


# ---------------------------------------------------------------------------
# "cavi": data-augmented coordinate ascent (METHODS.md section 1 (a))
# ---------------------------------------------------------------------------
#
# With y_ij ~ N(eta_ij, 1) and x_ij = 1{y_ij >= 0}, q(y_ij) is a unit normal
# with location mu_ij truncated to the side of x_ij. With s = 2 x - 1,
# a = s mu and lam = phi(a) / Phi(a) (inverse Mills ratio):
#     E[y] = mu + s lam,   Var[y] = 1 - a lam - lam^2,
#     H[q(y)] = log sqrt(2 pi e) + log Phi(a) - a lam / 2.
# The augmented bound (the supplement's A.2) of a pair, with m = E_q[eta] =
# w_0 + sum_d w_d p_d, p_d = q_id q_jd and V = Var_q[eta] = sum_d w_d^2
# p_d (1 - p_d), is
#     T(mu) = -log sqrt(2 pi) - (E[y^2] - 2 E[y] m + m^2 + V) / 2 + H[q(y)],
# maximal at mu = m, where it equals log Phi(s m) - V / 2.


@njit
def truncated_normal_mean(x, mu):
    """E[y] of a unit normal with location mu truncated to y >= 0 (x = 1) or y < 0."""
    if x > 0.5:
        return mu + inverse_mills_ratio(mu)
    return mu - inverse_mills_ratio(-mu)


@njit(parallel=True)
def truncated_normal_means(x, mu, out):
    """:func:`truncated_normal_mean` of every pair: ``out[p]`` = E[y_p] at location mu[p]."""
    for p in prange(x.shape[0]):
        out[p] = truncated_normal_mean(x[p], mu[p])


@njit
def augmented_bound(rows, cols, x, q, w0, w, mu, rho):
    """The data-augmented lower bound on the ELBO (nats, summed over pairs).

    ``sum_p T_p(mu_p) - sum_id KL(Bern(q_id) || Bern(rho))`` with the pair
    term of the module comment; ``mu`` (P,) are the locations of q(y). It is
    below the true ELBO (Jensen). At the optimal location mu = m the pair
    term is log Phi(s m) - V / 2, below E_q log Phi(s eta) by between 0 and
    V / 2 (log Phi is concave with second derivative in (-1, 0)); any other
    location adds the KL from q(y) to the optimal truncated normal.
    """
    D = q.shape[1]
    total = 0.0
    for p in range(rows.shape[0]):
        i, j = rows[p], cols[p]
        m = w0
        var = 0.0
        for d in range(D):
            pd = q[i, d] * q[j, d]
            m += w[d] * pd
            var += w[d] * w[d] * pd * (1.0 - pd)
        s = 1.0 if x[p] > 0.5 else -1.0
        a = s * mu[p]
        lam = inverse_mills_ratio(a)
        mean_y = mu[p] + s * lam
        second_y = 1.0 - a * lam - lam * lam + mean_y * mean_y
        entropy = 0.5 * math.log(2.0 * math.pi * math.e) + log_ndtr(a) - 0.5 * a * lam
        total += (
            -0.5 * math.log(2.0 * math.pi)
            - 0.5 * (second_y - 2.0 * mean_y * m + m * m + var)
            + entropy
        )
    return total - kl_features(q, rho)


@njit(parallel=True)
def pair_means(rows, cols, q, w0, w, out):
    """m_p = E_q[eta_p] = w_0 + sum_d w_d q_id q_jd for every pair (the S_ij + w_0)."""
    for p in prange(rows.shape[0]):
        i, j = rows[p], cols[p]
        m = w0
        for d in range(q.shape[1]):
            m += w[d] * q[i, d] * q[j, d]
        out[p] = m


@njit(parallel=True)
def pair_mean_and_variance(rows, cols, q, w0, w, mean, var):
    """E_q[eta_p] and Var_q[eta_p] = sum_d w_d^2 p_d (1 - p_d), p_d = q_id q_jd (out)."""
    for p in prange(rows.shape[0]):
        i, j = rows[p], cols[p]
        m = w0
        v = 0.0
        for d in range(q.shape[1]):
            pd = q[i, d] * q[j, d]
            m += w[d] * pd
            v += w[d] * w[d] * pd * (1.0 - pd)
        mean[p] = m
        var[p] = v


@njit
def cavi_sweep(inc_indptr, inc_pair, inc_other, q, logit_rho, w0, w, mean_y, m):
    """One sweep of coordinate ascent over every q_id, in place.

    ``logit q_id = logit rho + w_d sum_{pairs (i, j)} q_jd (E[y_ij] - w_0 -
    w_d / 2 - sum_{e != d} w_e q_ie q_je)`` ([Ji] supplement A.4 with its two
    typos corrected: the squashing function is the logistic sigmoid, and the
    expectation is that of y, not x). The augmented bound is linear in q_id
    given the rest, so each update is its exact maximizer. ``m`` (P,) holds
    w_0 + sum_e w_e q_ie q_je and is kept up to date after every change, in
    O(degree(i)): a sweep costs O(P D), O(N^2 D) for all pairs observed.

    Parameters
    ----------
    inc_indptr : int64 array of shape (N + 1,)
        The pairs of entity i are ``inc_pair[inc_indptr[i]:inc_indptr[i + 1]]``,
        with the other entity of each in ``inc_other``.
    inc_pair, inc_other : int64 arrays of shape (2 P,)
    q : float64 array of shape (N, D)
        Posterior probabilities, updated in place.
    logit_rho, w0 : float
    w : float64 array of shape (D,)
    mean_y : float64 array of shape (P,)
        E[y_p] under q(y), held fixed during the sweep.
    m : float64 array of shape (P,)
        Pair means, updated in place.
    """
    N, D = q.shape
    for i in range(N):
        for d in range(D):
            wd = w[d]
            field = 0.0
            for k in range(inc_indptr[i], inc_indptr[i + 1]):
                p, j = inc_pair[k], inc_other[k]
                others = m[p] - w0 - wd * q[i, d] * q[j, d]
                field += q[j, d] * (mean_y[p] - w0 - 0.5 * wd - others)
            # logits are kept in [-MAX_LOGIT, MAX_LOGIT]: no exact 0 or 1,
            # no subnormal q (slow arithmetic, measured 1.8x on the w step)
            t = min(max(logit_rho + wd * field, -MAX_LOGIT), MAX_LOGIT)
            new = sigmoid(t)
            delta = new - q[i, d]
            if delta != 0.0:
                for k in range(inc_indptr[i], inc_indptr[i + 1]):
                    m[inc_pair[k]] += wd * delta * q[inc_other[k], d]
                q[i, d] = new


def incidence(rows, cols, n_entities):
    """Pairs incident to each entity, as CSR-like arrays for :func:`cavi_sweep`.

    Returns ``inc_indptr`` (N + 1,) int64, ``inc_pair`` and ``inc_other``
    (2 P,): every pair p = (i, j) appears once under i (other j) and once
    under j (other i). The two lists are int32 when the ids and 2 P fit
    (halving their memory, 100 MiB per 12.5 million pairs), else int64.
    """
    P = rows.size
    small = 2 * P < 2**31 and n_entities < 2**31
    index = np.int32 if small else np.int64
    ends = np.concatenate([rows, cols]).astype(index, copy=False)
    order = np.argsort(ends, kind="stable")  # positions in rows ++ cols
    del ends
    indptr = np.zeros(n_entities + 1, dtype=np.int64)
    np.cumsum(
        np.bincount(rows, minlength=n_entities)
        + np.bincount(cols, minlength=n_entities),
        out=indptr[1:],
    )
    from_rows = order < P  # the entity is the pair's first one: other = cols
    order[~from_rows] -= P  # now the pair index
    inc_pair = order.astype(index)
    inc_other = np.empty(2 * P, dtype=index)
    inc_other[from_rows] = cols[order[from_rows]]
    inc_other[~from_rows] = rows[order[~from_rows]]
    return indptr, inc_pair, inc_other


def weight_step(rows, cols, q, mean_y, alpha=0.0):
    """Closed-form (ridge) maximizer of the augmented bound over (w_0, w).

    The bound depends on w through ``-1/2 sum_p E[(y_p - f_p . w)^2]`` with
    features f_p = (1, z_i1 z_j1, ..., z_iD z_jD): the normal equations use
    E[f] = (1, p) and E[f f^T] with p_d p_e off the diagonal and p_d on it
    (p_d = q_id q_jd). ``alpha`` >= 0 is the precision of a Gaussian prior on
    w_1..w_D (not on the intercept). Cost O(P D^2). Returns (w0, w).
    """
    P = q[rows] * q[cols]
    D = q.shape[1]
    A = np.empty((D + 1, D + 1))
    A[0, 0] = rows.size
    A[0, 1:] = A[1:, 0] = P.sum(axis=0)
    A[1:, 1:] = P.T @ P + np.diag((P - P * P).sum(axis=0) + alpha)
    b = np.concatenate([[mean_y.sum()], P.T @ mean_y])
    solution = np.linalg.solve(A, b)
    return float(solution[0]), solution[1:]


@njit
def weight_pass(rows, cols, q, rhs, alpha, w, m):
    """One pass of exact coordinate ascent over (w_0, w_1, ..., w_D), in place.

    Maximizes, one coordinate at a time, the concave quadratic
    ``Q(w) = w . rhs - 1/2 w^T A w - alpha/2 sum_{d>=1} w_d^2`` with
    ``A = sum_p E_q[f_p f_p^T]`` for the pair features f_p = (1, z_i1 z_j1,
    ..., z_iD z_jD): ``E[f_pd f_pe] = p_d p_e`` (d != e), ``p_d`` (d = e),
    p_d = q_id q_jd. With ``rhs = sum_p E[f_p] E[y_p]`` this is the w step of
    the data-augmented bound ("cavi"); with ``rhs = E_q[sum_p f_p(z)
    ybar_p(z)]`` (:func:`mc_weight_rhs`) it is a minorize-maximize (EM) step
    on the true ELBO ("mcvi", "score"). Only A's action is needed:
    ``(A w)_d = sum_p p_d m_p + w_d sum_p p_d (1 - p_d)`` with the pair means
    ``m_p = f-bar_p . w``, so a pass costs O(P D) and never forms A (the
    closed-form solve, :func:`weight_step`, costs O(P D^2)). Q never
    decreases.

    Parameters
    ----------
    rows, cols : int64 arrays of shape (P,)
    q : float64 array of shape (N, D)
    rhs : float64 array of shape (D + 1,)
    alpha : float
        Precision of the Gaussian prior on w_1..w_D (ridge); the intercept
        has none.
    w : float64 array of shape (D + 1,)
        (w_0, w_1, ..., w_D), updated in place.
    m : float64 array of shape (P,)
        Pair means w_0 + sum_d w_d p_d, kept up to date in place.
    """
    P = rows.shape[0]
    D = q.shape[1]
    if P == 0:
        return
    total = 0.0
    for p in range(P):
        total += m[p]
    delta = (rhs[0] - total) / P
    w[0] += delta
    for p in range(P):
        m[p] += delta
    for d in range(D):
        pm = 0.0
        pvar = 0.0
        psum = 0.0
        for p in range(P):
            pd = q[rows[p], d] * q[cols[p], d]
            pm += pd * m[p]
            pvar += pd * (1.0 - pd)
            psum += pd
        curvature = psum + alpha
        if curvature <= 0.0:
            continue
        delta = (rhs[d + 1] - pm - w[d + 1] * pvar - alpha * w[d + 1]) / curvature
        if delta != 0.0:
            w[d + 1] += delta
            for p in range(P):
                m[p] += delta * q[rows[p], d] * q[cols[p], d]


@njit
def augmented_weight_rhs(rows, cols, q, mean_y, out):
    """``out = sum_p E[f_p] E[y_p]`` (D + 1,): the right-hand side of the cavi w step."""
    D = q.shape[1]
    out[:] = 0.0
    for p in range(rows.shape[0]):
        i, j = rows[p], cols[p]
        out[0] += mean_y[p]
        for d in range(D):
            out[d + 1] += q[i, d] * q[j, d] * mean_y[p]


# ---------------------------------------------------------------------------
# "mcvi": Monte Carlo natural gradients with each binary variable summed out
# (METHODS.md section 1 (b))
# ---------------------------------------------------------------------------


@njit
def _sample_joint(rows, cols, q, w0, w, uniforms, z, eta):
    """One joint sample ``z = 1{uniforms < q}`` (N, D) and eta (P,) of every pair."""
    N, D = q.shape
    for i in range(N):
        for d in range(D):
            z[i, d] = 1.0 if uniforms[i, d] < q[i, d] else 0.0
    for p in range(rows.shape[0]):
        i, j = rows[p], cols[p]
        value = w0
        for e in range(D):
            value += w[e] * z[i, e] * z[j, e]
        eta[p] = value


@njit(parallel=True)
def mcvi_mean_deltas(rows, cols, x, q, logit_rho, w0, w, uniforms, out):
    """Monte Carlo estimate of E_{q_-id}[Delta_id] for every (i, d) at once.

    ``Delta_id(z) = log p(x, z_id = 1, z_-id) - log p(x, z_id = 0, z_-id)
    = logit rho + sum_{pairs (i, j)} z_jd [g_ij(a + w_d) - g_ij(a)]`` with
    ``a = w_0 + sum_{e != d} w_e z_ie z_je`` and g the probit pair
    log-likelihood: z_id is summed out exactly, only its neighbours are
    sampled. Every (i, d) uses the same S joint samples
    ``z_s = 1{uniforms[s] < q}``. With the exact expectation,
    ``logit q_id <- E[Delta_id]`` is the coordinate-ascent update of the true
    ELBO, and ``E[Delta] - logit q`` its natural gradient.

    The loop runs over pairs, not entities: a pair (i, j) and feature d
    need one new log Phi at most, shared by both ends (g(eta - w_d) if z_id
    = z_jd = 1, then both ends get g(eta) - g(eta - w_d); g(eta + w_d) if
    exactly one is 1, for the other end; nothing if both are 0). Cost
    O(S P D) operations and at most S P (D + 1) evaluations of log Phi.

    Parameters
    ----------
    rows, cols : int64 arrays of shape (P,)
        Entities of each observed pair.
    x : float64 array of shape (P,)
        Links (0/1) of the observed pairs.
    q : float64 array of shape (N, D)
    logit_rho, w0 : float
    w : float64 array of shape (D,)
    uniforms : float64 array of shape (S, N, D), values in [0, 1)
    out : float64 array of shape (N, D) (out)
        Mean of Delta over the samples.
    """
    S, N, D = uniforms.shape
    P = x.shape[0]
    # one thread per sample, each with its own accumulator; summed in a fixed
    # order, so the result does not depend on the number of threads
    partial = np.zeros((S, N, D))
    for s in prange(S):
        z = np.empty((N, D))
        eta = np.empty(P)
        _sample_joint(rows, cols, q, w0, w, uniforms[s], z, eta)
        acc = partial[s]
        for p in range(P):
            i, j = rows[p], cols[p]
            g_eta = pair_log_likelihood(x[p], eta[p])
            for d in range(D):
                zi, zj = z[i, d] > 0.0, z[j, d] > 0.0
                if zi and zj:
                    delta = g_eta - pair_log_likelihood(x[p], eta[p] - w[d])
                    acc[i, d] += delta
                    acc[j, d] += delta
                elif zj:
                    acc[i, d] += pair_log_likelihood(x[p], eta[p] + w[d]) - g_eta
                elif zi:
                    acc[j, d] += pair_log_likelihood(x[p], eta[p] + w[d]) - g_eta
    for i in prange(N):
        for d in range(D):
            total = 0.0
            for s in range(S):
                total += partial[s, i, d]
            out[i, d] = logit_rho + total / S


@njit(parallel=True)
def mc_weight_rhs(rows, cols, x, q, w0, w, uniforms, out):
    """Monte Carlo ``E_q[sum_p f_p(z) ybar_p(z)]`` (D + 1,) for the EM w step.

    ``ybar_p(z) = E[y_p | x_p, eta_p(z)]`` is the mean of the unit normal
    with location eta_p(z) (at the current w) truncated to the side of x_p.
    For every z, ``g(f . w) >= g(f . w_old) - 1/2 E[(y - f . w)^2 | z] +
    const`` with equality at w_old (the EM minorizer of probit regression,
    [AC]); averaged over q it minorizes the true ELBO, and
    :func:`weight_pass` with this right-hand side maximizes the minorizer.
    The expectation over z uses the S joint samples ``1{uniforms[s] < q}``.
    Cost O(S P D).

    Parameters are those of :func:`mcvi_mean_deltas`; ``out`` (D + 1,).
    """
    S, N, D = uniforms.shape
    P = x.shape[0]
    partial = np.zeros((S, D + 1))
    for s in prange(S):  # one thread per sample, summed in a fixed order
        z = np.empty((N, D))
        eta = np.empty(P)
        _sample_joint(rows, cols, q, w0, w, uniforms[s], z, eta)
        acc = partial[s]
        for p in range(P):
            i, j = rows[p], cols[p]
            ybar = truncated_normal_mean(x[p], eta[p])
            acc[0] += ybar
            for d in range(D):
                if z[i, d] > 0.0 and z[j, d] > 0.0:
                    acc[d + 1] += ybar
    for d in range(D + 1):
        total = 0.0
        for s in range(S):
            total += partial[s, d]
        out[d] = total / S


# ---------------------------------------------------------------------------
# "score": score-function (REINFORCE) baseline (METHODS.md section 1 (c))
# ---------------------------------------------------------------------------


@njit(parallel=True)
def score_function_gradient(rows, cols, x, q, logit_rho, w0, w, uniforms, out):
    """Rao-Blackwellized score-function estimate of dELBO / d logit q_id.

    ``E_q[(z_id - q_id) f_id(z)]`` with ``f_id`` the terms of log p(x, z) -
    log q(z) that involve z_id (its Markov blanket: its prior, the
    likelihood of the pairs of i, and its own log q), from the S joint
    samples ``z_s = 1{uniforms[s] < q}``, and a per-coordinate control
    variate ``b_id = sum_s (z - q)^2 f / sum_s (z - q)^2`` subtracted from f
    (estimated from the same samples: a small O(1/S) bias). For comparison
    with :func:`mcvi_mean_deltas` only: it needs far more samples for the
    same accuracy. Cost O(S P D) operations, S P evaluations of log Phi.

    Parameters are those of :func:`mcvi_mean_deltas`; ``out`` (N, D)
    receives the gradient estimate with respect to the logits.
    """
    S, N, D = uniforms.shape
    P = x.shape[0]
    # per sample (one thread each): (z - q) and f of every (i, d)
    scores = np.empty((S, N, D))
    values = np.empty((S, N, D))
    for s in prange(S):
        z = np.empty((N, D))
        eta = np.empty(P)
        blanket = np.zeros(N)  # likelihood of the pairs of i: shared by all d
        _sample_joint(rows, cols, q, w0, w, uniforms[s], z, eta)
        for p in range(P):
            g = pair_log_likelihood(x[p], eta[p])
            blanket[rows[p]] += g
            blanket[cols[p]] += g
        for i in range(N):
            for d in range(D):
                zid, qid = z[i, d], q[i, d]
                f = blanket[i] + zid * logit_rho
                f -= math.log(qid) if zid > 0.0 else math.log1p(-qid)
                scores[s, i, d] = zid - qid
                values[s, i, d] = f
    for i in prange(N):
        for d in range(D):
            sum_sf = 0.0  # sum_s (z - q) f
            sum_ss = 0.0  # sum_s (z - q)^2
            sum_ssf = 0.0  # sum_s (z - q)^2 f
            sum_score = 0.0  # sum_s (z - q)
            for s in range(S):
                score, f = scores[s, i, d], values[s, i, d]
                sum_sf += score * f
                sum_ss += score * score
                sum_ssf += score * score * f
                sum_score += score
            b = sum_ssf / sum_ss if sum_ss > 0.0 else 0.0
            # sum_s (z - q)(f - b) / S
            out[i, d] = (sum_sf - b * sum_score) / S
