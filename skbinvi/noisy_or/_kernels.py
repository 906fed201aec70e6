"""Numba kernels of the noisy-OR model: ELBO, its gradients and the ACP encoder head.

Notation (the User Guide, doc/modules/noisy_or.rst, and [Yan] supplement): D
features, K causes, a batch of B binary rows in CSR form (``indptr``,
``indices``: the active set A_n of row n). ``theta`` has shape (D, K) (the
transpose of ``components_``, so that the
weights of one active feature are contiguous), ``leak`` is theta_0 (D,),
``logit_prior`` is logit mu (K,) and ``logit_q`` holds logit q(z_k = 1 | x_n)
(B, K).

Every cost below is O(nnz * K) per call, independent of D: features with
x_i = 0 only enter through the column sums ``colsum_k = sum_i theta_ik`` and
``leak_sum = sum_i theta_i0`` (arguments, kept up to date by the caller),

    sum_{i: x_i = 0} theta_ik = colsum_k - sum_{i in A} theta_ik,

and the gradients come in two parts: one row per *active* feature, and a
dense part that is the same for every feature (a vector of length K for
theta, the constant -B for the leak). The arrays indexed by ``indices``
(``theta``, ``leak``, the gradients, the ACP head) may be the full (D, ...)
arrays with feature indices, or compact (A, ...) arrays of the A features
active in the batch with ``indices`` renumbered to 0..A-1: the training loop
uses the compact form, so a minibatch never touches all D rows.

All kernels write into preallocated ``out`` arrays and never into their inputs.

Compilation (the first fit in a fresh Numba cache) is kept short: the serial
entry points (:func:`discrete_elbo`, :func:`relaxed_elbo_grad`, ...) are
Python functions that call the same jitted range kernels as their threaded
``*_rows`` forms, so each pass compiles once; helpers used by few kernels
are inlined (``inline="always"``, compiled with the flags of the kernel
that inlines them); no kernel uses NumPy's sorts
or array-to-array slice assignments, which compile slowly in Numba (the
latter with the formatting of its error message), and work that NumPy does
in the same order of operations stays in NumPy (:func:`compact_columns`,
the sums over the rows of the gradients). Every kernel is compiled
with ``nogil=True`` and ``error_model="numpy"``, as the Adam kernels of
:mod:`skbinvi._optim`: Numba compiles its own helpers (``np.empty``,
``min``, ...) once per set of flags of the calling kernel, so one set
means one compilation each; and a division then has no zero check (a
division by zero gives inf or NaN, which the estimator's checks of its
parameters and ELBO report, instead of raising ``ZeroDivisionError``),
which is less code to compile and leaves the loops free to vectorize.
"""

import math

import numpy as np

from .._math import (
    LOG1MEXP_WORK_ROWS,
    SOFTPLUS_BLOCK,
    exp_array,
    log1mexp_array,
    log_array,
    log_sigmoid,
    sigmoid,
    softplus,
    softplus_sigmoid,
)
from .._numba import balanced_parts, njit, parallel_pays, part_count, run_parts


@njit(error_model="numpy", nogil=True)
def _gather_dots(x, A, indices, start, stop, bias, out):
    """``out[j - start] = bias[i] + sum_k A[i, k] * x[k]`` for ``i = indices[j]``.

    For the stored entries ``start <= j < stop`` of a CSR row: ``x`` (P,),
    ``A`` (D, P), ``bias`` (D,), ``out`` (at least stop - start,). Each sum
    is taken in the order k = 0, 1, ..., P - 1, as a plain loop would, so
    the results are the same to the last bit; but four rows are summed
    together, so that the four chains of dependent additions overlap
    instead of each waiting for the latency of the one before (1.8 times
    faster for the ACP head, P = 100). A product by ``x[k] = 1.0`` or a
    sum with ``+0.0`` (``x[k] = 0.0``, finite ``A``) is exact, so a 0/1
    ``x`` gives the masked sum ``bias[i] + sum_{k: x_k = 1} A[i, k]`` of a
    loop with a test, bit for bit.
    """
    P = x.shape[0]
    j = start
    while j + 4 <= stop:
        i0, i1, i2, i3 = indices[j], indices[j + 1], indices[j + 2], indices[j + 3]
        r0, r1, r2, r3 = A[i0], A[i1], A[i2], A[i3]
        a0, a1, a2, a3 = bias[i0], bias[i1], bias[i2], bias[i3]
        for k in range(P):
            xk = x[k]
            a0 += r0[k] * xk
            a1 += r1[k] * xk
            a2 += r2[k] * xk
            a3 += r3[k] * xk
        out[j - start] = a0
        out[j + 1 - start] = a1
        out[j + 2 - start] = a2
        out[j + 3 - start] = a3
        j += 4
    while j < stop:
        i = indices[j]
        r = A[i]
        a = bias[i]
        for k in range(P):
            a += r[k] * x[k]
        out[j - start] = a
        j += 1


@njit(error_model="numpy", inline="always")
def _negative_and_kl(indptr, indices, theta, leak, leak_sum, colsum, logit_q,
                     logit_prior, softplus_prior, n, active_sum, q_row,
                     softplus_row, work):
    """Exact part of the ELBO of row n: negative evidence minus KL.

    Returns ``-sum_{i not in A} (theta_i0 + sum_k theta_ik q_k) - sum_k KL_k``
    and fills ``active_sum[k] = sum_{i in A} theta_ik``, ``q_row[k] = q_nk``
    and ``softplus_row[k] = softplus(logit_q[n, k])`` (vectorized,
    :func:`softplus_sigmoid`; ``work`` has shape (3, B) or more rows).
    ``softplus_prior`` is ``softplus(logit_prior)`` (K,), computed once per
    batch: with l = logit q and c = logit mu,
    ``KL(Bern(q) || Bern(mu)) = q (l - c) - softplus(l) + softplus(c)``.
    """
    K = theta.shape[1]
    softplus_sigmoid(logit_q[n], softplus_row, q_row, work)
    active_sum[:] = 0.0
    leak_active = 0.0
    for j in range(indptr[n], indptr[n + 1]):
        i = indices[j]
        leak_active += leak[i]
        for k in range(K):
            active_sum[k] += theta[i, k]
    value = -(leak_sum - leak_active)
    for k in range(K):
        value -= (colsum[k] - active_sum[k]) * q_row[k]
        value -= (q_row[k] * (logit_q[n, k] - logit_prior[k])
                  - softplus_row[k] + softplus_prior[k])
    return value


def softplus_and_slope(raw, value, slope):
    """``value = softplus(raw)`` and ``slope = sigmoid(raw)`` (its derivative), one
    pass.

    Equivalent to ``np.logaddexp(0, raw)`` and ``scipy.special.expit(raw)``,
    to within a few units in the last place: the vectorized
    :func:`~skbinvi._math.softplus_sigmoid` that the Adam steps of theta and
    the leak use, so that a parameter set directly and one trained agree.
    All arrays are flat (ravel of C-contiguous arrays), ``value`` and
    ``slope`` are outputs.

    Checked against scipy (``np.logaddexp(0, raw)``, ``expit``) in
    tests/test_noisy_or_kernels.py::test_softplus_and_slope_matches_scipy.
    """
    softplus_sigmoid(raw, value, slope, np.empty((3, SOFTPLUS_BLOCK)))


def relaxed_elbo_grad(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                      logit_prior, uniforms, temperature, g_theta, g_leak,
                      g_theta_dense, g_logit_q, g_logit_prior, elbo_relaxed,
                      elbo_discrete):
    """Relaxed Monte Carlo ELBO of a batch and its gradients (binary Concrete).

    For each row n and each of the M uniform draws ``uniforms[n, m]``, the
    logistic noise is ``L = log U - log(1 - U)`` and the relaxed sample is
    ``z~_k = sigmoid((logit_q[n, k] + L[n, m, k]) / temperature)`` and

        elbo_relaxed[n] = 1/M sum_m sum_{i in A_n} log(1 - exp(-u_mi))
                          - sum_{i not in A_n} (theta_i0 + sum_k theta_ik q_nk)
                          - sum_k KL(Bern(q_nk) || Bern(mu_k)),

    with ``u_mi = theta_i0 + sum_k theta_ik z~_mk`` ([Yan] Algorithm 1). The
    threshold ``1{logit_q + L[n, 0] > 0}`` of the first draw is an exact
    sample of q, which gives ``elbo_discrete[n]``, an unbiased one-sample
    estimate of the true ELBO at no extra sampling cost.

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of the binary batch (B rows); see the module docstring
        for full or compact column numbering.
    theta : float64 array of shape (D, K) or (A, K)
    leak : float64 array of shape (D,) or (A,)
    colsum : float64 array of shape (K,)
        ``sum_i theta_ik`` over all D features.
    leak_sum : float
        ``sum_i theta_i0`` over all D features.
    logit_q : float64 array of shape (B, K)
    logit_prior : float64 array of shape (K,)
    uniforms : float64 array of shape (B, M, K), values in (0, 1)
    temperature : float
    g_theta, g_leak : float64 arrays shaped as theta and leak (out)
        Active-feature part of the gradients of ``sum_n elbo_relaxed[n]``:
        the full gradient with respect to theta_ik is
        ``g_theta[i, k] + g_theta_dense[k]`` and with respect to theta_i0
        ``g_leak[i] - B`` (zero rows for features active in no row).
    g_theta_dense : float64 array of shape (K,) (out)
        Dense part of the theta gradient, ``-sum_n q_nk``.
    g_logit_q, g_logit_prior : float64 arrays (out)
        Gradients with respect to ``logit_q`` and ``logit_prior``.
    elbo_relaxed, elbo_discrete : float64 arrays of shape (B,) (out)
        Per-row values in nats.

    Two passes: one over the rows (the samples, the per-row values and
    logit gradients; the weights' gradient terms of every stored entry are
    kept), then one over the features, which sums each feature's terms in
    row order, as a single pass over the rows would. Both passes split into
    independent parts: :func:`relaxed_elbo_grad_rows` runs them on threads
    with the same numbers to the last bit. Cost
    O(nnz M K) time, O(nnz M + B M K) extra memory.

    Checked against the NumPy reference ``_reference_relaxed_elbo`` of
    tests/test_noisy_or_kernels.py (test_relaxed_elbo_matches_dense_reference,
    test_relaxed_elbo_discrete_sample_matches_reference,
    test_relaxed_elbo_compact_columns_match_full) and its gradients against
    finite differences (test_relaxed_elbo_gradients_finite_differences).
    """
    B, M, K = uniforms.shape
    D = theta.shape[0]
    fp = np.empty((indptr[B], M))
    zs = np.empty((B, M, K))
    q = np.empty((B, K))
    _relaxed_rows(0, B, _longest_row(indptr), indptr, indices, theta, leak, colsum,
                  leak_sum, logit_q, logit_prior, uniforms, temperature, fp, zs, q,
                  g_logit_q, elbo_relaxed, elbo_discrete)
    _relaxed_totals(q, logit_prior, g_theta_dense, g_logit_prior)
    colptr, entry, row_of = column_entries(indptr, indices, D)
    _relaxed_features(0, D, colptr, entry, row_of, fp, zs, q, g_theta, g_leak)


@njit(error_model="numpy", nogil=True)
def column_entries(indptr, indices, n_columns):
    """The stored entries of a CSR batch grouped by column, in row order.

    Returns ``colptr`` (n_columns + 1,), ``entry`` (nnz,) and ``row_of``
    (nnz,), int64: the entries of column i are ``entry[colptr[i]:colptr[i +
    1]]`` (positions in ``indices``), by increasing row, and ``row_of[j]`` is
    the row of entry j. A counting sort, O(nnz + n_columns).
    """
    B = indptr.shape[0] - 1
    nnz = indptr[B]
    # np.empty and loops rather than np.zeros and .copy(): Numba compiles
    # np.empty for the other kernels anyway
    colptr = np.empty(n_columns + 1, dtype=np.int64)
    for i in range(n_columns + 1):
        colptr[i] = 0
    for j in range(indptr[0], nnz):
        colptr[indices[j] + 1] += 1
    for i in range(n_columns):
        colptr[i + 1] += colptr[i]
    fill = np.empty(n_columns, dtype=np.int64)
    for i in range(n_columns):
        fill[i] = colptr[i]
    entry = np.empty(nnz - indptr[0], dtype=np.int64)
    row_of = np.empty(nnz, dtype=np.int64)
    for n in range(B):
        for j in range(indptr[n], indptr[n + 1]):
            row_of[j] = n
            i = indices[j]
            entry[fill[i]] = j
            fill[i] += 1
    return colptr, entry, row_of


@njit(error_model="numpy", nogil=True)
def _relaxed_rows(lo, hi, longest, indptr, indices, theta, leak, colsum, leak_sum,
                  logit_q, logit_prior, uniforms, temperature, fp, zs_all, q_all,
                  g_logit_q, elbo_relaxed, elbo_discrete):
    """The row pass of :func:`relaxed_elbo_grad` for rows lo..hi-1.

    Fills, for those rows, ``g_logit_q``, ``elbo_relaxed``,
    ``elbo_discrete``, the relaxed samples ``zs_all`` (B, M, K), the
    probabilities ``q_all`` (B, K) and ``fp[j, m]``, the derivative of the
    m-th sample's term of stored entry j (``d log(1 - e^{-u}) / du`` over
    M); scratch sized for rows of ``longest`` active features.
    """
    K = theta.shape[1]
    M = uniforms.shape[1]
    inv_m = 1.0 / M
    inv_tau = 1.0 / temperature
    active_sum = np.empty(K)
    z = np.empty(K)
    grad_z = np.empty(K)
    noise = np.empty((M, K))
    zs = np.empty((M, K))
    # u of every (relaxed sample, active feature) of a row and of the exact
    # sample, then log(1 - exp(-u)) and its derivative at once (vectorized)
    size = (M + 1) * longest
    u = np.empty(size)
    f = np.empty(size)
    df = np.empty(size)
    work = np.empty((LOG1MEXP_WORK_ROWS, SOFTPLUS_BLOCK))
    odds = np.empty((M, K))
    # the prior's softplus, once per task
    softplus_prior = np.empty(K)
    prior = np.empty(K)
    softplus_sigmoid(logit_prior, softplus_prior, prior, work)
    softplus_row = np.empty(K)
    scratch = np.empty((M, K))
    for n in range(lo, hi):
        q_row = q_all[n]
        # logistic noise log(U / (1 - U)), vectorized
        for m in range(M):
            for k in range(K):
                v = uniforms[n, m, k]
                odds[m, k] = v / (1.0 - v)
        log_array(odds.reshape(-1), noise.reshape(-1), work)
        exact = _negative_and_kl(indptr, indices, theta, leak, leak_sum, colsum,
                                 logit_q, logit_prior, softplus_prior, n,
                                 active_sum, q_row, softplus_row, work)
        # d(exact)/d logit_q
        for k in range(K):
            qk = q_row[k]
            dq = qk * (1.0 - qk)
            g_logit_q[n, k] = -dq * (colsum[k] - active_sum[k]) \
                - dq * (logit_q[n, k] - logit_prior[k])
        start, stop = indptr[n], indptr[n + 1]
        a = stop - start
        # the relaxed samples sigmoid((logit q + L) / tau), vectorized (the
        # softplus of the same call is not used)
        for m in range(M):
            for k in range(K):
                odds[m, k] = (logit_q[n, k] + noise[m, k]) * inv_tau
        softplus_sigmoid(odds.reshape(-1), scratch.reshape(-1), zs.reshape(-1), work)
        for m in range(M):
            _gather_dots(zs[m], theta, indices, start, stop, leak, u[m * a:])
        # one exact discrete sample from the first noise draw (0/1 weights:
        # the masked sums, bit for bit)
        for k in range(K):
            z[k] = 1.0 if logit_q[n, k] + noise[0, k] > 0.0 else 0.0
        _gather_dots(z, theta, indices, start, stop, leak, u[M * a:])
        log1mexp_array(u[:(M + 1) * a], f[:(M + 1) * a], df[:(M + 1) * a], work)
        # Monte Carlo positive term, relaxed samples
        positive = 0.0
        for m in range(M):
            for k in range(K):
                z[k] = zs[m, k]
                zs_all[n, m, k] = z[k]
                grad_z[k] = 0.0
            for j in range(start, stop):
                i = indices[j]
                positive += f[m * a + j - start]
                g = df[m * a + j - start] * inv_m
                fp[j, m] = g
                for k in range(K):
                    grad_z[k] += g * theta[i, k]
            for k in range(K):
                g_logit_q[n, k] += grad_z[k] * z[k] * (1.0 - z[k]) * inv_tau
        elbo_relaxed[n] = exact + positive * inv_m
        positive = 0.0
        for j in range(M * a, (M + 1) * a):
            positive += f[j]
        elbo_discrete[n] = exact + positive


def _relaxed_totals(q_all, logit_prior, g_theta_dense, g_logit_prior):
    """The sums over the rows of :func:`relaxed_elbo_grad`, in row order:
    ``g_logit_prior = sum_n (q_n - mu)`` and ``g_theta_dense = -sum_n q_n``."""
    K = logit_prior.shape[0]
    prior = np.empty(K)
    softplus_sigmoid(logit_prior, np.empty(K), prior, np.empty((3, SOFTPLUS_BLOCK)))
    _column_totals(q_all - prior, g_logit_prior)
    _column_totals(q_all, g_theta_dense)
    # dense part: every feature is inactive unless added back
    np.negative(g_theta_dense, out=g_theta_dense)


@njit(error_model="numpy", nogil=True)
def _column_totals(a, out):
    """``out[k] = sum_n a[n, k]``, the sum taken in row order (``a`` (B, K))."""
    B, K = a.shape
    for k in range(K):
        out[k] = 0.0
    for n in range(B):
        for k in range(K):
            out[k] += a[n, k]


@njit(error_model="numpy", nogil=True)
def _relaxed_features(lo, hi, colptr, entry, row_of, fp, zs_all, q_all, g_theta,
                      g_leak):
    """The feature pass of :func:`relaxed_elbo_grad` for features lo..hi-1.

    ``g_theta[i] = sum_n (sum_m fp[j, m] z~_nm + q_n)`` and ``g_leak[i] =
    sum_n (sum_m fp[j, m] + 1)`` over the rows n where feature i is active
    (entry j), summed in row order (zero rows for features active in none).
    """
    K = g_theta.shape[1]
    M = fp.shape[1]
    for i in range(lo, hi):
        gt = g_theta[i]
        gt[:] = 0.0
        gl = 0.0
        for e in range(colptr[i], colptr[i + 1]):
            j = entry[e]
            n = row_of[j]
            for m in range(M):
                g = fp[j, m]
                gl += g
                zm = zs_all[n, m]
                for k in range(K):
                    gt[k] += g * zm[k]
            # the exact term's gradient for active features: +q (theta), +1 (leak)
            gl += 1.0
            qn = q_all[n]
            for k in range(K):
                gt[k] += qn[k]
        g_leak[i] = gl


# Entries of u evaluated at once by log1mexp_array in discrete_elbo (32 KiB)
_U_CHUNK = 4096



def _longest_row(indptr):
    """Largest number of active features of a row of the CSR structure (at least 1)."""
    return max(1, int(np.diff(indptr).max(initial=0)))


# 2**64 divided by the golden ratio, as a signed int64 (Knuth's
# multiplicative hashing, in _sample_groups)
_HASH_MULTIPLIER = -7046029254386353131


@njit(error_model="numpy", inline="always")
def _uniform_range(uniforms):
    """Smallest and largest of the S uniforms of every cause (shape (S, K))."""
    K = uniforms.shape[1]
    umin = np.empty(K)
    umax = np.empty(K)
    for k in range(K):
        umin[k] = uniforms[0, k]
        umax[k] = uniforms[0, k]
        for s in range(1, uniforms.shape[0]):
            umin[k] = min(umin[k], uniforms[s, k])
            umax[k] = max(umax[k], uniforms[s, k])
    return umin, umax


@njit(error_model="numpy", inline="always")
def _sample_groups(q, uniforms, umin, umax, keys, group, rep):
    """Group the exact samples ``z_sk = 1{uniforms[s, k] < q_k}`` of one row.

    ``q`` (K,) are the row's probabilities, ``uniforms`` (S, K) and
    ``umin``/``umax`` its per-cause extremes (:func:`_uniform_range`).
    A cause with ``q_k <= umin_k`` is off in every sample and one with
    ``q_k > umax_k`` on in every sample; the others ("free") are packed as
    bits into ``keys`` (S,), and the samples are grouped by key: ``group[s]``
    is the group of sample s and ``rep[g]`` the first sample of group g (all
    three int64, shape (S,); ``keys`` is scratch, left holding the key of
    each sample). The groups are numbered in the order of their first
    sample, through a hash table of the keys (multiplicative hashing, linear
    probing, at least 2 S slots). Returns the number G of groups. Two
    samples share a group only if they are equal, so a function of the
    sample evaluated once per group is exact. With more than 62 free causes
    the samples are left ungrouped (G = S; equal samples are then
    improbable). Cost O(S K) (expected).
    """
    S, K = uniforms.shape
    for s in range(S):
        keys[s] = 0
    n_free = 0
    for k in range(K):
        if umin[k] < q[k] <= umax[k]:
            if n_free == 62:
                for t in range(S):
                    group[t] = t
                    rep[t] = t
                return S
            bit = np.int64(1) << n_free
            for t in range(S):
                if uniforms[t, k] < q[k]:
                    keys[t] |= bit
            n_free += 1
    if n_free == 0:
        for t in range(S):
            group[t] = 0
        rep[0] = 0
        return 1
    size = 2
    bits = 1
    while size < 2 * S:
        size *= 2
        bits += 1
    slot = np.empty(size, dtype=np.int64)  # group of the key there, or -1
    for h in range(size):
        slot[h] = -1
    n_groups = 0
    for t in range(S):
        key = keys[t]
        # the top bits of key * (2**64 / golden ratio), modulo 2**64
        h = ((key * _HASH_MULTIPLIER) >> (64 - bits)) & (size - 1)
        while slot[h] >= 0 and keys[rep[slot[h]]] != key:
            h = (h + 1) & (size - 1)
        if slot[h] < 0:
            slot[h] = n_groups
            rep[n_groups] = t
            n_groups += 1
        group[t] = slot[h]
    return n_groups


@njit(error_model="numpy", inline="always")
def _add_row(total, row):
    """``total[:] += row[:total.size]`` in place (a loop that compiles to SIMD)."""
    for j in range(total.shape[0]):
        total[j] += row[j]


def discrete_elbo(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                  logit_prior, uniforms, out):
    """True ELBO per row, Monte Carlo over S exact discrete samples of q.

    ``z_sk = 1{uniforms[s, k] < q_nk}``: the same uniforms serve every row
    (common random numbers), so the estimate of a row does not depend on the
    other rows of the batch and is deterministic for fixed ``uniforms``.
    Equal samples are evaluated once (:func:`_sample_groups`): where q is
    near 0 or 1 most of the S samples of a row coincide, and the causes on in
    all of them are summed once. Cost O(S K + nnz(x) K + G nnz(x) n_free) per
    row, G <= S the distinct samples, n_free the causes on in some samples
    only; log(1 - e^{-u}) is evaluated in vectorized blocks.

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of the binary data (B rows).
    theta : float64 array of shape (D, K)
    leak : float64 array of shape (D,)
    colsum : float64 array of shape (K,)
        ``theta.sum(axis=0)``.
    leak_sum : float
        ``leak.sum()``.
    logit_q : float64 array of shape (B, K)
    logit_prior : float64 array of shape (K,)
    uniforms : float64 array of shape (S, K), values in [0, 1)
    out : float64 array of shape (B,) (out)
        ELBO of each row in nats: ``1/S sum_s sum_{i in A} log(1 - exp(-u_si))
        - sum_{i not in A}(theta_i0 + sum_k theta_ik q_k) - sum_k KL_k``.

    Rows are independent: :func:`discrete_elbo_rows` computes the same
    values on threads.

    Checked against a NumPy reference and enumeration of the 2^K states in
    tests/test_noisy_or_kernels.py
    (test_discrete_elbo_matches_reference_and_is_row_independent,
    test_discrete_elbo_agrees_with_enumeration).
    """
    _discrete_elbo_range(0, logit_q.shape[0], _longest_row(indptr), indptr, indices,
                         theta, leak, colsum, leak_sum, logit_q, logit_prior,
                         uniforms, out)


@njit(error_model="numpy", nogil=True)
def _discrete_elbo_range(lo, hi, longest, indptr, indices, theta, leak, colsum,
                         leak_sum, logit_q, logit_prior, uniforms, out):
    """:func:`discrete_elbo` of the rows lo..hi-1, with scratch sized for rows
    of ``longest`` active features (the longest row of the whole batch)."""
    K = theta.shape[1]
    S = uniforms.shape[0]
    active_sum = np.empty(K)
    on = np.empty(K, dtype=np.int64)
    always = np.empty(K)
    q = np.empty(K)
    umin, umax = _uniform_range(uniforms)
    keys = np.empty(S, dtype=np.int64)
    group = np.empty(S, dtype=np.int64)
    rep = np.empty(S, dtype=np.int64)
    value = np.empty(S)
    # u_si of the distinct samples of a row, then log(1 - exp(-u)) of up to
    # _U_CHUNK of them at once (vectorized)
    size = max(longest, _U_CHUNK)
    u_fixed = np.empty(longest)
    theta_free = np.empty((K, longest))
    u = np.empty(size)
    f = np.empty(size)
    df = np.empty(size)
    work = np.empty((LOG1MEXP_WORK_ROWS, SOFTPLUS_BLOCK))
    softplus_prior = np.empty(K)
    softplus_row = np.empty(K)
    softplus_sigmoid(logit_prior, softplus_prior, softplus_row, work)
    for n in range(lo, hi):
        exact = _negative_and_kl(indptr, indices, theta, leak, leak_sum, colsum,
                                 logit_q, logit_prior, softplus_prior, n,
                                 active_sum, q, softplus_row, work)
        n_groups = _sample_groups(q, uniforms, umin, umax, keys, group, rep)
        start, stop = indptr[n], indptr[n + 1]
        m = stop - start
        # the causes on in every sample enter u once per row, the free ones
        # (on in some samples: _sample_groups) once per distinct sample
        n_free = 0
        for k in range(K):
            if umin[k] < q[k] <= umax[k]:
                on[n_free] = k
                n_free += 1
            always[k] = 1.0 if q[k] > umax[k] else 0.0
        # leak plus the causes on in every sample (0/1 weights: the masked
        # sums, bit for bit)
        _gather_dots(always, theta, indices, start, stop, leak, u_fixed)
        for j in range(start, stop):
            i = indices[j]
            # the free causes' weights of the row's words, one contiguous
            # row per cause: the sums over a sample's causes below are then
            # additions of whole rows, which compile to SIMD instructions
            for t in range(n_free):
                theta_free[t, j - start] = theta[i, on[t]]
        first = 0  # first group of the chunk in u
        for g in range(n_groups):
            s = rep[g]
            pos = (g - first) * m
            u_g = u[pos:pos + m]
            for j in range(m):
                u_g[j] = u_fixed[j]
            for t in range(n_free):
                if uniforms[s, on[t]] < q[on[t]]:
                    _add_row(u_g, theta_free[t])
            if g == n_groups - 1 or pos + 2 * m > size:
                # sum_{i in A} log(1 - exp(-u_si)) of the chunk's samples
                end = pos + m
                log1mexp_array(u[:end], f[:end], df[:end], work)
                for h in range(first, g + 1):
                    total = 0.0
                    for j in range((h - first) * m, (h - first + 1) * m):
                        total += f[j]
                    value[h] = total
                first = g + 1
        positive = 0.0
        for s in range(S):
            positive += value[group[s]]
        out[n] = exact + positive / S


def compact_columns(indices, marker):
    """The distinct column indices of a minibatch, sorted, and the indices renumbered.

    Equivalent to ``np.unique(indices, return_inverse=True)`` (as int64) in
    O(nnz + A log A) for A distinct columns, against O(nnz log nnz) for the
    sort of ``np.unique``: each column keeps one of its positions in
    ``marker``, which picks one entry per distinct column, and only those A
    are sorted. ``marker`` (n_features,) int64 must hold -1 at every entry;
    it is used as scratch and left so.

    Returns ``features`` (A,) and ``local`` (nnz,), int64, with
    ``features[local] == indices``. Checked against ``np.unique`` in
    tests/test_noisy_or_kernels.py::test_compact_columns_matches_unique.
    """
    position = np.arange(indices.shape[0])
    marker[indices] = position
    features = np.sort(indices[marker[indices] == position]).astype(np.int64)
    marker[features] = np.arange(features.shape[0])
    local = marker[indices]
    marker[features] = -1
    return features, local


def acp_psi(indptr, indices, hidden, coef_out, intercept_out, pre_out, psi_out):
    """ACP encoder head evaluated only at active features.

    ``pre_out[j] = hidden[n] @ coef_out[i] + intercept_out[i]`` and
    ``psi_out[j] = softplus(pre_out[j])`` for every stored entry j = (n, i) of
    the CSR batch: the dual variables psi_i > 0 of [Yan] Eq. 5. Equivalent to
    ``softplus(hidden @ coef_out.T + intercept_out)[n, i]`` at the entries.

    Shapes: hidden (B, H), coef_out (D, H), intercept_out (D,),
    pre_out and psi_out (nnz,).

    Rows are independent (:func:`acp_psi_rows`: the same on threads).

    Checked against a dense NumPy reference in
    tests/test_noisy_or_kernels.py::test_acp_heads_match_dense_reference.
    """
    _acp_psi_range(0, hidden.shape[0], indptr, indices, hidden, coef_out,
                   intercept_out, pre_out, psi_out)


@njit(error_model="numpy", nogil=True)
def _acp_psi_range(lo, hi, indptr, indices, hidden, coef_out, intercept_out, pre_out,
                   psi_out):
    """:func:`acp_psi` of the rows lo..hi-1."""
    for n in range(lo, hi):
        start, stop = indptr[n], indptr[n + 1]
        _gather_dots(hidden[n], coef_out, indices, start, stop, intercept_out,
                     pre_out[start:])
        for j in range(start, stop):
            psi_out[j] = softplus(pre_out[j])


def acp_logits(indptr, indices, psi, theta, colsum, logit_prior, out):
    """ACP posterior logits, [Yan] supplement Eq. 5.

    ``out[n, k] = sum_{i in A_n} psi_ni theta_ik - sum_{i not in A_n} theta_ik
    + logit_prior[k]``, computed as
    ``logit_prior[k] - colsum_k + sum_{i in A_n} (psi_ni + 1) theta_ik``.

    Shapes: psi (nnz,), theta (D, K) or (A, K), colsum (K,) (``sum_i
    theta_ik`` over all D features), logit_prior (K,), out (B, K).

    Rows are independent (:func:`acp_logits_rows`: the same on threads).

    Checked against a dense NumPy reference in
    tests/test_noisy_or_kernels.py::test_acp_heads_match_dense_reference.
    """
    _acp_logits_range(0, out.shape[0], indptr, indices, psi, theta, colsum,
                      logit_prior, out)


@njit(error_model="numpy", nogil=True)
def _acp_logits_range(lo, hi, indptr, indices, psi, theta, colsum, logit_prior, out):
    """:func:`acp_logits` of the rows lo..hi-1."""
    K = theta.shape[1]
    for n in range(lo, hi):
        for k in range(K):
            out[n, k] = logit_prior[k] - colsum[k]
        for j in range(indptr[n], indptr[n + 1]):
            i = indices[j]
            w = psi[j] + 1.0
            for k in range(K):
                out[n, k] += w * theta[i, k]


def acp_backward(indptr, indices, g_logit_q, psi, pre, theta, hidden, coef_out,
                 g_theta, g_theta_dense, g_coef_out, g_intercept_out, g_hidden):
    """Back-propagate d/d logit_q through :func:`acp_logits` and :func:`acp_psi`.

    Adds the gradient through the logits to ``g_theta`` (active rows, shaped
    as theta) and its dense ``-colsum`` part to ``g_theta_dense`` (K,), and
    overwrites ``g_coef_out`` (rows shaped as coef_out), ``g_intercept_out``
    and ``g_hidden`` (B, H). The gradient with respect to ``logit_prior``
    through the logits is ``g_logit_q.sum(0)`` and is left to the caller.

    A pass over the rows (``g_hidden`` and the gradient of every entry's
    pre-activation), then one over the features that sums each feature's
    terms in row order, as a single pass over the rows would:
    :func:`acp_backward_rows` runs both on threads with the same numbers to
    the last bit.

    Checked against finite differences of the whole estimator in
    tests/test_noisy_or_kernels.py::test_estimator_gradients_finite_differences.
    """
    B = hidden.shape[0]
    D = theta.shape[0]
    g_pre = np.empty(indptr[B])
    _acp_backward_rows(0, B, _longest_row(indptr), indptr, indices, g_logit_q, pre,
                       theta, coef_out, g_pre, g_hidden)
    _acp_backward_totals(g_logit_q, g_theta_dense)
    colptr, entry, row_of = column_entries(indptr, indices, D)
    _acp_backward_features(0, D, colptr, entry, row_of, g_logit_q, psi, hidden, g_pre,
                           g_theta, g_coef_out, g_intercept_out)


@njit(error_model="numpy", nogil=True)
def _acp_backward_rows(lo, hi, longest, indptr, indices, g_logit_q, pre, theta,
                       coef_out, g_pre, g_hidden):
    """The row pass of :func:`acp_backward` for rows lo..hi-1: ``g_pre[j]``,
    the gradient of entry j's pre-activation, and the rows of ``g_hidden``."""
    H = g_hidden.shape[1]
    zeros = np.empty(theta.shape[0])  # (np.empty compiles for other kernels)
    for i in range(theta.shape[0]):
        zeros[i] = 0.0
    g_psi = np.empty(longest)
    for n in range(lo, hi):
        g_hidden[n] = 0.0
        start, stop = indptr[n], indptr[n + 1]
        # d/d psi_j = sum_k g_logit_q[n, k] theta[i_j, k]
        _gather_dots(g_logit_q[n], theta, indices, start, stop, zeros, g_psi)
        for j in range(start, stop):
            i = indices[j]
            g = g_psi[j - start] * sigmoid(pre[j])
            g_pre[j] = g
            for h in range(H):
                g_hidden[n, h] += g * coef_out[i, h]


def _acp_backward_totals(g_logit_q, g_theta_dense):
    """``g_theta_dense -= sum_n g_logit_q[n]`` (the sum taken in row order)."""
    g_total = np.empty(g_logit_q.shape[1])
    _column_totals(g_logit_q, g_total)
    g_theta_dense -= g_total


@njit(error_model="numpy", nogil=True)
def _acp_backward_features(lo, hi, colptr, entry, row_of, g_logit_q, psi, hidden,
                           g_pre, g_theta, g_coef_out, g_intercept_out):
    """The feature pass of :func:`acp_backward` for features lo..hi-1: adds
    ``(psi_j + 1) g_logit_q[n]`` to ``g_theta[i]`` and sets ``g_coef_out[i]``
    and ``g_intercept_out[i]``, summing over the rows n where feature i is
    active (entry j) in row order."""
    K = g_theta.shape[1]
    H = hidden.shape[1]
    for i in range(lo, hi):
        gt, gc = g_theta[i], g_coef_out[i]
        gc[:] = 0.0
        gi = 0.0
        for e in range(colptr[i], colptr[i + 1]):
            j = entry[e]
            n = row_of[j]
            w = psi[j] + 1.0
            gq = g_logit_q[n]
            for k in range(K):
                gt[k] += w * gq[k]
            g = g_pre[j]
            gi += g
            hn = hidden[n]
            for h in range(H):
                gc[h] += g * hn[h]
        g_intercept_out[i] = gi


# Cap of e^{-v} in the ratios of the local targets: 1 - e^{-v} >= 1e-12.
_E_MAX = 1.0 - 1e-12


@njit(error_model="numpy", inline="always")
def _row_exp_theta(indptr, indices, theta, n, exp_theta, scratch, work):
    """``exp_theta[j, k] = exp(-theta[i_j, k])``, i_j the active features of row n.

    ``scratch`` is an array shaped as ``exp_theta`` and ``work`` (2, B)
    scratch of :func:`~skbinvi._math.exp_array` (vectorized exp).
    """
    start = indptr[n]
    n_active = indptr[n + 1] - start
    K = theta.shape[1]
    for j in range(n_active):
        i = indices[start + j]
        for k in range(K):
            scratch[j, k] = -theta[i, k]
    flat = scratch.reshape(-1)[:n_active * K]
    exp_array(flat, exp_theta.reshape(-1)[:n_active * K], work)


@njit(error_model="numpy", inline="always")
def _row_samples(logit_q_row, uniforms, q, zs):
    """Exact samples ``zs[s, k] = 1{uniforms[s, k] < q_k}`` (0.0/1.0) of one row.

    Also sets ``q`` (K,) to the row's probabilities. Returns True if any entry
    of ``zs`` (S, K) changed (fill it with -1 to force True).
    """
    changed = False
    for k in range(q.shape[0]):
        q[k] = sigmoid(logit_q_row[k])
    for s in range(uniforms.shape[0]):
        for k in range(q.shape[0]):
            v = 1.0 if uniforms[s, k] < q[k] else 0.0
            if v != zs[s, k]:
                zs[s, k] = v
                changed = True
    return changed


@njit(error_model="numpy", inline="always")
def _ratio_update(z, exp_theta, e, ratio):
    """``ratio[k] *= (1 - e^{-(u|z_k=1)}) / (1 - e^{-(u|z_k=0)})`` for every k.

    ``e`` = min(e^{-u}, ``_E_MAX``) of the sample's u, ``z`` (K,) the sample
    (0.0/1.0), ``exp_theta`` (K,) e^{-theta_ik}. With z_k = 1, e^{-(u|z_k=0)}
    is min(e / e^{-theta_ik}, ``_E_MAX``); with z_k = 0, e^{-(u|z_k=1)} is
    e e^{-theta_ik}. Both branches are computed and one is selected (no
    branch, no division check), so that the loop compiles to SIMD
    instructions; an underflowed e^{-theta_ik} = 0 gives the cap, which the
    caller corrects (:func:`_local_targets_row`).
    """
    one_minus_e = 1.0 - e
    for k in range(z.shape[0]):
        x = exp_theta[k]
        # z_k = 1: (1 - e) / (1 - e / x) = x (1 - e) / (x - e) below the cap
        capped = e >= _E_MAX * x
        num_on = one_minus_e if capped else x * one_minus_e
        den_on = 1.0 - _E_MAX if capped else x - e
        on = z[k] > 0.0
        num = num_on if on else 1.0 - e * x
        den = den_on if on else one_minus_e
        ratio[k] *= num / den


@njit(error_model="numpy", inline="always")
def _local_targets_row(indptr, indices, theta, leak, colsum, logit_prior, zs, n, on,
                       exp_theta, ratio, logs, work, out):
    r"""Mean-field target logits of row n into ``out`` (K,).

    The target of cause k is :math:`\operatorname{logit}\mu_k +
    \mathbb{E}_{q_{-k}}[\sum_{i: x_i = 1} f(u_i \mid z_k = 1) - f(u_i \mid
    z_k = 0)] - \sum_{i: x_i = 0} \theta_{ik}` with :math:`f(u) = \log(1 -
    e^{-u})`, the expectation over the row's S exact samples (User Guide,
    ``inference="svi"``).

    ``zs`` (S, K) holds the row's exact samples (:func:`_row_samples`): the
    targets depend on q only through them. ``exp_theta`` must hold the row's
    :func:`_row_exp_theta`; ``on`` (K,) int64, ``ratio`` and ``logs`` (nnz of
    the longest row, K) and ``work`` (2, B) are scratch arrays.
    The differences f(v + theta) - f(v) are logs of ratios of 1 - e^{-v}
    terms, built from e^{-u} and e^{-theta} by products; the ratios of a
    block of samples are multiplied before one log is taken, so the cost is
    O(S nnz K) multiplications and O(nnz K) logarithms per block of 8 samples.
    (1 - e^{-v} is computed as 1 minus a product, which loses relative
    precision only when v is below ~1e-8; e^{-v} is capped at ``_E_MAX``, so
    that a feature with no leak and no active cause, v = 0, gives a finite
    ratio of at most 1e12 instead of a division by zero.)
    """
    K = theta.shape[1]
    S = zs.shape[0]
    start = indptr[n]
    n_active = indptr[n + 1] - start
    underflow = False
    for k in range(K):
        out[k] = 0.0
    for j in range(n_active):
        for k in range(K):
            ratio[j, k] = 1.0
            underflow |= exp_theta[j, k] == 0.0
    for s in range(S):
        n_on = 0
        for k in range(K):
            if zs[s, k] > 0.0:
                on[n_on] = k
                n_on += 1
        for j in range(n_active):
            i = indices[start + j]
            u = leak[i]
            for t in range(n_on):
                u += theta[i, on[t]]
            e = min(math.exp(-u), _E_MAX)
            _ratio_update(zs[s], exp_theta[j], e, ratio[j])
            if underflow:
                # theta_ik > ~745: e^{-theta} underflows, e / 0 gave the cap
                for k in range(K):
                    if zs[s, k] > 0.0 and exp_theta[j, k] == 0.0:
                        e0 = min(math.exp(theta[i, k] - u), _E_MAX)
                        ratio[j, k] *= (1.0 - _E_MAX) / (1.0 - e0)
        if (s + 1) % 8 == 0 or s == S - 1:  # bounded products: no overflow
            log_array(ratio.reshape(-1)[:n_active * K],
                      logs.reshape(-1)[:n_active * K], work)
            for j in range(n_active):
                for k in range(K):
                    out[k] += logs[j, k]
                    ratio[j, k] = 1.0
    for k in range(K):
        out[k] /= S
    for j in range(n_active):
        i = indices[start + j]
        for k in range(K):
            out[k] += theta[i, k]  # sum over inactive = colsum - active
    for k in range(K):
        out[k] += logit_prior[k] - colsum[k]


@njit(error_model="numpy", inline="always")
def _local_scratch(indptr, n_rows, S, K):
    """Scratch arrays of :func:`_local_targets_row` for rows 0..n_rows-1.

    Returns ``q`` (K,), ``zs`` (S, K), ``on`` (K,) int64, ``exp_theta``,
    ``ratio`` and ``logs`` (nnz of the longest row, K) and ``work`` (2, B).
    """
    width = 0
    for n in range(n_rows):
        width = max(width, indptr[n + 1] - indptr[n])
    return (np.empty(K), np.empty((S, K)), np.empty(K, dtype=np.int64),
            np.empty((width, K)), np.empty((width, K)), np.empty((width, K)),
            np.empty((2, SOFTPLUS_BLOCK)))


def local_optimize(indptr, indices, theta, leak, colsum, logit_prior, uniforms,
                   n_steps, step_size, tol, logit_q):
    """Per-row variational logits by damped natural-gradient ascent on the ELBO.

    For every row, up to ``n_steps`` steps ``logit_q += step_size * (target -
    logit_q)`` with the mean-field targets of :func:`_local_targets_row` (a step of
    1 is the mean-field coordinate update of all causes at once); a row stops
    early when no logit moves by more than ``tol`` (``tol = 0``: always
    ``n_steps``). Each row is optimized on its own, so the result does not
    depend on the other rows when ``uniforms`` is shared (shape (1, S, K)).
    The row's e^{-theta} is computed once, and the targets only again when
    one of its S samples changed (they depend on q only through them). Cost
    O(n_steps S nnz K) at most.

    ``logit_q`` (B, K) holds the starting logits and is overwritten with the
    result. Returns the number of steps of the slowest row.

    Rows are independent: :func:`local_optimize_rows` gives the same logits
    on threads.

    Checked against the exact ELBO by enumeration in tests/test_noisy_or.py::tes
    t_svi_recovers_patterns_and_transform_maximizes_the_elbo (the result is a
    local maximum) and in
    tests/test_noisy_or_features.py::test_refinement_raises_each_rows_elbo.
    """
    return _local_optimize_range(0, logit_q.shape[0], indptr, indices, theta, leak,
                                 colsum, logit_prior, uniforms, n_steps, step_size,
                                 tol, logit_q)


@njit(error_model="numpy", nogil=True)
def _local_optimize_range(lo, hi, indptr, indices, theta, leak, colsum, logit_prior,
                          uniforms, n_steps, step_size, tol, logit_q):
    """:func:`local_optimize` of the rows lo..hi-1; returns their most steps."""
    K = theta.shape[1]
    # scratch for the rows lo..hi-1 (its size does not change their results)
    q, zs, on, exp_theta, ratio, logs, work = _local_scratch(
        indptr[lo:hi + 1], hi - lo, uniforms.shape[1], K)
    target = np.empty(K)
    shared = uniforms.shape[0] == 1
    most = 0
    for n in range(lo, hi):
        U = uniforms[0 if shared else n]
        _row_exp_theta(indptr, indices, theta, n, exp_theta, ratio, work)
        zs[:] = -1.0
        step = 0
        while step < n_steps:
            # the targets depend on q only through the samples: recompute
            # them only when a sample changed
            if _row_samples(logit_q[n], U, q, zs):
                _local_targets_row(indptr, indices, theta, leak, colsum, logit_prior,
                                   zs, n, on, exp_theta, ratio, logs, work, target)
            step += 1
            change = 0.0
            for k in range(K):
                delta = step_size * (target[k] - logit_q[n, k])
                logit_q[n, k] += delta
                change = max(change, abs(delta))
            if change <= tol:
                break
        most = max(most, step)
    return most


@njit(error_model="numpy", nogil=True)
def importance_log_likelihood(indptr, indices, theta, leak, colsum, leak_sum,
                              logit_q, logit_prior, uniforms, out):
    """Importance-sampling estimate of log p(x) per row, q as the proposal.

    ``log (1/S sum_s p(x, z_s) / q(z_s))`` with ``z_sk = 1{uniforms[s, k] <
    q_k}``: the bound of importance-weighted autoencoders (Burda, Grosse and
    Salakhutdinov, ICLR 2016). Its expectation is at least the ELBO and
    tends to log p(x) as S grows; with the same uniforms for every row
    (common random numbers) it is deterministic and row-independent. Cost
    O(nnz K + S K + S nnz n_on), n_on the causes on in a sample.

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of the binary rows (B rows).
    theta : float64 array of shape (D, K)
    leak : float64 array of shape (D,)
    colsum, leak_sum : float64 array of shape (K,), float
        ``theta.sum(axis=0)``, ``leak.sum()``.
    logit_q : float64 array of shape (B, K)
    logit_prior : float64 array of shape (K,)
    uniforms : float64 array of shape (S, K), values in [0, 1)
    out : float64 array of shape (B,) (out)
        Estimate of log p(x) of each row, nats.

    Checked against a NumPy reference and the exact log-likelihood by
    enumeration in tests/test_noisy_or_kernels.py::test_importance_log_likelihoo
    d_reference_and_bounds.
    """
    K = theta.shape[1]
    B = logit_q.shape[0]
    S = uniforms.shape[0]
    log_w = np.empty(S)
    active_sum = np.empty(K)
    z = np.empty((S, K))
    for n in range(B):
        log_importance_weights(indptr, indices, theta, leak, colsum, leak_sum,
                               logit_q, logit_prior, n, uniforms, active_sum, z, log_w)
        top = log_w.max()
        total = 0.0
        for s in range(S):
            total += math.exp(log_w[s] - top)
        out[n] = top + math.log(total / S)


@njit(error_model="numpy", nogil=True)
def log_importance_weights(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                           logit_prior, n, uniforms, active_sum, z, log_w):
    """Log importance weights ``log p(x, z_s) - log q(z_s | x)`` of row n.

    ``z_sk = 1{uniforms[s, k] < q_nk}`` for the S rows of ``uniforms``
    (S, K); fills ``z`` (S, K) with the samples as 0.0/1.0, ``log_w`` (S,)
    with the log weights (nats) and ``active_sum[k]`` with ``sum_{i in A}
    theta_ik``. Equal samples are evaluated once (:func:`_sample_groups`).
    Cost O(nnz(x) K + S K + G nnz(x) n_on), G <= S the distinct samples and
    n_on the causes on in a sample. The forward pass of
    :func:`importance_log_likelihood` (and of importance-weighted training).
    """
    K = theta.shape[1]
    S = uniforms.shape[0]
    on = np.empty(K, dtype=np.int64)  # the causes on in sample s
    q = np.empty(K)
    for k in range(K):
        q[k] = sigmoid(logit_q[n, k])
    start = indptr[n]
    m = indptr[n + 1] - start
    # the weights of the row's words one contiguous row per cause, and the
    # leaks: u of a sample is the leak row plus whole rows (SIMD additions),
    # and log(1 - e^{-u}) is evaluated by the vectorized log1mexp_array
    theta_row = np.empty((K, m))
    leak_row = np.empty(m)
    u = np.empty(m)
    f = np.empty(m)
    df = np.empty(m)
    work = np.empty((LOG1MEXP_WORK_ROWS, SOFTPLUS_BLOCK))
    leak_active = 0.0
    active_sum[:] = 0.0
    for j in range(m):
        i = indices[start + j]
        leak_row[j] = leak[i]
        leak_active += leak[i]
        for k in range(K):
            active_sum[k] += theta[i, k]
            theta_row[k, j] = theta[i, k]
    for s in range(S):
        for k in range(K):
            z[s, k] = 1.0 if uniforms[s, k] < q[k] else 0.0
    umin, umax = _uniform_range(uniforms)
    keys = np.empty(S, dtype=np.int64)
    group = np.empty(S, dtype=np.int64)
    rep = np.empty(S, dtype=np.int64)
    n_groups = _sample_groups(q, uniforms, umin, umax, keys, group, rep)
    value_of = np.empty(n_groups)
    # log p(x | z) + log p(z) - log q(z) without the active features'
    # log(1 - e^{-u}): its term of cause k is off_k if z_k = 0 and on_k if
    # z_k = 1, so a sample's sum is sum_k off_k plus (on_k - off_k) over the
    # causes it has on, O(n_on) per sample instead of K logarithms
    base = -(leak_sum - leak_active)
    switch = np.empty(K)
    for k in range(K):
        lq = logit_q[n, k]
        off = log_sigmoid(-logit_prior[k]) - log_sigmoid(-lq)
        switch[k] = (log_sigmoid(logit_prior[k]) - log_sigmoid(lq)
                     - (colsum[k] - active_sum[k]) - off)
        base += off
    for g in range(n_groups):
        s = rep[g]
        value = base
        n_on = 0
        for k in range(K):
            if z[s, k] > 0.0:
                on[n_on] = k
                n_on += 1
                value += switch[k]
        # O(nnz(x) n_on): only the causes that are on add to u
        for j in range(m):
            u[j] = leak_row[j]
        for t in range(n_on):
            _add_row(u, theta_row[on[t]])
        log1mexp_array(u, f, df, work)
        for j in range(m):
            value += f[j]
        value_of[g] = value
    for s in range(S):
        log_w[s] = value_of[group[s]]


# Work (multiply-adds, about) from which a pass over a batch is split
# between threads; below it, handing the parts to threads costs more than
# they save. Measured on two cores (Intel Xeon, 2026-12-04; it depends on the
# machine) by running each call of default fits on one thread or two at
# random and comparing the medians (``benchmarks/bench_noisy_or.py
# --sections threads``): the Monte Carlo passes (relaxed ELBO gradient, true
# ELBO, local steps) break even at about 1e6.
PARALLEL_MIN_WORK = 1_000_000
# The passes with less work per entry to share, or whose split form does
# extra work, need more (multiples of PARALLEL_MIN_WORK; same measurements):
# the ACP head breaks even at about 1.2e6, its logits at 1.5e6 to 2e6, and
# the ACP backward pass, split into a pass over the rows and one over the
# features with a counting sort of the entries between them, at about 4e6.
ACP_HEAD_SCALE = 1.5
ACP_LOGITS_SCALE = 2.0
ACP_BACKWARD_SCALE = 4.0
# The local steps do more per counted unit than the other passes (each step
# re-samples the row and evaluates its targets): on two cores (AMD EPYC,
# 2026-12-08, and the Intel Xeon run above) their split took 0.57 to 0.98
# times the one-thread time at every size measured, from 1.96e5 counted
# units on.
LOCAL_STEPS_SCALE = 0.19


def _row_parts(indptr, n_rows, per_entry, per_row=0, scale=1.0):
    """Ranges of rows of equal work for the threads, or None for one thread.

    The work of a row is ``per_entry`` per stored entry plus ``per_row``; the
    pass runs on threads from ``scale * PARALLEL_MIN_WORK`` on.
    """
    cumulative = (indptr[:n_rows + 1] - indptr[0]) * float(per_entry) \
        + np.arange(n_rows + 1) * float(per_row)
    min_work = scale * PARALLEL_MIN_WORK
    if not parallel_pays(cumulative[-1], min_work, n_tasks=n_rows):
        return None
    return balanced_parts(cumulative, part_count(cumulative[-1], min_work))


def _feature_parts(colptr, per_entry, per_feature, scale=1.0):
    """Ranges of features of equal work for the threads (see
    :func:`column_entries` for ``colptr``)."""
    cumulative = colptr * float(per_entry) \
        + np.arange(colptr.shape[0]) * float(per_feature)
    return balanced_parts(cumulative,
                          part_count(cumulative[-1], scale * PARALLEL_MIN_WORK))


def _split_rows(serial, part, parts, args, extra=()):
    """``[serial(*args)]`` when ``parts`` is None, else the results of
    ``part(lo, hi, *extra, *args)`` over the row ranges, on threads."""
    if parts is None:
        return [serial(*args)]
    return run_parts(part, [(lo, hi, *extra, *args) for lo, hi in parts])


def discrete_elbo_rows(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                       logit_prior, uniforms, out):
    """:func:`discrete_elbo`, split between threads when the batch is large.

    Same arguments and the same values to the last bit (every row is
    computed by the same code with scratch of the same sizes); the rows are
    split into ranges of equal work (:func:`~skbinvi._numba.run_parts`).
    """
    K, S = theta.shape[1], uniforms.shape[0]
    _split_rows(discrete_elbo, _discrete_elbo_range,
                _row_parts(indptr, logit_q.shape[0], K, S * K),
                (indptr, indices, theta, leak, colsum, leak_sum, logit_q, logit_prior,
                 uniforms, out), extra=(_longest_row(indptr),))


def local_optimize_rows(indptr, indices, theta, leak, colsum, logit_prior, uniforms,
                        n_steps, step_size, tol, logit_q):
    """:func:`local_optimize`, split between threads when the batch is large.

    Same arguments, result and return value (to the last bit); the work
    counted is that of one step.
    """
    K, S = theta.shape[1], uniforms.shape[-2]
    return max(_split_rows(
        local_optimize, _local_optimize_range,
        _row_parts(indptr, logit_q.shape[0], S * K, S * K, LOCAL_STEPS_SCALE),
        (indptr, indices, theta, leak, colsum, logit_prior, uniforms, n_steps,
         step_size, tol, logit_q)))


def relaxed_elbo_logit_grad_rows(indptr, indices, theta, leak, colsum, leak_sum,
                                 logit_q, logit_prior, uniforms, temperature,
                                 g_logit_q, elbo_relaxed, elbo_discrete):
    """The row pass of :func:`relaxed_elbo_grad` alone, on threads when large.

    Same arguments and the same ``g_logit_q``, ``elbo_relaxed`` and
    ``elbo_discrete`` to the last bit, without the gradients of theta, the
    leak and the prior (the pass over the features is skipped): the
    encoder's gradient in semi-amortized training, where the model's
    gradients are taken at the refined logits. Cost O(nnz M K).

    Checked against :func:`relaxed_elbo_grad` in tests/test_noisy_or_kernels.py
    (test_relaxed_logit_gradient_is_the_row_pass).
    """
    B, M, K = uniforms.shape
    fp = np.empty((indptr[B], M))
    zs = np.empty((B, M, K))
    q = np.empty((B, K))
    longest = _longest_row(indptr)
    args = (longest, indptr, indices, theta, leak, colsum, leak_sum, logit_q,
            logit_prior, uniforms, temperature, fp, zs, q, g_logit_q, elbo_relaxed,
            elbo_discrete)
    parts = _row_parts(indptr, B, (M + 1) * K, M * K)
    if parts is None:
        _relaxed_rows(0, B, *args)
    else:
        run_parts(_relaxed_rows, [(lo, hi, *args) for lo, hi in parts])


def relaxed_elbo_grad_rows(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                           logit_prior, uniforms, temperature, g_theta, g_leak,
                           g_theta_dense, g_logit_q, g_logit_prior, elbo_relaxed,
                           elbo_discrete):
    """:func:`relaxed_elbo_grad`, its two passes split between threads when
    the batch is large (the same numbers to the last bit)."""
    B, M, K = uniforms.shape
    parts = _row_parts(indptr, B, (M + 1) * K, M * K)
    if parts is None:
        relaxed_elbo_grad(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                          logit_prior, uniforms, temperature, g_theta, g_leak,
                          g_theta_dense, g_logit_q, g_logit_prior, elbo_relaxed,
                          elbo_discrete)
        return
    fp = np.empty((indptr[B], M))
    zs = np.empty((B, M, K))
    q = np.empty((B, K))
    longest = _longest_row(indptr)
    run_parts(_relaxed_rows, [
        (lo, hi, longest, indptr, indices, theta, leak, colsum, leak_sum, logit_q,
         logit_prior, uniforms, temperature, fp, zs, q, g_logit_q, elbo_relaxed,
         elbo_discrete) for lo, hi in parts])
    _relaxed_totals(q, logit_prior, g_theta_dense, g_logit_prior)
    colptr, entry, row_of = column_entries(indptr, indices, theta.shape[0])
    run_parts(_relaxed_features, [
        (lo, hi, colptr, entry, row_of, fp, zs, q, g_theta, g_leak)
        for lo, hi in _feature_parts(colptr, (M + 1) * K, K)])


def acp_psi_rows(indptr, indices, hidden, coef_out, intercept_out, pre_out, psi_out):
    """:func:`acp_psi`, split between threads when the batch is large."""
    _split_rows(acp_psi, _acp_psi_range,
                _row_parts(indptr, *hidden.shape, scale=ACP_HEAD_SCALE),
                (indptr, indices, hidden, coef_out, intercept_out, pre_out, psi_out))


def acp_logits_rows(indptr, indices, psi, theta, colsum, logit_prior, out):
    """:func:`acp_logits`, split between threads when the batch is large."""
    B, K = out.shape
    _split_rows(acp_logits, _acp_logits_range,
                _row_parts(indptr, B, K, K, scale=ACP_LOGITS_SCALE),
                (indptr, indices, psi, theta, colsum, logit_prior, out))


def acp_backward_rows(indptr, indices, g_logit_q, psi, pre, theta, hidden, coef_out,
                      g_theta, g_theta_dense, g_coef_out, g_intercept_out, g_hidden):
    """:func:`acp_backward`, its two passes split between threads when the
    batch is large (the same numbers to the last bit)."""
    B, H = hidden.shape
    K = theta.shape[1]
    parts = _row_parts(indptr, B, 2 * (K + H), scale=ACP_BACKWARD_SCALE)
    if parts is None:
        acp_backward(indptr, indices, g_logit_q, psi, pre, theta, hidden, coef_out,
                     g_theta, g_theta_dense, g_coef_out, g_intercept_out, g_hidden)
        return
    g_pre = np.empty(indptr[B])
    longest = _longest_row(indptr)
    run_parts(_acp_backward_rows, [
        (lo, hi, longest, indptr, indices, g_logit_q, pre, theta, coef_out, g_pre,
         g_hidden) for lo, hi in parts])
    _acp_backward_totals(g_logit_q, g_theta_dense)
    colptr, entry, row_of = column_entries(indptr, indices, theta.shape[0])
    run_parts(_acp_backward_features, [
        (lo, hi, colptr, entry, row_of, g_logit_q, psi, hidden, g_pre, g_theta,
         g_coef_out, g_intercept_out)
        for lo, hi in _feature_parts(colptr, K + H, H, scale=ACP_BACKWARD_SCALE)])
