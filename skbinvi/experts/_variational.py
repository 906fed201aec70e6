"""Variational fitting of the Bayesian mixture of experts: "vi" and "pr".

User guide :ref:`experts`, sections on "vi" and "pr"; [Xie] supplement sections 2 and 4.

Model and variational family as in :mod:`skbinvi.experts._bounds`: K experts
beta_k = g_k u_k and K gates eta_k = g'_k u'_k, q(u) = vMF(mu, kappa),
q(g) = Gamma(shape r, rate s), q(z_n) = Categorical(phi_n). Two objectives
(both in nats, totals over the n samples):

* ``method="pr"`` (posterior regularization, [Xie] supplement Eqs. 19-20):

      F_pr = independent_prior_elbo(prior = vMF(mu0, kappa_prior)
                                              x Gamma(alpha1, alpha2))
             + lambda1 Omega({E u_k of the experts})
             + lambda2 Omega({E u_k of the gates}),

  Omega the mutual angular regularizer with variance weight ``pr_gamma``
  (:mod:`skbinvi.experts._angular`; Omega is in radians, so lambda1, lambda2
  are in nats per radian).

* ``method="vi"`` (Type II MABN prior on the directions of the experts and,
  separately, of the gates; Gamma(alpha1, alpha2) priors on the magnitudes):

      F_vi = L_lik + sum_{set in (beta, eta)} [
                 sum_i LB_i(E u_1..E u_K)
                 + sum_k H[q(u_k)]
                 - sum_k KL(q(g_k) || Gamma(alpha1, alpha2)) ],

  where L_lik is :func:`~skbinvi.experts._bounds.likelihood_bound`
  (<= E_q log p(y, z | X, beta, eta) + H[q(z)]), LB_i is
  :func:`~skbinvi.experts._bounds.mabn_expected_log_prior_lower_bound`
  (<= E_q log p(u_i | u_1..u_{i-1}), the rows in network order) and H is
  :func:`~skbinvi.experts._vmf.vmf_entropy`. [D] Sign check: the ELBO is
  E_q log p(y, z, beta, eta) - E_q log q(z, beta, eta)
  = [E log p(y, z | .) + H[q(z)]] + [E log p(u) + H[q(u)]]
  + [E log p(g) + H[q(g)]], and E log p(g) + H[q(g)] = -KL(q(g) || p(g)).
  With kappa_prior = 0 every node's LB_i is exactly -log |S^{p-1}| (the
  uniform density: node 1 is vMF(mu0, 0) and the chord bound has slope 0),
  so LB + H = -KL(q(u) || uniform) and F_vi equals
  :func:`~skbinvi.experts._bounds.independent_prior_elbo` with kappa0 = 0
  (tested). F_vi is a lower bound on log p(y | X) (the MABN term is a lower
  bound, the others are the standard ELBO); the tests check it against a
  Monte Carlo estimate of the exact ELBO with the exact Type II density.

Algorithm (coordinate ascent; each step does not decrease the objective):

1. closed-form auxiliaries at the current q: xi (expert [JJ]), (c, d)
   (gate [Bou] + [JJ], globally optimal by
   :func:`~skbinvi.experts._bounds.optimal_gate_auxiliaries`, warm-started)
   and phi (:func:`~skbinvi.experts._bounds.optimal_responsibilities`);
   the objective F_t is evaluated there and appended to the history;
2. one gradient step on all of (mu, kappa, r, s) of the experts and gates
   with the auxiliaries held fixed: mu by the Riemannian step
   (tangent projection then retraction to the sphere), kappa, r, s in log
   scale. The gradient is preconditioned by a positive constant per block
   (field x set, 8 blocks: the largest entry of each block's log-scale /
   tangent gradient is scaled to 1), which keeps it an ascent direction.
   Backtracking: the step h is halved until the fixed-auxiliary objective
   is >= its value at the current q (= F_t); after an accepted step h
   doubles (capped at ``_MAX_STEP``). Re-optimizing the auxiliaries in
   step 1 can then only increase it further.
3. over-relaxation [SR] of the outer iterations (:func:`variational_iteration`):
   the extrapolated q0 + omega (q1 - q0) is evaluated first and kept when it
   beats the fixed-auxiliary value at q1, otherwise q1.

Stop when (F_t - F_{t-1}) / max(|F_{t-1}|, 1) < tol, when no step is
accepted (h below ``_MIN_STEP``), or after ``max_iter`` iterations. Cost per
iteration: one or two passes over the rows at optimal auxiliaries
(O(nnz(X) K), dense O(n K p); the row passes run in parallel), the
statistics of :class:`_FixedAuxLikelihood` (O(sum_n nnz_n^2 K)), then the
inner ascent at O(K p^2 + K^2 p) per evaluation.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016 (main paper; supplement sections 2, 4).
[AM] P.-A. Absil, R. Mahony, R. Sepulchre, "Optimization Algorithms on
Matrix Manifolds", 2008 (retraction-based line search, section 4.2).
[SR] R. Salakhutdinov, S. Roweis, "Adaptive Overrelaxed Bound Optimization
Methods", ICML 2003 (the adaptive over-relaxation of the outer iterations).
[D] our derivations, stated here and tested in
tests/test_experts_variational.py.
"""

import threading
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from numba import prange
from scipy.linalg import lapack

from .._numba import njit
from ._ascent import (
    INIT_STEP,
    KAPPA_MAX,
    KAPPA_MIN,
    Point,
    SetObjective,
    ascend,
    design_scale,
    norm_shift,
    set_alphas,
    set_prior,
)
from ._bounds import (
    _LAM_SMALL,
    VMFGammaParams,
    _objective_rows,
    _optimal_likelihood_pieces,
    likelihood_pieces_from_moments,
    use_parallel,
)
from ._vmf import _bessel_quantities

__all__ = [
]

# Gamma shape of the random start's q(g) (E g = init_scale)
_INIT_SHAPE = 5.0
# Gamma shape of the q(g) built from given vectors (params_from_vectors)
_WARM_SHAPE = 5.0
# controls of the gate solver (the defaults of likelihood_pieces_from_moments)
_GATE_ROUNDS = 50
_GATE_TOL = 1e-10
# the fit's gate solver also stops a row when one more Newton step would
# tighten its bound by less than this (nats; the predicted gain g^2 / (2 h''));
# on Adult, K = 30, the bound moves by 2e-9 nats in total and the solver
# saves about one round in four. (1e-8 would spare one of the three Newton
# evaluations of most rows there, the row pass 52 against 62 ms, but moves the
# BMEM-G start enough to change its basin on the two-regime task.)
_GATE_GAIN_TOL = 1e-12
# the same control in the row passes of the "vi" / "pr" iterations
# (variational_iteration; other callers of objective_and_aux keep 1e-12): a
# row stops when one more step would gain less than 1e-8 nats (at most 3e-4
# nats over the 32,561 Adult rows, against the stopping rule's tol of 1e-3
# nats per sample), which spares one of the three Newton evaluations of most
# rows; any c gives a valid bound, and an iteration never lowers the objective
# (variational_iteration keeps the old auxiliaries if the new ones lose)
_ROW_GATE_GAIN_TOL = 1e-8
# over-relaxation factors of the outer iterations (adaptive, [SR])
_MIN_OMEGA = 2.0
_MAX_OMEGA = 16.0
# "vi" / "pr": after a kept extrapolation omega grows by a factor that starts
# at 2 and is replaced by its square root after each rejected one (2, 1.41,
# 1.19, ...), never below this. With a fixed doubling, full Adult at K = 30
# fell into a cycle (omega 2 kept, 4 rejected, ...): 62 passes over the rows
# in 40 iterations, 21 of them rejected extrapolations; with the shrinking
# factor 57 passes and a higher ELBO at 40 iterations (-0.3867 against -0.3909
# nats per sample)
_MIN_OMEGA_GROWTH = 1.05


# ---------------------------------------------------------------------------
# objective pieces
# ---------------------------------------------------------------------------


def _mean_directions(params):
    mu, kappa = params.mu, params.kappa
    a = _bessel_quantities(np.full(kappa.shape, float(mu.shape[1])), kappa)[0]
    return a[:, None] * mu


# ---------------------------------------------------------------------------
# the likelihood bound at fixed auxiliaries, as a function of q(beta), q(eta)
# ---------------------------------------------------------------------------


@njit(inline="always")
def _column_index(indptr, indices, p, n_parts):
    """The columns of a canonical CSR X: for column a, the rows holding it
    (``rows[start[a]:start[a + 1]]``, in increasing order) and the positions
    of those entries in the CSR arrays (``pos``); a counting sort, O(nnz + p).
    ``bounds`` (n_parts + 1,) cuts the columns into contiguous ranges of
    about equal work for :func:`_statistics_features` (the work of column a:
    the entries at or after it in each of its rows)."""
    n = indptr.shape[0] - 1
    start = np.zeros(p + 1, dtype=np.int64)
    for j in range(indptr[n]):
        start[indices[j] + 1] += 1
    for a in range(p):
        start[a + 1] += start[a]
    fill = start[:p].copy()
    rows = np.empty(indptr[n], dtype=np.int64)
    pos = np.empty(indptr[n], dtype=np.int64)
    work = np.zeros(p)
    for i in range(n):
        for j in range(indptr[i], indptr[i + 1]):
            a = indices[j]
            rows[fill[a]] = i
            pos[fill[a]] = j
            fill[a] += 1
            work[a] += indptr[i + 1] - j
    total = work.sum()
    bounds = np.full(n_parts + 1, p, dtype=np.int64)
    bounds[0] = 0
    part, acc = 1, 0.0
    for a in range(p):
        acc += work[a]
        while part < n_parts and acc >= total * part / n_parts:
            bounds[part] = a + 1
            part += 1
    return start, rows, pos, bounds


@njit(inline="always")
def _unpack_features(a0, a1, off, acc, acc_b, bt, Q):
    """Rows a0..a1-1 of b^T (K, p) and of both triangles of every Q[k] from
    the packed accumulators (entry (a, b >= a) at ``off[a] + b - a``)."""
    K = bt.shape[0]
    p = off.shape[0]
    for a in range(a0, a1):
        for k in range(K):
            bt[k, a] = acc_b[a, k]
        for b in range(a, p):
            q = acc[off[a] + b - a]
            for k in range(K):
                Q[k, a, b] = q[k]
                Q[k, b, a] = q[k]


@njit(inline="always")
def _statistics_features(a0, a1, start, rows, pos, indptr, indices, data, g_mean,
                         g_second, chunk, off, acc, acc_b, bt, Q):
    """Rows a0..a1-1 of b^T (into bt) and of every Q[k] (into Q, both triangles).

    Feature-major: for each feature a, the rows holding it add their weights
    to the packed slab of a (the entries b >= a, ``off[a]`` on, the K
    weights of an entry contiguous), which stays in a core's cache; the rows
    are taken in chunks of ``chunk`` (all features of the range per chunk),
    so that the chunk's weight rows stay in cache too. Every entry is summed
    over its rows in increasing order, as a row-major pass would.
    """
    n, K = g_second.shape
    p = off.shape[0]
    cur = start[a0:a1].copy()
    for a in range(a0, a1):
        acc[off[a]:off[a] + p - a] = 0.0
        acc_b[a] = 0.0
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        for a in range(a0, a1):
            t = cur[a - a0]
            end = start[a + 1]
            base = off[a] - a
            b_row = acc_b[a]
            while t < end and rows[t] < hi:
                i = rows[t]
                j = pos[t]
                xa = data[j]
                gm = g_mean[i]
                gs = g_second[i]
                for k in range(K):
                    b_row[k] += xa * gm[k]
                for jj in range(j, indptr[i + 1]):
                    xab = xa * data[jj]
                    q = acc[base + indices[jj]]
                    for k in range(K):
                        q[k] += gs[k] * xab
                t += 1
            cur[a - a0] = t
    _unpack_features(a0, a1, off, acc, acc_b, bt, Q)


@njit(nogil=True)
def _statistics_rows(indptr, indices, data, sq, g_mean, g_second, p):
    """:func:`_fixed_aux_statistics_csr` row-major, serial: each row adds its
    weights to the packed slab of every pair of its features (the packed
    upper triangle of :func:`_statistics_features`). Best when that
    accumulator fits in a core's cache (few weight columns)."""
    n, K = g_second.shape
    bt, v, Q, acc, acc_b = _statistics_outputs(sq, g_second, p)
    off = _packed_offsets(p)
    acc[:] = 0.0
    acc_b[:] = 0.0
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        gs = g_second[i]
        gm = g_mean[i]
        for a in range(lo, hi):
            ia = indices[a]
            xa = data[a]
            b_row = acc_b[ia]
            for k in range(K):
                b_row[k] += xa * gm[k]
            base = off[ia] - ia
            for b in range(a, hi):
                xab = xa * data[b]
                q = acc[base + indices[b]]
                for k in range(K):
                    q[k] += gs[k] * xab
    _unpack_features(0, p, off, acc, acc_b, bt, Q)
    return bt, v, Q


@njit
def _packed_offsets(p):
    off = np.empty(p, dtype=np.int64)
    for a in range(p):
        off[a] = a * p - a * (a - 1) // 2
    return off


@njit(inline="always")
def _statistics_outputs(sq, g_second, p):
    """Empty bt (K, p), Q (K, p, p), the packed accumulators, and v = G_V^T sq."""
    n, K = g_second.shape
    v = np.zeros(K)
    for i in range(n):
        for k in range(K):
            v[k] += sq[i] * g_second[i, k]
    return (np.empty((K, p)), v, np.empty((K, p, p)),
            np.empty((p * (p + 1) // 2, K)), np.empty((p, K)))


@njit(nogil=True)
def _fixed_aux_statistics_serial(indptr, indices, data, sq, g_mean, g_second, p, chunk,
                                 columns):
    """Feature-major statistics on one thread; ``columns`` from
    :func:`_column_index`."""
    bt, v, Q, acc, acc_b = _statistics_outputs(sq, g_second, p)
    start, rows, pos, _ = columns
    _statistics_features(0, p, start, rows, pos, indptr, indices, data, g_mean,
                         g_second, chunk, _packed_offsets(p), acc, acc_b, bt, Q)
    return bt, v, Q


@njit(parallel=True)
def _fixed_aux_statistics_parallel(indptr, indices, data, sq, g_mean, g_second, p,
                                   chunk, columns):
    """Feature-major statistics, one range of ``columns[3]`` per thread."""
    bt, v, Q, acc, acc_b = _statistics_outputs(sq, g_second, p)
    start, rows, pos, bounds = columns
    n_parts = bounds.shape[0] - 1
    off = _packed_offsets(p)
    for r in prange(n_parts):
        _statistics_features(bounds[r], bounds[r + 1], start, rows, pos, indptr,
                             indices, data, g_mean, g_second, chunk, off, acc, acc_b,
                             bt, Q)
    return bt, v, Q


# bytes of the weight rows (G_M and G_V) of one chunk of rows of the
# feature-major weighted Gram pass (about a core's L2 cache), and the largest
# packed accumulator for which the row-major pass is used instead
_GRAM_CHUNK_BYTES = 1 << 20
_GRAM_ROW_MAJOR_BYTES = 1 << 20


def _fixed_aux_statistics_csr(indptr, indices, data, sq, g_mean, g_second, p):
    """b = X^T G_M (K, p), v = G_V^T ||x||^2 (K,), Q[k] = X^T diag(G_V[:, k]) X.

    CSR X with sorted, unique indices; G_M, G_V of shape (n, K). Q costs
    O(sum_n nnz_n (nnz_n + 1) / 2 K) multiply-adds into a packed upper
    triangle (p (p + 1) / 2 rows of K weights). When that accumulator holds
    at most 1 MB, one serial row-major pass (:func:`_statistics_rows`);
    otherwise feature by feature (:func:`_statistics_features`), the
    features split into one range of about equal work per thread (one range
    when the pass is small, see :func:`~skbinvi.experts._bounds.use_parallel`).
    Every entry is summed over the rows in increasing order in both, so the
    numbers do not depend on the kernel or the number of threads.

    The row-major pass scatters its updates over the whole accumulator:
    beyond a core's cache it waits on memory. On the full Adult data with
    K = 60 weight columns (30 experts and 30 gates; 3.7 MB) it took 98-122
    ms with the columns split in two blocks on two threads, no faster than
    on one (102-106 ms); feature-major with chunks of about 1,000 rows,
    53-56 ms on two threads; on 3,500 rows of 785 binary pixels (K = 20),
    1.4 s against 0.52 s. With 4 or 10 weight columns on Adult (0.25 and
    0.6 MB) the row-major pass is faster: 29 and 35 ms against 39 and 72-83
    ms feature-major on one thread (2-core AMD EPYC, L2 512 KB per core).
    Checked against a row-major NumPy reference, bit for bit, in
    ``test_statistics_kernels_equal_a_row_major_pass_bit_for_bit``
    (``tests/test_experts_variational.py``).
    """
    n, K = g_second.shape
    if 8 * K * p * (p + 1) // 2 <= _GRAM_ROW_MAJOR_BYTES:
        return _statistics_rows(indptr, indices, data, sq, g_mean, g_second, p)
    chunk = max(64, _GRAM_CHUNK_BYTES // (16 * K))
    n_parts = min(numba.get_num_threads(), p)
    if use_parallel(n, K) and n_parts >= 2:
        return _fixed_aux_statistics_parallel(indptr, indices, data, sq, g_mean,
                                              g_second, p, chunk,
                                              _cached_column_index(indptr, indices, p,
                                                                   n_parts))
    columns = _cached_column_index(indptr, indices, p, 1)
    return _fixed_aux_statistics_serial(indptr, indices, data, sq, g_mean, g_second, p,
                                        chunk, columns)


@njit(nogil=True)
def _structure_checksum(indptr, indices):
    """FNV-1a hash of the CSR structure (indptr, then indices), O(nnz)."""
    h = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    for v in indptr:
        h = (h ^ np.uint64(v)) * prime
    for v in indices:
        h = (h ^ np.uint64(v)) * prime
    return h


# the column indices of the last matrices seen: the structure of X does not
# change during a fit, and building the index (a counting sort) took 10-13 ms
# of each 55 ms Gram pass on the full Adult data; its checksum takes about 1 ms
_COLUMN_INDEX_CACHE = {}
_COLUMN_INDEX_CACHE_SIZE = 2
_COLUMN_INDEX_LOCK = threading.Lock()


def _cached_column_index(indptr, indices, p, n_parts):
    """:func:`_column_index` of a CSR structure, reused while the same arrays
    hold the same structure (checked by :func:`_structure_checksum`, so an
    array changed in place is indexed again)."""
    key = (id(indptr), id(indices), indptr.shape[0], indices.shape[0], p, n_parts)
    checksum = _structure_checksum(indptr, indices)
    with _COLUMN_INDEX_LOCK:
        hit = _COLUMN_INDEX_CACHE.get(key)
    if hit is not None and hit[0] == checksum:
        return hit[1]
    columns = _column_index(indptr, indices, p, n_parts)
    with _COLUMN_INDEX_LOCK:
        _COLUMN_INDEX_CACHE.pop(key, None)
        while len(_COLUMN_INDEX_CACHE) >= _COLUMN_INDEX_CACHE_SIZE:
            _COLUMN_INDEX_CACHE.pop(next(iter(_COLUMN_INDEX_CACHE)))
        _COLUMN_INDEX_CACHE[key] = (checksum, columns)
    return columns


def prepared_csr(X):
    """CSR X in canonical format (sorted, unique indices) with int64 index
    arrays, the form every sparse kernel of this module takes.

    X itself when it already is one (the estimator prepares its design
    matrix once, :meth:`DiversityMixtureOfExperts._design`); otherwise a new
    matrix, the input is not modified. Preparing once matters: converting at
    every pass copied the index arrays 107 times in an Adult K = 30 fit
    (57 row passes and 50 weighted-Gram passes, 0.18 s).
    """
    if (X.format == "csr" and X.has_canonical_format and X.indices.dtype == np.int64
            and X.indptr.dtype == np.int64):
        return X
    X = sp.csr_matrix(X, copy=True)
    X.sum_duplicates()
    X.indices = X.indices.astype(np.int64)
    X.indptr = X.indptr.astype(np.int64)
    return X


def _canonical_csr(X):
    """(indptr, indices, data) of :func:`prepared_csr` (X)."""
    X = prepared_csr(X)
    return X.indptr, X.indices, X.data


def _fixed_aux_statistics(X, sq, g_mean, g_second):
    """(b (K, p), v (K,), Q (K, p, p)) of :class:`_FixedAuxLikelihood` for
    weights G_M, G_V (n, K): b = X^T G_M, v = G_V^T sq, Q[k] = X^T diag(G_V[:, k]) X
    (dense or CSR X)."""
    if sp.issparse(X):
        return _fixed_aux_statistics_csr(*_canonical_csr(X), sq,
                                         np.ascontiguousarray(g_mean),
                                         np.ascontiguousarray(g_second), X.shape[1])
    Q = np.stack([X.T @ (X * g_second[:, k, None]) for k in range(g_second.shape[1])])
    return np.ascontiguousarray((X.T @ g_mean).T), sq @ g_second, Q


# Use the (K, p, p) statistics when they hold at most this many numbers
# (160 MB), rows have at most this many non-zeros on average, and p^2 is at
# most this many times nnz(X): an evaluation then costs O(K p^2) against
# O(K nnz(X)) by a pass over the data. Measured (K = 10, one thread, Reuters
# bodies restricted to their p most frequent words, 5,048 rows; seconds per
# outer iteration, statistics / direct): p = 250 (p^2 = 0.63 nnz) 0.068 /
# 0.218, 400 (1.4) 0.113 / 0.241, 500 (2.1) 0.178 / 0.261, 600 (2.8) 0.245
# / 0.280, 800 (4.7) 0.47 / 0.28; the crossing is near p^2 = 3.3 nnz.
# Forming the statistics costs O(K sum_n nnz_n^2), a pass O(K nnz): on dense
# rows the passes (the line search prices its trials without one, see
# _FixedAuxLikelihood.line) win from about 100 columns (the tables of
# benchmarks/bench_moe.py: the one-hot Adult table of 124 design columns
# faster by passes, the 65 of the digits by the statistics).
_STATS_MAX_ENTRIES = 20_000_000
_STATS_MAX_ROW_NNZ = 100
_STATS_MAX_SQUARE_PER_NNZ = 3.0


@njit
def _fixed_aux_weights(sign, phi, xi, c, d):
    """The weights G_M, G_V of :class:`_FixedAuxLikelihood`, experts then gates (n, 2K).

    experts: G_M = phi (2y - 1)/2, G_V = -phi lam(xi); gates: G_M = phi - 1/2
    + 2 c lam(d), G_V = -lam(d), lam of :func:`~skbinvi.experts._bounds.jj_lambda`
    (tanh(|x|/2) / (4 |x|), 1/8 at |x| <= 1e-8), in one pass over the rows.
    """
    n, K = phi.shape
    g_mean = np.empty((n, 2 * K))
    g_second = np.empty((n, 2 * K))
    for i in range(n):
        for k in range(K):
            x = abs(xi[i, k])
            lam_x = np.tanh(0.5 * x) / (4.0 * x) if x > _LAM_SMALL else 0.125
            x = abs(d[i, k])
            lam_d = np.tanh(0.5 * x) / (4.0 * x) if x > _LAM_SMALL else 0.125
            g_mean[i, k] = 0.5 * phi[i, k] * sign[i]
            g_second[i, k] = -phi[i, k] * lam_x
            g_mean[i, K + k] = phi[i, k] - 0.5 + 2.0 * c[i] * lam_d
            g_second[i, K + k] = -lam_d
    return g_mean, g_second


class _FixedAuxLikelihood:
    """L_lik at fixed auxiliaries (phi, xi, c, d), up to a constant [D].

    At fixed auxiliaries the likelihood bound is linear in the projection
    moments M_nk = E[a_k^T x_n] = c1_k t_nk and V_nk = E[(a_k^T x_n)^2] =
    c2_k ||x_n||^2 + c3_k t_nk^2 (t_nk = mu_k^T x_n) of each set of vectors:
    L = sum_nk (G_M,nk M_nk + G_V,nk V_nk) + const, with
    experts: G_M = phi (2y - 1)/2, G_V = -phi lam(xi);
    gates:   G_M = phi - 1/2 + 2 c lam(d), G_V = -lam(d)
    ([D]: the derivatives of the bounds of :mod:`skbinvi.experts._bounds` in
    the moments at fixed auxiliaries). Hence

        L_set = sum_k [c1_k mu_k^T b_k + c2_k v_k + c3_k mu_k^T Q_k mu_k] + const,

    b_k = X^T G_M[:, k], v_k = sum_n G_V,nk ||x_n||^2 and
    Q_k = X^T diag(G_V[:, k]) X. With ``use_statistics`` these are formed
    once (O(sum_n nnz_n^2 K) time, K p^2 memory) and every evaluation of the
    value or gradient costs O(K p^2), independent of n; otherwise each
    evaluation goes through the data (O(nnz(X) K)). Both give the same
    numbers (tested). ``weights``: (G_M, G_V), each (n, 2K), when the caller
    has them (:func:`objective_and_aux` with ``want_weights``). ``scale``
    (p,): the experts' design is X diag(scale) (:func:`design_scale`; the
    last entry scales their intercept column): their projections are
    X (mu * scale)^T, their squared row norms ``sq + scale[-1]^2 - 1``, and
    b, Q, dL/dmu carry the scale; None: X for both sets.
    """

    def __init__(self, X, y, sq, aux, use_statistics, weights=None, scale=None):
        phi, xi, c, d = aux
        K = phi.shape[1]
        if weights is None:
            g_mean, g_second = _fixed_aux_weights(2.0 * y - 1.0, phi, xi, c, d)
        else:  # (G_M, G_V) from the objective's pass over the rows
            g_mean, g_second = weights
        # columns: experts then gates; g_second side by side, (n, 2K)
        self.weights = ((g_mean[:, :K], g_second[:, :K]),
                        (g_mean[:, K:], g_second[:, K:]))
        self.X, self.sq, self.scale = X, sq, scale
        shift = norm_shift(scale)
        # sum_n G_V,nk ||x_n||^2 of each set: independent of mu
        self._v = (None if use_statistics
                   else [sq @ self.weights[j][1] + shift * (j == 0)
                         * self.weights[j][1].sum(axis=0) for j in range(2)])
        self._cache = [None, None]
        # (mu, its products, X direction^T, direction) of each set's line search
        self._lines = [None, None]
        self.use_statistics = use_statistics
        if use_statistics:
            # both sets' b, v, Q in one pass over the pairs of non-zeros (n, 2K)
            b, v, Q = _fixed_aux_statistics(X, sq, g_mean, g_second)
            if scale is not None:  # the experts' design X diag(scale)
                b[:K] *= scale
                Q[:K] *= scale[:, None] * scale
                v[:K] += shift * g_second[:, :K].sum(axis=0)
            self.stats = [(b[j * K:(j + 1) * K], v[j * K:(j + 1) * K],
                           Q[j * K:(j + 1) * K]) for j in range(2)]
            # both sets as (2, K, ...) views, for the compiled inner ascent
            p = b.shape[1]
            self.stacked_stats = (b.reshape(2, K, p), v.reshape(2, K),
                                  Q.reshape(2, K, p, p))

    # interface of skbinvi.experts._ascent.SetObjective
    def statistics(self, which):
        """(b, v, Q) of set ``which``, or None when the data are used directly."""
        return self.stats[which] if self.use_statistics else None

    def _projections(self, which, mu):
        """(t = X mu^T (n, K), sum_n G_M t (K,), sum_n G_V ||x||^2 (K,),
        sum_n G_V t^2 (K,)) of set ``which``, from one pass over the data.

        The last mu of each set is remembered with its products: the kappa,
        r and s blocks of the ascent move with mu fixed, so most evaluations
        need no pass (the same numbers as a new pass).
        """
        for cache in (self._cache[which], self._lines[which]):
            if cache is not None and (cache[0] is mu or np.array_equal(cache[0], mu)):
                return cache[1]
        return self._remember(which, mu, np.asarray(self.X @ self._design(which, mu).T))

    def _design(self, which, mu):
        """``mu`` (K, p) of set ``which`` as vectors of X: mu * scale for the
        experts of a scaled design, else mu itself."""
        return mu if which != 0 or self.scale is None else mu * self.scale

    def _remember(self, which, mu, t):
        """Cache and return the products of :meth:`_projections` for the
        projections ``t`` = X mu^T."""
        g_mean, g_second = self.weights[which]
        out = (t, np.sum(g_mean * t, axis=0), self._v[which],
               np.sum(g_second * t * t, axis=0))
        self._cache[which] = (mu.copy(), out)
        return out

    def line(self, which, mu, direction):
        """Start a line search of set ``which`` from ``mu`` along ``direction``
        (K, p, tangent): one pass for the projections X direction^T, after
        which every trial mu(h) = (mu + h direction) / ||mu + h direction||
        costs O(n K), t(h) = (X mu^T + h X direction^T) / ||mu + h direction||
        (:meth:`moments_value` with ``line``)."""
        self._lines[which] = (mu.copy(), self._projections(which, mu),
                              np.asarray(self.X @ self._design(which, direction).T),
                              direction)

    def moments_value(self, which, mu, c1, c2, c3, line=None):
        """L of each vector (K,) of set ``which`` from the data, given the
        coefficients. ``line``: the steps h (K,) when ``mu`` is the trial
        mu(h) of the line search of :meth:`line` (no pass over the data)."""
        start = self._lines[which]
        if line is not None and start is not None:
            mu0, (t0, *_), td, direction = start
            norms = np.linalg.norm(mu0 + line[:, None] * direction, axis=1)
            _, mt, v, mt2 = self._remember(which, mu, (t0 + td * line) / norms)
        else:
            _, mt, v, mt2 = self._projections(which, mu)
        return mt * c1 + v * c2 + mt2 * c3

    def moments_gradient(self, which, mu, c1, c3, need_mu=True):
        """dL/dmu (K, p) and dL/d(c1, c2, c3) (K,) each, from the data
        (dL/dmu None without ``need_mu``: no pass over the data)."""
        g_mean, g_second = self.weights[which]
        t, _, v, _ = self._projections(which, mu)
        g_mu = None
        if need_mu:
            g_t = g_mean * c1 + 2.0 * g_second * c3 * t
            g_mu = np.ascontiguousarray(
                np.asarray(self.X.T @ g_t).T if sp.issparse(self.X) else g_t.T @ self.X)
            if which == 0 and self.scale is not None:
                g_mu *= self.scale
        return (g_mu, np.einsum("nk,nk->k", g_mean, t), v,
                np.einsum("nk,nk->k", g_second, t * t))


def _use_statistics(X, K, mode):
    if mode in (True, False):
        return mode
    n, p = X.shape
    nnz = X.nnz if sp.issparse(X) else n * p
    return (K * p * p <= _STATS_MAX_ENTRIES
            and nnz <= _STATS_MAX_ROW_NNZ * max(n, 1)
            and p * p <= _STATS_MAX_SQUARE_PER_NNZ * nnz)


# ---------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------


def _init_params(K, p, rng, kappa_init, init_scale):
    """The random start: uniform mean directions, equal kappa, q(g) =
    Gamma(5, 5 / scale)."""
    mu = rng.normal(size=(K, p))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    return VMFGammaParams(mu, np.full(K, float(kappa_init)), np.full(K, _INIT_SHAPE),
                          np.full(K, _INIT_SHAPE / float(init_scale)))


def params_from_vectors(A, shape=_WARM_SHAPE, kappa=None):
    """A vMF x Gamma q whose posterior mean vectors equal the rows of A (K, p).

    mu_k = a_k / ||a_k||, kappa_k = ``kappa`` (default 2 p: A_p(2 p) is
    about 0.8 for p >= 20, the directions are known to about 0.7 rad),
    q(g_k) = Gamma(shape, rate) with rate shape A_p(kappa) / ||a_k||, so that
    E[g] A_p(kappa) mu = a. Used to start "vi" and "pr" from a BMEM-G fit
    (``init="bmemg"``: the user guide, section "Starting point"). A broad q
    (kappa 2 p, shape 5) lets the first iterations move; a tight one (kappa
    10 p, shape 50) started the ascent where it crept (the two-expert data of
    the tests: 0.77 against 0.85 held-out accuracy with the defaults). Zero
    rows get the direction of the last axis and norm 1e-3.
    """
    A = np.array(A, dtype=np.float64)
    K, p = A.shape
    norms = np.linalg.norm(A, axis=1)
    zero = ~(norms > 1e-3)
    A[zero] = 0.0
    A[zero, -1] = 1e-3
    norms = np.linalg.norm(A, axis=1)
    kappa = np.full(K, 2.0 * p if kappa is None else float(kappa))
    a = _bessel_quantities(np.full(K, float(p)), kappa)[0]
    r = np.full(K, float(shape))
    return VMFGammaParams(A / norms[:, None], kappa, r, r * a / norms)


@dataclass
class VariationalState:
    """The state of a "vi" / "pr" fit between two iterations.

    Attributes
    ----------
    beta, eta : VMFGammaParams
        q of the expert and gate vectors.
    steps : ndarray of shape (8, K) or None
        Step sizes of the 8 blocks of the inner ascent, per vector.
    aux : tuple (phi, xi, c, d) or None
        Optimal auxiliaries at (beta, eta) for the rows last used.
    value : float or None
        The objective at (beta, eta, aux), nats (total over those rows).
    weights : tuple (G_M, G_V) or None
        The weights of :class:`_FixedAuxLikelihood` at aux (None: computed
        from aux).
    """

    beta: VMFGammaParams
    eta: VMFGammaParams
    steps: np.ndarray = None
    aux: tuple = None
    value: float = None
    weights: tuple = None
    omega: float = 2.0
    omega_growth: float = 2.0
    logdets: list = None
    spare: tuple = None


def _point(params):
    return Point(params.mu, params.kappa, params.r, params.s)


def objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams, c_init=None,
                      want_weights=False, out=None, gain_tol=_GATE_GAIN_TOL):
    """The objective at q = (beta, eta) and its optimal auxiliaries (phi, xi, c, d).

    No validation (callers validate). ``sq`` = squared row norms of X,
    ``consts`` from :func:`~skbinvi.experts._ascent.prior_constants`. Returns
    (value in nats, total over the rows; aux); with ``want_weights`` also
    the weights (G_M, G_V) of :class:`_FixedAuxLikelihood` at aux (from the
    same pass over the rows; None for K = 1). ``out``: the arrays of an
    earlier result that nothing uses any more (:func:`_buffers`), overwritten.
    ``gain_tol``: a row's gate solver stops when one more Newton step would
    gain less (nats; K >= 2). The experts see the design X diag(s) of
    :func:`design_scale` (``cfg.intercept_scale``), the gates X.
    """
    pts = (_point(beta), _point(eta))
    scale = design_scale(cfg.intercept_scale, X.shape[1])
    mu_b = beta.mu if scale is None else beta.mu * scale
    shift = norm_shift(scale)
    coefs = []
    for which, pt in enumerate(pts):
        a, aok, omega = pt.bessel()[:3]
        eg, eg2, _ = pt.gamma(*set_alphas(cfg, which))
        coefs.append(np.array([eg * a, eg2 * aok, eg2 * omega], dtype=np.float64))
    if c_init is not None and np.shape(c_init) != (X.shape[0],):
        c_init = None
    if beta.mu.shape[0] >= 2:
        # one pass over the rows: projections (CSR X), moments, gate Newton and
        # pieces fused
        if sp.issparse(X):
            projections, csr = (None, None), (*_canonical_csr(X), mu_b, eta.mu)
        else:
            projections, csr = [np.ascontiguousarray(X @ mu.T, dtype=np.float64)
                                for mu in (mu_b, eta.mu)], None
        phi, xi, c, d, (e, g, h), g_mean, g_second = _objective_rows(
            2.0 * y - 1.0, sq, *projections, *coefs,
            (np.zeros(1) if c_init is None
             else np.ascontiguousarray(c_init, dtype=float)),
            c_init is not None, _GATE_ROUNDS, _GATE_TOL, gain_tol, want_weights,
            out, csr, shift)
        weights = (g_mean, g_second)
    else:
        weights = None
        projections = [np.asarray(X @ mu.T, dtype=np.float64) for mu in (mu_b, eta.mu)]
        moments = []
        for t, (c1, c2, c3), extra in zip(projections, coefs, (shift, 0.0),
                                          strict=True):
            moments += [c1 * t, c2 * (sq + extra)[:, None] + c3 * (t * t)]
        e, g, h, phi, _, xi, c, d = likelihood_pieces_from_moments(y, *moments,
                                                                   c_init=c_init)
    value = float(e + g + h + set_prior(pts[0], cfg, consts, lams[0], 0)
                  + set_prior(pts[1], cfg, consts, lams[1], 1))
    if want_weights:
        return value, (phi, xi, c, d), weights
    return value, (phi, xi, c, d)


def _buffers(aux, weights):
    """The arrays (phi, xi, d, c, G_M, G_V) of a result of :func:`objective_and_aux`,
    for reuse as its ``out`` once nothing refers to them (None if K = 1)."""
    if weights is None:
        return None
    phi, xi, c, d = aux
    return (phi, xi, d, c, *weights)


def variational_iteration(X, y, sq, state, cfg, consts, lams, inner_max_iter,
                          use_statistics, inner_tol):
    """One outer iteration of "vi" / "pr" on ``state`` (updated in place).

    (1) If the state has no auxiliaries for these rows, set them to their
    optima; (2) up to ``inner_max_iter`` rounds of the blockwise ascent of
    :func:`~skbinvi.experts._ascent.ascend` at fixed auxiliaries (stopping
    when a round gains less than ``inner_tol`` nats), from q0 to q1; the
    objective at q1 with the old auxiliaries, F_t + gain, is known from the
    ascent; (3) over-relaxation [SR]: the objective at re-optimized
    auxiliaries is evaluated at q0 + omega (q1 - q0) first, and that point is
    kept when it beats F_t, the objective before the iteration ([SR]'s rule).
    When it also beats F_t + gain, omega grows by ``state.omega_growth``, a
    factor that starts at 2; otherwise omega falls back to ``_MIN_OMEGA`` and
    the factor is replaced by its square root, down to
    ``_MIN_OMEGA_GROWTH``. An extrapolation below F_t is dropped and the
    objective evaluated at q1 (kept unless rounding in the gate solver puts
    it below F_t + gain). One pass over the rows when the extrapolation is
    kept, two otherwise. Keeping extrapolations that beat F_t but not
    F_t + gain (before, they were dropped) saved passes and ended higher on
    full Adult at K = 30, seeds 0-3: 47-53 passes against 49-63 and ELBO
    -0.3781 to -0.3834 against -0.3836 to -0.3924 nats per sample at 40
    iterations at most.
    The same pass returns the weights of
    :class:`_FixedAuxLikelihood` for the next iteration. The arrays of the
    auxiliaries and weights that are dropped are kept (``state.spare``) and
    overwritten by the next pass instead of allocating new ones. Returns the
    objective after the iteration, nats (total over the rows), never below
    its value before.
    """
    if state.aux is None or state.aux[0].shape[0] != X.shape[0]:
        state.value, state.aux, state.weights = objective_and_aux(
            X, y, sq, state.beta, state.eta, cfg, consts, lams, want_weights=True,
            gain_tol=_ROW_GATE_GAIN_TOL)
    if state.steps is None or state.steps.shape != (8, state.beta.mu.shape[0]):
        state.steps = np.full((8, state.beta.mu.shape[0]), INIT_STEP)
    start = state.value
    lik = _FixedAuxLikelihood(X, y, sq, state.aux, use_statistics, state.weights,
                              design_scale(cfg.intercept_scale, X.shape[1]))
    objectives = [SetObjective(lik, j, cfg, consts, lams[j]) for j in range(2)]
    pts, gain, accepted = ascend(objectives, [_point(state.beta), _point(state.eta)],
                                 state.steps, inner_max_iter, inner_tol)
    if not accepted:
        return start
    beta, eta = (VMFGammaParams(pt.mu, pt.kappa, pt.r, pt.s) for pt in pts)
    # the objective at q1 = (beta, eta) with the old auxiliaries: a lower
    # bound on its value at re-optimized ones, known without a pass over the data
    floor = start + gain
    old_beta, old_eta = state.beta, state.eta
    if state.omega > 1.0:
        # over-relaxation [SR]: try q0 + omega (q1 - q0) (tangent / log scale)
        # first
        ext = [_extrapolate(q0, q1, state.omega)
               for q0, q1 in ((old_beta, beta), (old_eta, eta))]
        try:
            with np.errstate(all="ignore"):
                v_ext, aux_ext, w_ext = objective_and_aux(
                    X, y, sq, ext[0], ext[1], cfg, consts, lams, c_init=state.aux[2],
                    want_weights=True, out=state.spare, gain_tol=_ROW_GATE_GAIN_TOL)
        except (ValueError, FloatingPointError):
            v_ext = -np.inf
        else:
            # the arrays of the extrapolation: free again unless it is kept
            state.spare = _buffers(aux_ext, w_ext)
        if np.isfinite(v_ext) and v_ext > start:
            # kept whenever it raises the objective ([SR]'s rule), which spares
            # the pass at q1; omega grows only when it also beats q1's floor
            state.spare = _buffers(state.aux, state.weights)
            state.beta, state.eta, state.value = ext[0], ext[1], v_ext
            state.aux, state.weights = aux_ext, w_ext
            if v_ext > floor:
                state.omega = min(state.omega_growth * state.omega, _MAX_OMEGA)
            else:
                _shrink_omega(state)
            return state.value
        _shrink_omega(state)
    value, aux, weights = objective_and_aux(
        X, y, sq, beta, eta, cfg, consts, lams, c_init=state.aux[2], want_weights=True,
        out=state.spare, gain_tol=_ROW_GATE_GAIN_TOL)
    if value < floor:
        # the re-optimized auxiliaries lost to rounding: keep the old ones
        state.spare = _buffers(aux, weights)
        value, aux, weights = floor, state.aux, state.weights
    else:
        state.spare = _buffers(state.aux, state.weights)
    state.beta, state.eta, state.value = beta, eta, value
    state.aux, state.weights = aux, weights
    return state.value


def _shrink_omega(state):
    """After an extrapolation that did not beat the plain step: omega back to
    ``_MIN_OMEGA``, its growth factor replaced by its square root."""
    state.omega = _MIN_OMEGA
    state.omega_growth = max(np.sqrt(state.omega_growth), _MIN_OMEGA_GROWTH)


def _extrapolate(q0, q1, omega):
    """q0 + omega (q1 - q0): mean directions along the chord then normalized,
    kappa, r, s in log scale."""
    mu = q0.mu + omega * (q1.mu - q0.mu)
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    logs = [np.exp(np.clip(np.log(a) + omega * (np.log(b) - np.log(a)), -20.0, 20.0))
            for a, b in ((q0.kappa, q1.kappa), (q0.r, q1.r), (q0.s, q1.s))]
    logs[0] = np.clip(logs[0], KAPPA_MIN, KAPPA_MAX)
    return VMFGammaParams(mu, *logs)


# ---------------------------------------------------------------------------
# the BMEM-G baseline: Gaussian prior, Gaussian q, closed-form updates
# ---------------------------------------------------------------------------


@njit(inline="always")
def _quadratic_forms_row(i, indptr, indices, data, St, out):
    """out[i, k] = x_i^T S[k] x_i for all k (``St`` = S as (p, p, K))."""
    K = St.shape[2]
    lo, hi = indptr[i], indptr[i + 1]
    for a in range(lo, hi):
        ja = indices[a]
        xa = data[a]
        for b in range(a, hi):
            jb = indices[b]
            w = xa * data[b] * (1.0 if a == b else 2.0)
            for k in range(K):
                out[i, k] += w * St[ja, jb, k]


@njit(nogil=True)
def _quadratic_forms_serial(indptr, indices, data, St):
    out = np.zeros((indptr.shape[0] - 1, St.shape[2]))
    for i in range(out.shape[0]):
        _quadratic_forms_row(i, indptr, indices, data, St, out)
    return out


@njit(parallel=True)
def _quadratic_forms_parallel(indptr, indices, data, St):
    out = np.zeros((indptr.shape[0] - 1, St.shape[2]))
    for i in prange(out.shape[0]):
        _quadratic_forms_row(i, indptr, indices, data, St, out)
    return out


def _rowwise_quadratic_forms_csr(indptr, indices, data, St):
    """out[n, k] = x_n^T S[k] x_n for CSR X (sorted unique indices).

    ``St`` is S transposed to (p, p, K) and C-contiguous, S[k] symmetric, so
    that the inner loop over k reads contiguous memory. O(sum_n nnz_n^2 K / 2);
    rows in parallel for large passes. Checked against the NumPy einsum in
    ``tests/test_experts_variational.py::test_weighted_gram_and_quadratic_forms_match_numpy``.
    """
    kernel = (_quadratic_forms_parallel
              if use_parallel(indptr.shape[0] - 1, St.shape[2])
              else _quadratic_forms_serial)
    return kernel(indptr, indices, data, St)


@njit
def _transposed_stack(S1, S2):
    """S1 and S2 (K, p, p) each stacked and transposed: St (p, p, 2K) with
    St[a, b, k] = S1[k, a, b] and St[a, b, K + k] = S2[k, a, b], C-contiguous
    (one pass; numpy's concatenate, moveaxis and ascontiguousarray took 7 of
    the 90 ms of a BMEM-G iteration at K = 30, p = 124, 2,000 rows)."""
    K, p = S1.shape[0], S1.shape[1]
    St = np.empty((p, p, 2 * K))
    for a in range(p):
        # rows a of every S[k] read contiguously, into the block St[a] (p, 2K)
        for k in range(K):
            for b in range(p):
                St[a, b, k] = S1[k, a, b]
            for b in range(p):
                St[a, b, K + k] = S2[k, a, b]
    return St


def _rowwise_quadratic_forms(X, S):
    """x_n^T S_k x_n for all rows and k: (n, K)."""
    if sp.issparse(X):
        return _rowwise_quadratic_forms_csr(*_canonical_csr(X),
                                            np.ascontiguousarray(np.moveaxis(S, 0, 2)))
    return np.stack([np.einsum("np,np->n", X @ Sk, X) for Sk in S], axis=1)


def _both_quadratic_forms(X, covs):
    """[x_n^T S_k x_n for the experts, the same for the gates], one pass over X."""
    K = covs[0].shape[0]
    if sp.issparse(X):
        qf = _rowwise_quadratic_forms_csr(
            *_canonical_csr(X), _transposed_stack(np.ascontiguousarray(covs[0]),
                                                  np.ascontiguousarray(covs[1])))
    else:
        qf = _rowwise_quadratic_forms(X, np.concatenate(covs))
    return [qf[:, :K], qf[:, K:]]


def _gaussian_kl(mean, cov, sigma, logdet=None):
    """sum_k KL(N(mean_k, cov_k) || N(0, sigma^2 I)) in nats (``logdet``: of each
    cov_k)."""
    K, p = mean.shape
    if logdet is None:
        logdet = np.linalg.slogdet(cov)[1]
    tr = np.trace(cov, axis1=1, axis2=2)
    return float(0.5 * np.sum((tr + np.sum(mean * mean, axis=1)) / sigma**2 - p
                              + 2.0 * p * np.log(sigma) - logdet))


@dataclass
class GaussianState:
    """State of a BMEM-G fit: means (2, K, p), covariances (2, K, p, p), auxiliaries.

    With ``diagonal`` (a q that factorizes over coordinates), ``covs`` holds
    the variances (2, K, p) instead.
    """

    means: list
    covs: list
    aux: tuple = None
    value: float = None
    omega: float = 2.0
    logdets: list = None
    weights: tuple = None
    diagonal: bool = False


def prior_covariances(K, p, sigma):
    """Two sets of K covariances at the prior, sigma^2 I: (K, p, p) each."""
    return [np.broadcast_to(np.eye(p) * sigma**2, (K, p, p)).copy() for _ in range(2)]


def gaussian_init(K, p, sigma, rng, init_scale=1.0, covariances=True):
    """Random means N(0, init_scale^2 / p), covariances at the prior sigma^2 I.

    ``covariances=False`` leaves ``covs`` None (2 K p^2 floats less), for a
    state whose covariances :func:`prior_covariances` gives when it is used.
    """
    means = [rng.normal(scale=init_scale / np.sqrt(p), size=(K, p)) for _ in range(2)]
    return GaussianState(means, prior_covariances(K, p, sigma) if covariances else None)


def gaussian_objective_and_aux(X, y, state, sigma, c_init=None, qf=None):
    """ELBO of the BMEM-G q (nats, total) at optimal auxiliaries; stored on ``state``.

    ``qf``: the quadratic forms x_n^T S_k x_n of both sets, if known. A
    ``state.diagonal`` q has S_k = diag(s_k).
    """
    if c_init is not None and np.shape(c_init) != (X.shape[0],):
        c_init = None
    if qf is None:
        qf = (_diagonal_quadratic_forms(squared_entries(X), state.covs)
              if state.diagonal else _both_quadratic_forms(X, state.covs))
    moments = []
    for mean, q in zip(state.means, qf, strict=True):
        m = np.asarray(X @ mean.T)
        moments += [m, m * m + q]
    if state.means[0].shape[0] >= 2:  # fused pass, with the fixed-auxiliary weights
        pieces = _optimal_likelihood_pieces(y, *moments, _GATE_ROUNDS, _GATE_TOL,
                                            c_init, want_weights=True,
                                            gain_tol=_GATE_GAIN_TOL)
        state.weights = pieces[-1]
    else:
        pieces = likelihood_pieces_from_moments(y, *moments, c_init=c_init)
        state.weights = None
    if state.diagonal:
        kl = sum(_diagonal_gaussian_kl(m, v, sigma)
                 for m, v in zip(state.means, state.covs, strict=True))
    else:
        logdets = state.logdets if state.logdets is not None else [None, None]
        kl = sum(_gaussian_kl(m, S, sigma, ld)
                 for m, S, ld in zip(state.means, state.covs, logdets, strict=True))
    state.value = float(sum(pieces[:3]) - kl)
    phi, _, xi, c, d = pieces[3:8]
    state.aux = (phi, xi, c, d)
    return state.value


def _cholesky_jittered(P):
    """Cholesky factors of the (K, p, p) precisions, adding a diagonal jitter if needed.

    The precisions I / sigma^2 - 2 Q_k are positive definite in exact
    arithmetic (Q_k is negative semi-definite), but with features of very
    different or very large scales (1e30) rounding can make them indefinite:
    then 1e-12, 1e-10, ... times the largest diagonal entry is added until
    the factorization succeeds (a slightly broader q).
    """
    try:
        return np.linalg.cholesky(P)
    except np.linalg.LinAlgError:
        pass
    P = 0.5 * (P + np.swapaxes(P, 1, 2))
    top = np.max(np.abs(np.diagonal(P, axis1=1, axis2=2)), axis=1)
    eye = np.eye(P.shape[1])
    for rel in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4):
        try:
            return np.linalg.cholesky(P + (rel * top)[:, None, None] * eye)
        except np.linalg.LinAlgError:
            continue
    raise ValueError("the BMEM-G posterior precision is not positive definite even "
                     "with a diagonal jitter of 1e-4 of its scale: the features "
                     "are on wildly different scales; standardize them.")


def _inverse_from_cholesky(chol):
    """The (K, p, p) inverses of L_k L_k^T from the lower Cholesky factors L_k.

    LAPACK ``dpotri`` (about p^3 / 3 multiply-adds after the factorization,
    against 4 p^3 / 3 for inverting L and forming L^-T L^-1: at K = 30,
    p = 124, 13 against 19 ms per set); it fills the lower triangle, the
    upper one is mirrored from it by :func:`_mirror_lower`.
    """
    out = np.empty_like(chol)
    for k in range(chol.shape[0]):
        out[k], info = lapack.dpotri(chol[k], lower=1)
        if info != 0:
            raise ValueError("the BMEM-G posterior precision is singular; standardize "
                             "the features.")
    _mirror_lower(out)
    return out


@njit
def _mirror_lower(S):
    """Copy the lower triangle of each S[k] (K, p, p) onto its upper one, in
    place (numpy's tril and swapaxes took 8.5 of the 90 ms of a BMEM-G
    iteration at K = 30, p = 124, 2,000 rows)."""
    for k in range(S.shape[0]):
        for a in range(S.shape[1]):
            for b in range(a):
                S[k, b, a] = S[k, a, b]


def gaussian_iteration(X, y, sq, state, sigma):
    """One BMEM-G iteration: closed-form q at the current auxiliaries, then new
    auxiliaries.

    Returns the ELBO after the iteration (nats, total), never below the one before.
    """
    if state.aux is None or state.aux[0].shape[0] != X.shape[0]:
        gaussian_objective_and_aux(X, y, state, sigma)
    p = state.means[0].shape[1]
    eye = np.eye(p) / sigma**2
    lik = _FixedAuxLikelihood(X, y, sq, state.aux, True, state.weights)
    old_means = [m.copy() for m in state.means]
    for j, (b, _, Q) in enumerate(lik.stats):
        # the precisions I / sigma^2 - 2 Q in place of Q, which is not needed
        # again (the same numbers as eye - 2 Q: 2 Q is exact and a - b =
        # (-b) + a), and the old covariances freed before the new ones are
        # formed: 2 K p^2 floats less at the peak of the iteration
        Q *= -2.0
        Q += eye
        chol = _cholesky_jittered(Q)
        if state.logdets is None:
            state.logdets = [None, None]
        # log det cov = -log det precision = -2 sum log diag(chol)
        state.logdets[j] = -2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)),
                                         axis=1)
        state.covs[j] = None
        state.covs[j] = _inverse_from_cholesky(chol)
        state.means[j] = np.matmul(state.covs[j], b[:, :, None])[:, :, 0]
    # the quadratic forms depend on the covariances only: shared by both evaluations
    qf = _both_quadratic_forms(X, state.covs)
    value = gaussian_objective_and_aux(X, y, state, sigma, c_init=state.aux[2], qf=qf)
    _over_relax(X, y, state, old_means, value, sigma, qf)
    return state.value


def _over_relax(X, y, state, old_means, value, sigma, qf):
    """Over-relaxation of the means of a BMEM-G iteration [SR] (the
    covariances keep their update): m_old + omega (m_new - m_old) is kept
    when its ELBO (at optimal auxiliaries) beats ``value``, the ELBO of the
    update; omega doubles then (up to ``_MAX_OMEGA``), else it falls back to
    ``_MIN_OMEGA``. ``state`` is updated in place."""
    if state.omega <= 1.0:
        return
    ext = GaussianState([m0 + state.omega * (m1 - m0)
                         for m0, m1 in zip(old_means, state.means, strict=True)],
                        state.covs, logdets=state.logdets, diagonal=state.diagonal)
    with np.errstate(all="ignore"):
        v_ext = gaussian_objective_and_aux(X, y, ext, sigma, c_init=state.aux[2], qf=qf)
    if np.isfinite(v_ext) and v_ext > value:
        state.means, state.aux, state.value = ext.means, ext.aux, v_ext
        state.weights = ext.weights
        state.omega = min(2.0 * state.omega, _MAX_OMEGA)
    else:
        state.omega = _MIN_OMEGA


# ---------------------------------------------------------------------------
# BMEM-G with a factorized (diagonal-covariance) q: the start on wide data
# ---------------------------------------------------------------------------

# conjugate-gradient solve of the means in each diagonal BMEM-G iteration:
# at most this many steps, stopped when every column's residual norm is at
# most this fraction of its right-hand side's (it starts at the previous
# means, so few steps are needed after the first iterations)
_CG_MAX_ITER = 50
_CG_RTOL = 1e-3


def diagonal_gaussian_init(K, p, sigma, rng, init_scale=1.0):
    """Random means N(0, init_scale^2 / p) and prior variances sigma^2 (K, p) per set.

    The state of a BMEM-G fit whose q factorizes over the coordinates of
    every vector (``diagonal=True``): ``covs`` holds the variances (K, p) of
    each set, 2 K p floats instead of 2 K p^2.
    """
    means = [rng.normal(scale=init_scale / np.sqrt(p), size=(K, p)) for _ in range(2)]
    return GaussianState(means, [np.full((K, p), sigma**2) for _ in range(2)],
                         diagonal=True)


def column_support(X):
    """Indices (int64, increasing) of the columns of X with a stored or non-zero entry.

    A column of zeros takes no part in the likelihood of the BMEM-G bound:
    its coordinate of b_k and of Q_k vanish, so under a factorized q its
    optimum is the prior, mean 0 and variance sigma^2, with a KL of 0
    (:func:`embed_columns`).
    """
    if sp.issparse(X):
        return np.flatnonzero(sp.csc_matrix(X).getnnz(axis=0)).astype(np.int64)
    return np.flatnonzero(np.any(np.asarray(X) != 0, axis=0)).astype(np.int64)


def embed_columns(state, support, p, sigma):
    """A factorized BMEM-G state fitted on the columns ``support`` of a design
    with ``p`` columns, extended to all of them at the prior (means 0,
    variances sigma^2), where the other columns' optimum is: the same ELBO.
    ``state`` is updated in place and returned."""
    def extend(blocks, fill):
        out = []
        for block in blocks:
            full = np.full((block.shape[0], p), fill)
            full[:, support] = block
            out.append(full)
        return out

    state.means = extend(state.means, 0.0)
    state.covs = extend(state.covs, sigma**2)
    return state


def squared_entries(X):
    """X with every entry squared, same format (CSR stays CSR): x_nj^2."""
    if sp.issparse(X):
        return X.multiply(X).tocsr()
    return X * X


def transposed(X):
    """X^T as CSR (sparse X) or C-contiguous (dense): fast products X^T V."""
    return X.T.tocsr() if sp.issparse(X) else np.ascontiguousarray(X.T)


def _diagonal_quadratic_forms(X2, variances):
    """[x_n^T diag(s_k) x_n = sum_j x_nj^2 s_kj] for both sets (n, K each): O(nnz K)."""
    return [np.asarray(X2 @ s.T) for s in variances]


def _diagonal_gaussian_kl(means, variances, sigma):
    """sum_k KL(N(m_k, diag(s_k)) || N(0, sigma^2 I)) in nats."""
    p = means.shape[1]
    trace = np.sum(variances, axis=1) + np.sum(means * means, axis=1)
    return float(0.5 * np.sum(trace / sigma**2 - p + 2.0 * p * np.log(sigma)
                              - np.sum(np.log(variances), axis=1)))


def _precision_cg(X, XT, g_second, rhs, start, diag, sigma, max_iter, rtol):
    """Solve (I / sigma^2 - 2 X^T diag(g_k) X) m_k = b_k for every column k.

    ``XT``: X transposed (:func:`transposed`). ``g_second`` (n, J) holds
    g_k <= 0, ``rhs`` and ``start`` (p, J) the b_k and the starting m_k,
    ``diag`` (p, J) the diagonals of the matrices (the Jacobi
    preconditioner). Preconditioned conjugate gradients on all J
    columns at once: each product costs two passes over X, O(nnz(X) J)
    (``scipy.sparse.linalg.cg`` solves one system at a time: J times as
    many passes, each over one column).
    From any start its iterates raise the concave quadratic b^T m - m^T P m / 2
    at every step, so a stopped solve never lowers the ELBO. Returns (p, J).
    """
    inv_s2 = 1.0 / sigma**2

    def apply(V):
        return inv_s2 * V - 2.0 * np.asarray(XT @ (g_second * np.asarray(X @ V)))

    M = start.copy()
    R = rhs - apply(M)
    goal = rtol * np.linalg.norm(rhs, axis=0)
    Z = R / diag
    P = Z.copy()
    rz = np.einsum("pj,pj->j", R, Z)
    for _ in range(max_iter):
        if np.all(np.linalg.norm(R, axis=0) <= goal):
            break
        AP = apply(P)
        pap = np.einsum("pj,pj->j", P, AP)
        alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=pap > 0)
        M += alpha * P
        R -= alpha * AP
        Z = R / diag
        rz_new = np.einsum("pj,pj->j", R, Z)
        beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
        P = Z + beta * P
        rz = rz_new
    return M


def diagonal_gaussian_iteration(X, X2, y, state, sigma, XT=None,
                                cg_max_iter=_CG_MAX_ITER, cg_rtol=_CG_RTOL):
    """One iteration of BMEM-G with a factorized Gaussian q: O(nnz(X) K) per step.

    At the current auxiliaries the likelihood bound is quadratic in every
    vector a_k of a set, b_k^T a_k + a_k^T Q_k a_k with Q_k = X^T diag(G_V,k) X
    (:class:`_FixedAuxLikelihood`). For q(a_k) = N(m_k, diag(s_k)) the
    optimal variances are s_kj = 1 / (1 / sigma^2 - 2 Q_k,jj) and the optimal
    mean solves (I / sigma^2 - 2 Q_k) m_k = b_k, the mean of the full-covariance
    update, here by conjugate gradients (:func:`_precision_cg`) started at
    the current means, so no p x p matrix is formed. Then new auxiliaries.
    The means are over-relaxed as in :func:`gaussian_iteration`.

    ``X2``: :func:`squared_entries` of ``X``; ``XT``: :func:`transposed` of
    ``X`` (formed here when not given). Returns the ELBO after the
    iteration (nats, total), never below the one before (up to rounding and
    the tolerance of the auxiliary update).
    """
    if state.aux is None or state.aux[0].shape[0] != X.shape[0]:
        gaussian_objective_and_aux(X, y, state, sigma,
                                   qf=_diagonal_quadratic_forms(X2, state.covs))
    K = state.means[0].shape[0]
    g_mean, g_second = (state.weights if state.weights is not None
                        else _fixed_aux_weights(2.0 * y - 1.0, *state.aux))
    if XT is None:
        XT = transposed(X)
    rhs = np.asarray(XT @ g_mean)                        # (p, 2K)
    diag = 1.0 / sigma**2 - 2.0 * np.asarray(X2.T @ g_second)
    start = np.concatenate(state.means).T
    M = _precision_cg(X, XT, g_second, rhs, start, diag, sigma, cg_max_iter, cg_rtol)
    old_means = state.means
    state.means = [np.ascontiguousarray(M[:, :K].T), np.ascontiguousarray(M[:, K:].T)]
    state.covs = [np.ascontiguousarray(1.0 / diag[:, :K].T),
                  np.ascontiguousarray(1.0 / diag[:, K:].T)]
    qf = _diagonal_quadratic_forms(X2, state.covs)
    value = gaussian_objective_and_aux(X, y, state, sigma, c_init=state.aux[2], qf=qf)
    _over_relax(X, y, state, old_means, value, sigma, qf)
    return state.value
