"""Reference implementations for the tests of :mod:`skbinvi.noisy_or`.

Moved out of the package (issue 74): the plain Jaakkola-Jordan EM driver and
its per-row updates, and the NumPy local-expectation targets. The estimator
runs the fused kernels of ``_jaakkola_jordan`` and ``_kernels``; the tests
compare those kernels with these references.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

from skbinvi._math import sigmoid
from skbinvi._numba import njit
from skbinvi.noisy_or._jaakkola_jordan import (
    LEAK_FLOOR,
    _by_feature,
    _feature_objective,
    _feature_stats,
    _row_update_q,
    jj_bound,
    jj_e_step,
    jj_init_r,
    jj_m_step,
)
from skbinvi.noisy_or._kernels import (
    _local_scratch,
    _local_targets_row,
    _row_exp_theta,
    _row_samples,
)


@njit
def jj_update_q(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                logit_prior, r, out):
    """Closed-form update of the factorized posterior q given the weights r.

    B_n is linear in q_nk plus the KL term, so its maximizer is

        logit q_nk = logit mu_k + sum_{i in A_n} r_jk [f(theta_i0 + theta_ik / r_jk)
                     - f(theta_i0)] - sum_{i not in A_n} theta_ik

    (the sum over inactive features via ``colsum``), the same for all k at
    once ([SH]; [JJ] for the same update under the
    conjugate-dual bound). Cost O(nnz K).

    Parameters
    ----------
    indptr, indices, theta, leak, colsum, leak_sum, logit_prior, r
        As in :func:`jj_bound`.
    logit_q : float64 array of shape (B, K)
        Overwritten with the new logits (its input value is not used).
    out : float64 array of shape (B,) (out)
        B_n at the new q (and the given r), nats per row.

    Checked against a NumPy reference in
    tests/test_noisy_or_jaakkola_jordan.py::test_q_update_matches_reference.
    """
    K = theta.shape[1]
    gain = np.empty(K)
    active_sum = np.empty(K)
    for n in range(logit_q.shape[0]):
        out[n] = _row_update_q(n, indptr, indices, theta, leak, colsum, leak_sum,
                               logit_q, logit_prior, r, gain, active_sum)


@njit
def jj_feature_bound(indptr, indices, logit_q, r, theta, leak, out):
    """Per-feature part of the total bound, the objective of the M-step.

    ``out[i] = sum_{j: feature i} sum_k r_jk [q_nk f(t0 + theta_ik / r_jk)
    + (1 - q_nk) f(t0)] - (B - n_i) t0 - sum_k theta_ik sum_{n: x_ni = 0} q_nk``
    with t0 = max(theta_i0, LEAK_FLOOR) and n_i the number of rows where
    feature i is active, so that ``sum_n B_n = sum_i out[i] - sum_{n,k}
    KL(q_nk || mu_k)`` (up to the leak floor and the R_TINY convention).
    Computed from sufficient statistics in O(nnz K + D K).

    Parameters
    ----------
    indptr, indices, logit_q, r, theta, leak
        As in :func:`jj_bound`.
    out : float64 array of shape (D,) (out)
        Nats, summed over the B rows.

    Checked against jj_bound in tests/test_noisy_or_jaakkola_jordan.py::test_fea
    ture_bound_is_the_theta_part_of_the_total.
    """
    D, K = theta.shape
    B = logit_q.shape[0]
    q = np.empty((B, K))
    for n in range(B):
        for k in range(K):
            q[n, k] = sigmoid(logit_q[n, k])
    fptr, entries, rows = _by_feature(indptr, indices, D)
    c_inact = np.empty((D, K))
    _feature_stats(q, fptr, rows, c_inact)
    for i in range(D):
        n_i = fptr[i + 1] - fptr[i]
        out[i] = _feature_objective(max(leak[i], LEAK_FLOOR), theta[i], fptr[i],
                                    fptr[i + 1], entries, rows, q, r,
                                    float(B - n_i), c_inact[i])


def jj_fit_em(X, theta, leak, logit_prior, *, n_iter=50, n_inner=5, n_newton=10,
              tol=0.0, logit_q=None, r=None, leak_min=LEAK_FLOOR):
    """Batch variational EM of the noisy-OR model on the Jensen bound (LB-CDI).

    Alternates :func:`jj_e_step` (``n_inner`` coordinate-ascent sweeps per
    row on q and r) and :func:`jj_m_step` (theta, leak, mu) on the full data;
    every half step is a (guarded) block maximization of ``sum_n B_n``, so the
    recorded bounds are non-decreasing. A plain helper for tests and
    experiments ([Yan] supplement's LB-CDI baseline; [SH]); the estimator
    wiring lives elsewhere.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (B, D)
        Binary data (any nonzero counts as 1).
    theta : array-like of shape (D, K)
        Initial weights theta_ik >= 0 (copied).
    leak : array-like of shape (D,)
        Initial leak theta_i0 (copied; raised to ``leak_min`` by the M-step).
    logit_prior : array-like of shape (K,)
        Initial logit mu (copied).
    n_iter : int, default=50
        EM iterations.
    n_inner : int, default=5
        E-step sweeps per row and iteration.
    n_newton : int, default=10
        Newton iterations per feature and M-step.
    tol : float, default=0.0
        E-step relative tolerance (see :func:`jj_e_step`).
    logit_q : array-like of shape (B, K), default=None
        Initial posterior logits (default: the prior's).
    r : array-like of shape (nnz, K), default=None
        Initial Jensen weights (default: :func:`jj_init_r`).
    leak_min : float, default=LEAK_FLOOR
        Lower bound of the leak in the M-step (see :func:`jj_m_step`).

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``theta`` (D, K), ``leak`` (D,), ``logit_prior`` (K,), ``logit_q``
        (B, K), ``r`` (nnz, K), ``bound_init`` (float), ``bound_e`` and
        ``bound_m`` (n_iter,): ``sum_n B_n`` in nats before EM, after each
        E-step and after each M-step.

    Checked in tests/test_noisy_or_jaakkola_jordan.py (test_em_is_monotone,
    test_em_on_synthetic_data_finds_patterns).
    """
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    X.eliminate_zeros()
    X.sum_duplicates()
    indptr = X.indptr.astype(np.int64)
    indices = X.indices.astype(np.int64)
    theta = np.array(theta, dtype=np.float64, order="C", copy=True)
    leak = np.array(leak, dtype=np.float64, copy=True)
    logit_prior = np.array(logit_prior, dtype=np.float64, copy=True)
    B = X.shape[0]
    if logit_q is None:
        logit_q = np.tile(logit_prior, (B, 1))
    logit_q = np.array(logit_q, dtype=np.float64, order="C", copy=True)
    if r is None:
        r = jj_init_r(indptr, indices, theta)
    r = np.array(r, dtype=np.float64, order="C", copy=True)
    out = np.empty(B)
    jj_bound(indptr, indices, theta, leak, theta.sum(0), leak.sum(), logit_q,
             logit_prior, r, out)
    bound_init = out.sum()
    bound_e = np.empty(n_iter)
    bound_m = np.empty(n_iter)
    for it in range(n_iter):
        jj_e_step(indptr, indices, theta, leak, theta.sum(0), leak.sum(), logit_q,
                  logit_prior, r, n_inner, tol, out)
        bound_e[it] = out.sum()
        jj_m_step(indptr, indices, logit_q, r, theta, leak, logit_prior, n_newton,
                  1e-12, leak_min)
        jj_bound(indptr, indices, theta, leak, theta.sum(0), leak.sum(), logit_q,
                 logit_prior, r, out)
        bound_m[it] = out.sum()
    return Bunch(theta=theta, leak=leak, logit_prior=logit_prior, logit_q=logit_q,
                 r=r, bound_init=bound_init, bound_e=bound_e, bound_m=bound_m)


@njit(error_model="numpy")
def local_expectation_logits(indptr, indices, theta, leak, colsum, logit_q,
                             logit_prior, uniforms, out):
    """Mean-field target logits of every row, each binary variable marginalized.

    For a factorized q with fixed theta, leak and mu, the ELBO of row n is
    maximal in q_k (the others fixed) at

        logit q_k = logit mu_k + E_{q_-k}[ sum_{i in A} f(u_i | z_k = 1)
                                         - f(u_i | z_k = 0) ]
                    - sum_{i not in A} theta_ik,

    with f(u) = log(1 - exp(-u)) and u_i = theta_i0 + sum_j theta_ij z_j; and
    ``dL/d logit q_k = q_k (1 - q_k) (target_k - logit q_k)``, so that
    ``target - logit_q`` is the natural gradient of the ELBO with respect to
    the logits. The expectation over the other variables is estimated with S
    exact samples ``z_sj = 1{uniforms[., s, j] < q_j}``, and z_k itself is
    summed out exactly (local expectation gradients, Titsias and
    Lazaro-Gredilla, NeurIPS 2015), which keeps the estimate smooth in q_k.
    Cost O(S nnz K).

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of the binary rows (B rows).
    theta : float64 array of shape (D, K)
    leak : float64 array of shape (D,)
    colsum : float64 array of shape (K,)
        ``theta.sum(axis=0)``.
    logit_q : float64 array of shape (B, K)
    logit_prior : float64 array of shape (K,)
    uniforms : float64 array of shape (B, S, K) or (1, S, K)
        Uniforms in [0, 1); with a first dimension of 1 the same numbers serve
        every row (common random numbers: the result of a row does not depend
        on the other rows).
    out : float64 array of shape (B, K) (out)
        Target logits.

    Checked against the NumPy reference ``_reference_local_targets`` of
    tests/test_noisy_or_kernels.py
    (test_local_expectation_logits_match_reference) and against the natural
    gradient of the exact ELBO by enumeration
    (test_local_expectation_is_the_natural_gradient_of_the_exact_elbo).
    """
    q, zs, on, exp_theta, ratio, logs, work = _local_scratch(
        indptr, logit_q.shape[0], uniforms.shape[1], theta.shape[1])
    shared = uniforms.shape[0] == 1
    for n in range(logit_q.shape[0]):
        _row_exp_theta(indptr, indices, theta, n, exp_theta, ratio, work)
        _row_samples(logit_q[n], uniforms[0 if shared else n], q, zs)
        _local_targets_row(indptr, indices, theta, leak, colsum, logit_prior, zs, n,
                           on, exp_theta, ratio, logs, work, out[n])
