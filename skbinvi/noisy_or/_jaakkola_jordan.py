"""Jaakkola-Jordan / Singliar-Hauskrecht variational EM for the noisy-OR model ("jj").

This is the non-amortized "LB-CDI" baseline of [Yan] (User Guide,
doc/modules/noisy_or.rst, section on "jj"). Model: ``z_k ~ Bern(mu_k)`` and
``p(x_i = 0 | z) = exp(-theta_i0 - sum_k theta_ik z_k)`` with theta >= 0.

**The bound.** f(u) = log(1 - exp(-u)) is concave, so for weights r_ik >= 0
with ``sum_k r_ik = 1`` (one weight vector per *active* entry (n, i), the
leak spread over the causes), Jensen's inequality gives ([JJ]; [SH], who
use it for noisy-OR component analysis)

    f(theta_i0 + sum_k theta_ik z_k)
        >= sum_k r_ik [ z_k f(theta_i0 + theta_ik / r_ik) + (1 - z_k) f(theta_i0) ],

which is linear in z. Under a factorized q(z) = prod_k Bern(q_k) the lower
bound on the ELBO of row n (nats) is

    B_n = sum_{i in A_n} sum_k r_ik [ q_k f(theta_i0 + theta_ik / r_ik)
                                      + (1 - q_k) f(theta_i0) ]
          - sum_{i not in A_n} (theta_i0 + sum_k theta_ik q_k)
          - sum_k KL(Bern(q_k) || Bern(mu_k)).

With ``sum_k r_ik = 1`` the positive term of one entry reads
``f(t0) + sum_k q_k h_k(r_k)``, where ``h_k(r) = r [f(t0 + t_k / r) - f(t0)]``
is the perspective of a concave function: concave and non-decreasing in r,
``h_k(0) = 0`` (the r -> 0 limit; for t_k = 0, ``h_k = 0`` for every r).

**Conventions.** D features, K causes, a batch of B binary rows in CSR form
(``indptr``, ``indices`` as int64: the active set A_n of row n). ``theta`` is
(D, K) (feature-major, as in ``_kernels``), ``leak`` is theta_0 (D,),
``logit_prior`` is logit mu (K,), ``logit_q`` is (B, K). ``r`` is an
(nnz, K) float64 array aligned with the CSR entries: ``r[j]`` holds the
weights of entry ``j`` (row n with ``indptr[n] <= j < indptr[n + 1]``,
feature ``indices[j]``); its memory is nnz * K doubles. Features with x_i = 0
enter only through ``colsum_k = sum_i theta_ik`` and ``leak_sum = sum_i
theta_i0`` (passed in by the caller), so every kernel costs O(nnz K) (plus
O(D K) in the M-step), never O(B D K).

**Leak floor.** f(0) = -inf, so f is always evaluated at
``max(theta_i0, LEAK_FLOOR)`` with ``LEAK_FLOOR = 1e-10`` (the linear
negative-evidence term uses theta_i0 as given); the M-step keeps
``theta_i0 >= leak_min >= LEAK_FLOOR``, so after one M-step the two
coincide. At LEAK_FLOOR, f(theta_i0) = log(1e-10) ~ -23 nats. Left to
itself the M-step puts the leak of a word absent from the training rows (or
fully explained by the causes) there, and every held-out row with that word
pays those 23 nats; the estimator therefore passes ``leak_min = -log(1 - 1 /
(B + 1))``, the leak of a word seen once in B + 1 rows (about log(B + 1)
nats per unexplained word).

**State updated in place.** :func:`jj_update_r` and :func:`jj_e_step`
overwrite ``logit_q`` and ``r`` (per-row E-step state owned by the caller);
:func:`jj_m_step` overwrites ``theta``, ``leak`` and ``logit_prior`` (the
parameters). Every other argument is read only. The closed-form q update on
its own (``jj_update_q``), the per-feature bound ``jj_feature_bound`` and
the plain batch EM driver ``jj_fit_em`` are the tests' references
(tests/_reference/noisy_or.py).

References
----------
[JJ] T. Jaakkola, M. Jordan, "Variational probabilistic inference and the
QMR-DT network", JAIR 10, 1999.
[SH] T. Singliar, M. Hauskrecht, "Noisy-OR component analysis and its
application to link analysis", JMLR 7, 2006.
[Yan] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational Bounds
for Learning Noisy-OR", AISTATS 2020 (and its supplement: LB-CDI baseline).
"""

import math

import numpy as np

from .._math import dlog1mexp, kl_bernoulli_logits, log1mexp, sigmoid, softplus_sigmoid
from .._numba import njit, run_parts
from ._kernels import _negative_and_kl

_E_STEP_CHUNK = 16
"""Rows per part of :func:`jj_e_step` on threads (some rows cost 100 times
more than others: small parts keep the threads busy)."""

LEAK_FLOOR = 1e-10
"""Smallest leak theta_i0 at which f(theta_i0) = log(1 - e^-theta_i0) is evaluated."""

PRIOR_CLIP = 1e-10
"""The M-step keeps mu_k in [PRIOR_CLIP, 1 - PRIOR_CLIP] (finite logits)."""

THETA_MAX = 30.0
"""The M-step keeps theta_ik in [0, THETA_MAX]. A feature present in every
row where cause k is on and q_k underflows to 0 elsewhere has its bound
increasing without limit in theta_ik (its maximum is at infinity); the
Newton steps then ran it to 4e44 (Reuters headlines, 500 documents, K =
150), and the E-step's logit of every row without the feature to -4e44.
At 30, 1 - exp(-theta) is 1 to 1e-13: the word is certain when the cause is
on, as at infinity, and the logits stay those of a sane model."""

R_TINY = 1e-150
"""In the M-step, weights r_jk <= R_TINY are treated as 0 (their exact
contribution, at most ``R_TINY * 23`` nats, is dropped; it keeps the
curvature ``q f''(u) / r`` finite)."""


# --------------------------------------------------------------------------
# scalar helpers
# --------------------------------------------------------------------------


@njit(nogil=True)
def _f_shift(s, em1_t0):
    """f(t0 + s) - f(t0) >= 0, accurate for every s >= 0 (including s = inf).

    Parameters
    ----------
    s : float
        Shift, s >= 0.
    em1_t0 : float
        ``expm1(t0)`` with t0 > 0.

    Returns
    -------
    float
        ``log1p(-expm1(-s) / expm1(t0))``; tends to ``-f(t0)`` as s -> inf.
    """
    return math.log1p(-math.expm1(-s) / em1_t0)


@njit(nogil=True)
def _perspective(r, t, em1_t0):
    """h(r) = r [f(t0 + t / r) - f(t0)], with its limit h(0) = 0.

    Parameters
    ----------
    r : float
        Weight r >= 0.
    t : float
        theta_ik >= 0.
    em1_t0 : float
        ``expm1(t0)``.

    Returns
    -------
    float
        Value in nats (>= 0).
    """
    if r <= 0.0 or t <= 0.0:
        return 0.0
    return r * _f_shift(t / r, em1_t0)


@njit(nogil=True)
def _phi(s, t0, em1_t0):
    """phi(s) = f(t0 + s) - f(t0) - s f'(t0 + s), increasing from 0 to -f(t0).

    ``phi(t / r) = h'(r)``, the derivative of the perspective.

    Parameters
    ----------
    s, t0, em1_t0 : float
        Shift s >= 0, leak t0 > 0 and ``expm1(t0)``.

    Returns
    -------
    float
    """
    return _f_shift(s, em1_t0) - s * dlog1mexp(t0 + s)


@njit(nogil=True)
def _psi(s, t0):
    """psi(s) = -f(t0 + s) + s f'(t0 + s) = -f(t0) - phi(s) > 0, decreasing to 0.

    A sum of two non-negative terms, hence accurate where phi is close to
    -f(t0) (large s).

    Parameters
    ----------
    s, t0 : float
        Shift s >= 0 and leak t0 > 0.

    Returns
    -------
    float
    """
    a = t0 + s
    return -log1mexp(a) + s * dlog1mexp(a)


@njit(nogil=True)
def _solve_phi(y, t0, em1_t0, s_start, max_iter=100):
    """The s > 0 with phi(s) = y, for 0 < y < -f(t0) (used when y <= psi).

    Safeguarded Newton on ``log phi(e^u) - log y`` in u = log s (phi ~ s^2
    near 0, so this is nearly linear there), bisection/expansion whenever the
    step leaves the bracket.

    Parameters
    ----------
    y : float
        Target value.
    t0, em1_t0 : float
        Leak and ``expm1(t0)``.
    s_start : float
        Warm start (ignored if not a positive finite number).
    max_iter : int, default=100
        Maximum number of Newton or bracketing steps (about 4 to 9 are
        needed, whatever the start).

    Returns
    -------
    float
        s with phi(s) = y to about 1e-13 relative precision.
    """
    fp0 = 1.0 / em1_t0
    if s_start > 0.0 and math.isfinite(s_start):
        u = math.log(s_start)
    else:
        u = 0.5 * math.log(2.0 * y / (fp0 * (1.0 + fp0)))
    lo = -math.inf
    hi = math.inf
    ly = math.log(y)
    for _ in range(max_iter):
        s = math.exp(u)
        fp = dlog1mexp(t0 + s)
        ph = _f_shift(s, em1_t0) - s * fp
        u_new = math.nan
        if ph <= 0.0:  # cancellation at tiny s: the root is further right
            lo = u
        else:
            g = math.log(ph) - ly
            if g > 0.0:
                hi = u
            else:
                lo = u
            dg = s * s * fp * (1.0 + fp) / ph
            if dg > 0.0:
                # at most a factor e^3 in s toward an unbounded side
                u_new = min(max(u - g / dg, u - 3.0), u + 3.0)
        # a converged step keeps its place even on a bracket end: at the root
        # g rounds to 0 and the step lands on the end just set, which is no
        # reason to leave the root
        if not (abs(u_new - u) <= 1e-13 or (u_new > lo and u_new < hi)):
            if lo == -math.inf:
                u_new = hi - 3.0
            elif hi == math.inf:
                u_new = lo + 3.0
            else:
                u_new = 0.5 * (lo + hi)
        if abs(u_new - u) <= 1e-13:
            u = u_new
            break
        u = u_new
    return math.exp(u)


@njit(nogil=True)
def _solve_psi(w, t0, s_start, max_iter=100):
    """The s > 0 with psi(s) = w, for 0 < w < -f(t0) (used when w < phi).

    Safeguarded Newton on ``log psi(s) - log w`` in s (nearly linear for large
    s, where psi ~ (1 + s) exp(-t0 - s)).

    Parameters
    ----------
    w : float
        Target value.
    t0 : float
        Leak.
    s_start : float
        Warm start (ignored if not a positive finite number).
    max_iter : int, default=100
        Maximum number of Newton or bracketing steps (about 4 to 9 are
        needed, whatever the start).

    Returns
    -------
    float
        s with psi(s) = w to about 1e-14 relative precision.
    """
    if s_start > 0.0 and math.isfinite(s_start):
        s = s_start
    else:
        s = max(-math.log(w) - t0, 0.5)
        s = max(-math.log(w) - t0 + math.log1p(s), 1e-3)
    lo = 0.0
    hi = math.inf
    lw = math.log(w)
    for _ in range(max_iter):
        a = t0 + s
        fp = dlog1mexp(a)
        ps = -log1mexp(a) + s * fp
        s_new = math.nan
        if ps <= 0.0:  # underflow far right
            hi = s
        else:
            g = math.log(ps) - lw
            if g > 0.0:
                lo = s
            else:
                hi = s
            dg = -s * fp * (1.0 + fp) / ps
            if dg < 0.0:
                s_new = min(s - g / dg, 2.0 * s + 10.0)
        # a converged step keeps its place even on a bracket end (_solve_phi)
        if not (abs(s_new - s) <= 1e-14 * s or (s_new > lo and s_new < hi)):
            if hi == math.inf:
                s_new = 2.0 * lo + 1.0
            else:
                s_new = 0.5 * (lo + hi)
        if abs(s_new - s) <= 1e-14 * s:
            s = s_new
            break
        s = s_new
    return s


@njit(nogil=True)
def _entry_value(f0, em1_t0, th, q, r):
    """Positive-term bound of one active entry (nats).

    ``sum_k r_k [q_k f(t0 + t_k / r_k) + (1 - q_k) f(t0)]``
    ``= f(t0) sum_k r_k + sum_k q_k h_k(r_k)``.

    Parameters
    ----------
    f0, em1_t0 : float
        f(t0) and expm1(t0).
    th, q, r : float64 arrays of shape (K,)
        theta_i., q_n. and r_j.

    Returns
    -------
    float
    """
    rsum = 0.0
    val = 0.0
    for k in range(th.shape[0]):
        rsum += r[k]
        val += q[k] * _perspective(r[k], th[k], em1_t0)
    return f0 * rsum + val


@njit(nogil=True)
def _solve_r_entry(t0, th, q, r, work, max_iter, tol):
    """Optimal weights r of one active entry for fixed q (in place, guarded).

    Maximizes ``sum_k q_k h_k(r_k)`` over the simplex (see
    :func:`jj_update_r` for the derivation): with the Lagrange multiplier
    lambda, ``r_k = t_k / s_k`` where ``q_k phi(s_k) = lambda`` if
    ``lambda < q_k (-f(t0))`` and ``r_k = 0`` otherwise; lambda solves
    ``S(lambda) = sum_k r_k(lambda) = 1`` (S decreasing). The solve tracks the
    pair (lambda, nu = lambda_max - lambda) so that both ends of the range are
    resolved to full relative precision, and uses Newton on log S with a
    bracket. If the bracket collapses before ``|S - 1| <= tol`` (a jump of
    S), the two bracket ends are interpolated to ``sum_k r_k = 1``. The
    result is normalized to sum to 1 and kept only if the entry's bound does
    not decrease.

    Parameters
    ----------
    t0 : float
        Floored leak of the feature.
    th, q : float64 arrays of shape (K,)
        theta_i. and q_n.
    r : float64 array of shape (K,)
        Weights of the entry, updated in place.
    work : float64 array of shape (4, K)
        Work space.
    max_iter : int
        Maximum number of outer (lambda) iterations.
    tol : float
        Tolerance on ``|S - 1|``.

    Returns
    -------
    bool
        Whether r was changed.
    """
    K = th.shape[0]
    s_work = work[0]
    r_new = work[1]
    r_lo = work[2]
    r_hi = work[3]
    em1 = math.expm1(t0)
    f0 = log1mexp(t0)
    m0 = -f0
    old = _entry_value(f0, em1, th, q, r)
    lam_max = 0.0
    for k in range(K):
        if th[k] > 0.0 and q[k] > 0.0:
            lam_max = max(lam_max, q[k] * m0)
    if not (lam_max > 0.0 and math.isfinite(lam_max)):
        return False
    # start from the multiplier implied by the current weights
    num_lam = 0.0
    num_nu = 0.0
    den = 0.0
    for k in range(K):
        s_work[k] = -1.0
        if th[k] > 0.0 and q[k] > 0.0 and r[k] > 0.0:
            s = th[k] / r[k]
            if math.isfinite(s):
                s_work[k] = s
                num_lam += r[k] * q[k] * _phi(s, t0, em1)
                num_nu += r[k] * (q[k] * _psi(s, t0) + (lam_max - q[k] * m0))
                den += r[k]
    lam = 0.5 * lam_max
    nu = 0.5 * lam_max
    if den > 0.0:
        lam1 = num_lam / den
        nu1 = num_nu / den
        if 0.0 < lam1 < lam_max and 0.0 < nu1 < lam_max:
            lam = lam1
            nu = nu1
    lam_lo, nu_lo = 0.0, lam_max  # S = +inf
    lam_hi, nu_hi = lam_max, 0.0  # S = 0
    S_lo = math.inf
    S_hi = 0.0
    for k in range(K):
        r_hi[k] = 0.0
    S = 0.0
    converged = False
    since_bisection = 0
    for _ in range(max_iter):
        S = 0.0
        dS = 0.0
        for k in range(K):
            r_new[k] = 0.0
            if th[k] <= 0.0 or q[k] <= 0.0:
                continue
            w = (nu - (lam_max - q[k] * m0)) / q[k]
            if w <= 0.0:
                continue
            y = lam / q[k]
            if y <= w:
                s = _solve_phi(y, t0, em1, s_work[k])
            else:
                s = _solve_psi(w, t0, s_work[k])
            s_work[k] = s
            # s underflows to 0 when q_k or lambda is below ~1e-300 (a flat
            # bound): r_k is then unbounded, S = inf, and lambda moves up
            rk = th[k] / s if s > 0.0 else math.inf
            r_new[k] = rk
            S += rk
            fp = dlog1mexp(t0 + s)
            den = s * q[k] * s * fp * (1.0 + fp)
            if den > 0.0 and math.isfinite(rk):
                dS -= rk / den
        if abs(S - 1.0) <= tol:
            converged = True
            break
        if S > 1.0:
            lam_lo, nu_lo, S_lo = lam, nu, S
            for k in range(K):
                r_lo[k] = r_new[k]
        else:
            lam_hi, nu_hi, S_hi = lam, nu, S
            for k in range(K):
                r_hi[k] = r_new[k]
        if (lam_hi - lam_lo <= 4e-16 * lam_hi
                and nu_lo - nu_hi <= 4e-16 * nu_lo):
            break  # the bracket cannot shrink further in double precision
        lam_n = math.nan
        nu_n = math.nan
        if (since_bisection < 4 and S > 0.0 and dS < 0.0 and math.isfinite(S)
                and math.isfinite(dS)):
            step = -S * math.log(S) / dS
            lam_n = lam + step
            nu_n = nu - step
        since_bisection += 1
        if not (lam_lo < lam_n < lam_hi and nu_hi < nu_n < nu_lo):
            since_bisection = 0
            if lam_lo == 0.0:
                lam_n = 0.0625 * lam_hi
                nu_n = lam_max - lam_n
            elif nu_hi == 0.0:
                nu_n = 0.0625 * nu_lo
                lam_n = lam_max - nu_n
            elif lam_hi > 4.0 * lam_lo:
                lam_n = math.sqrt(lam_lo * lam_hi)
                nu_n = lam_max - lam_n
            elif nu_lo > 4.0 * nu_hi:
                nu_n = math.sqrt(nu_lo * nu_hi)
                lam_n = lam_max - nu_n
            else:
                lam_n = 0.5 * (lam_lo + lam_hi)
                nu_n = 0.5 * (nu_lo + nu_hi)
        if lam_n == lam and nu_n == nu:
            break
        lam = lam_n
        nu = nu_n
    if converged:
        total = S
    elif math.isfinite(S_lo):
        # S jumps across 1 inside an unresolvable bracket (a cause whose h is
        # linear there, t_k / r_k >> 1): interpolate the two ends, which moves
        # only the jumping causes and keeps the others at their optimum.
        a = (1.0 - S_hi) / (S_lo - S_hi)
        total = 0.0
        for k in range(K):
            r_new[k] = a * r_lo[k] + (1.0 - a) * r_hi[k]
            total += r_new[k]
    else:
        total = S
    if not (total > 0.0 and math.isfinite(total)):
        return False
    for k in range(K):
        r_new[k] /= total
    new = _entry_value(f0, em1, th, q, r_new)
    if new >= old:
        for k in range(K):
            r[k] = r_new[k]
        return True
    return False


# --------------------------------------------------------------------------
# bound and E-step
# --------------------------------------------------------------------------


@njit(nogil=True)
def _bound_scratch(logit_prior):
    """Scratch of :func:`_row_bound`, shape (5, K): row 0 is softplus(logit_prior)."""
    rows = np.empty((5, logit_prior.shape[0]))
    softplus_sigmoid(logit_prior, rows[0], rows[1], rows[2:])
    return rows


@njit(nogil=True)
def _row_bound(n, indptr, indices, theta, leak, colsum, leak_sum, logit_q,
               logit_prior, r, q_row, active_sum, rows):
    """B_n, the Jensen bound on the ELBO of row n (nats).

    Parameters
    ----------
    n : int
        Row.
    indptr, indices, theta, leak, colsum, leak_sum, logit_q, logit_prior, r
        As in :func:`jj_bound`.
    q_row, active_sum : float64 arrays of shape (K,)
        Work space.
    rows : float64 array of shape (5, K)
        ``rows[0]`` holds ``softplus(logit_prior)`` (:func:`_bound_scratch`);
        the other rows are work space.

    Returns
    -------
    float
    """
    value = _negative_and_kl(indptr, indices, theta, leak, leak_sum, colsum,
                             logit_q, logit_prior, rows[0], n, active_sum,
                             q_row, rows[1], rows[2:])
    for j in range(indptr[n], indptr[n + 1]):
        i = indices[j]
        t0 = max(leak[i], LEAK_FLOOR)
        value += _entry_value(log1mexp(t0), math.expm1(t0), theta[i], q_row, r[j])
    return value


@njit(nogil=True)
def jj_bound(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
             logit_prior, r, out):
    """Jaakkola-Jordan (Jensen) lower bound B_n on the ELBO of every row.

    ``B_n = sum_{i in A_n} sum_k r_jk [q_nk f(theta_i0 + theta_ik / r_jk)
    + (1 - q_nk) f(theta_i0)] - sum_{i not in A_n}(theta_i0 + sum_k theta_ik
    q_nk) - sum_k KL(Bern(q_nk) || Bern(mu_k))`` with f(u) = log(1 - e^-u),
    j the CSR entry (n, i), the r -> 0 limit ``r f(t0 + t / r) -> 0`` for
    t > 0, and f evaluated at ``max(theta_i0, LEAK_FLOOR)`` ([JJ], [SH],
    [Yan] supplement: LB-CDI). It is a lower bound on the
    true ELBO (User Guide, doc/modules/noisy_or.rst) whenever each ``r[j]`` lies on the
    simplex. Cost O(nnz K).

    Parameters
    ----------
    indptr, indices : int64 arrays of shape (B + 1,) and (nnz,)
        CSR structure of the binary batch.
    theta : float64 array of shape (D, K)
        Weights theta_ik >= 0.
    leak : float64 array of shape (D,)
        Leak theta_i0 >= 0.
    colsum : float64 array of shape (K,)
        ``theta.sum(axis=0)``.
    leak_sum : float
        ``leak.sum()``.
    logit_q : float64 array of shape (B, K)
        logit q(z_nk = 1).
    logit_prior : float64 array of shape (K,)
        logit mu_k.
    r : float64 array of shape (nnz, K)
        Jensen weights of the active entries, rows on the simplex.
    out : float64 array of shape (B,) (out)
        B_n in nats per row.

    Checked against the NumPy reference ``_reference_bound`` of
    tests/test_noisy_or_jaakkola_jordan.py (test_bound_matches_dense_reference)
    and against the true ELBO (test_bound_below_true_elbo,
    test_bound_exact_for_one_cause).
    """
    K = theta.shape[1]
    q_row = np.empty(K)
    active_sum = np.empty(K)
    rows = _bound_scratch(logit_prior)
    for n in range(logit_q.shape[0]):
        out[n] = _row_bound(n, indptr, indices, theta, leak, colsum, leak_sum,
                            logit_q, logit_prior, r, q_row, active_sum, rows)


@njit(nogil=True)
def _row_update_q(n, indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                  logit_prior, r, gain, active_sum):
    """Closed-form q update of row n given r; returns B_n at the new q.

    Parameters
    ----------
    n : int
        Row.
    indptr, indices, theta, leak, colsum, leak_sum, logit_q, logit_prior, r
        As in :func:`jj_update_q` (``logit_q[n]`` is overwritten).
    gain, active_sum : float64 arrays of shape (K,)
        Work space.

    Returns
    -------
    float
        B_n after the update (nats).
    """
    K = theta.shape[1]
    active_sum[:] = 0.0
    leak_active = 0.0
    for k in range(K):
        gain[k] = 0.0
    positive_const = 0.0
    for j in range(indptr[n], indptr[n + 1]):
        i = indices[j]
        leak_active += leak[i]
        t0 = max(leak[i], LEAK_FLOOR)
        em1 = math.expm1(t0)
        f0 = log1mexp(t0)
        rsum = 0.0
        for k in range(K):
            active_sum[k] += theta[i, k]
            rsum += r[j, k]
            gain[k] += _perspective(r[j, k], theta[i, k], em1)
        positive_const += f0 * rsum
    value = positive_const - (leak_sum - leak_active)
    for k in range(K):
        lk = gain[k] - (colsum[k] - active_sum[k])
        logit_q[n, k] = logit_prior[k] + lk
        value += sigmoid(logit_q[n, k]) * lk
        value -= kl_bernoulli_logits(logit_q[n, k], logit_prior[k])
    return value


@njit(nogil=True)
def _row_update_r(n, indptr, indices, theta, leak, logit_q, r, q_row, work,
                  max_iter, tol):
    """Update the weights r of every active entry of row n (in place).

    Parameters
    ----------
    n : int
        Row.
    indptr, indices, theta, leak, logit_q, r, max_iter, tol
        As in :func:`jj_update_r`.
    q_row : float64 array of shape (K,)
        Work space.
    work : float64 array of shape (4, K)
        Work space of :func:`_solve_r_entry`.
    """
    K = theta.shape[1]
    for k in range(K):
        q_row[k] = sigmoid(logit_q[n, k])
    for j in range(indptr[n], indptr[n + 1]):
        i = indices[j]
        _solve_r_entry(max(leak[i], LEAK_FLOOR), theta[i], q_row, r[j], work,
                       max_iter, tol)


@njit(nogil=True)
def jj_update_r(indptr, indices, theta, leak, logit_q, r, max_iter=200,
                tol=1e-12):
    """Optimal Jensen weights r for fixed q, entry by entry (in place).

    For one active entry (t0 = theta_i0, t_k = theta_ik) and ``sum_k r_k = 1``,
    the bound's positive term is ``f(t0) + sum_k q_k h_k(r_k)`` with
    ``h_k(r) = r [f(t0 + t_k / r) - f(t0)]`` concave and non-decreasing, so the
    maximization over the simplex is a separable concave problem. KKT:
    ``q_k h_k'(r_k) = lambda`` if r_k > 0 and ``q_k h_k'(0) <= lambda`` if
    r_k = 0, where

        h_k'(r) = phi(t_k / r),  phi(s) = f(t0 + s) - f(t0) - s f'(t0 + s),

    i.e. the stationarity condition ``q_k [f(t0 + t_k/r_k) - (t_k/r_k)
    f'(t0 + t_k/r_k)] + (1 - q_k) f(t0) = lambda'`` of the original
    objective with the shifted multiplier ``lambda = lambda' - f(t0)``.
    phi increases from 0 (s = 0) to -f(t0) (s = inf), so
    ``r_k(lambda) = t_k / phi^{-1}(lambda / q_k)`` (0 once lambda >=
    -q_k f(t0)) is decreasing in lambda and lambda is the unique root of
    ``sum_k r_k(lambda) = 1``. It is found by a bracketed Newton iteration on
    ``log sum_k r_k`` (a bisection at least every fifth step), each
    phi^{-1} by a bracketed Newton iteration in log s or s, warm started from
    the current weights. A cause with t_k / r_k >> 1 has h_k nearly linear,
    and r_k(lambda) then jumps across a bracket too narrow to split in double
    precision: the solve ends by interpolating the two bracket ends, which
    moves only such causes (any split of the remaining mass among them is
    optimal to rounding). The result is renormalized to the simplex and
    accepted only if the entry's bound does not decrease, so the update is
    monotone even where the solve is inexact. Causes with theta_ik = 0 or
    q_k = 0 get r = 0. This solves the stationarity (fixed-point) equations
    of [SH] to convergence rather than by plain fixed-point iteration.
    Cost O(nnz K) times the iteration counts (about 10 in typical entries).

    Parameters
    ----------
    indptr, indices, theta, leak, logit_q
        As in :func:`jj_bound`.
    r : float64 array of shape (nnz, K)
        Weights, updated in place (entries whose theta row is all zero are
        left unchanged: their bound does not depend on r).
    max_iter : int, default=200
        Maximum outer iterations per entry.
    tol : float, default=1e-12
        Tolerance on ``|sum_k r_k(lambda) - 1|`` before renormalization.

    Checked against a numerical maximization over the simplex in tests/test_nois
    y_or_jaakkola_jordan.py::test_r_update_is_optimal_for_fixed_q.
    """
    K = theta.shape[1]
    q_row = np.empty(K)
    work = np.empty((4, K))
    for n in range(logit_q.shape[0]):
        _row_update_r(n, indptr, indices, theta, leak, logit_q, r, q_row, work,
                      max_iter, tol)


def jj_e_step(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
              logit_prior, r, n_inner, tol, out):
    """Variational E-step: coordinate ascent on (q, r) for every row.

    Each sweep does the closed-form q update (:func:`jj_update_q`) and then
    the optimal r update (:func:`jj_update_r`) for the row; both are exact or
    guarded block maximizations, so B_n never decreases. A row stops after
    ``n_inner`` sweeps, or earlier once a q update gains less than
    ``tol * max(1, |B_n|)`` nats. Cost O(nnz K) per sweep (times the inner
    iteration counts of the r solve). Rows are independent: they are updated
    on threads (:func:`~skbinvi._numba.run_parts`, as many as
    ``NUMBA_NUM_THREADS``), in parts of ``_E_STEP_CHUNK`` rows, with the
    same result for any number of threads.

    Parameters
    ----------
    indptr, indices, theta, leak, colsum, leak_sum, logit_prior
        As in :func:`jj_bound`.
    logit_q : float64 array of shape (B, K)
        E-step state, updated in place.
    r : float64 array of shape (nnz, K)
        E-step state, updated in place (rows on the simplex, e.g. from
        :func:`jj_init_r`).
    n_inner : int
        Maximum number of sweeps per row.
    tol : float
        Relative stopping tolerance (0 runs all ``n_inner`` sweeps).
    out : float64 array of shape (B,) (out)
        B_n at the final (q, r), nats per row.

    Checked in tests/test_noisy_or_jaakkola_jordan.py::test_e_step_sweeps_never_
    decrease_the_bound (monotone, equal to alternating jj_update_q and
    jj_update_r).
    """
    n_rows = logit_q.shape[0]
    run_parts(_e_step_rows, [
        (lo, min(n_rows, lo + _E_STEP_CHUNK), indptr, indices, theta, leak, colsum,
         leak_sum, logit_q, logit_prior, r, n_inner, tol, out)
        for lo in range(0, n_rows, _E_STEP_CHUNK)])


@njit(nogil=True)
def _e_step_rows(start, stop, indptr, indices, theta, leak, colsum, leak_sum,
                 logit_q, logit_prior, r, n_inner, tol, out):
    """:func:`jj_e_step` on rows ``start`` to ``stop - 1``, with its own work space."""
    K = theta.shape[1]
    gain = np.empty(K)
    active_sum = np.empty(K)
    q_row = np.empty(K)
    work = np.empty((4, K))
    rows = _bound_scratch(logit_prior)
    for n in range(start, stop):
        previous = -math.inf
        for _ in range(n_inner):
            value = _row_update_q(n, indptr, indices, theta, leak, colsum,
                                  leak_sum, logit_q, logit_prior, r, gain,
                                  active_sum)
            if value - previous <= tol * max(1.0, abs(value)):
                break
            previous = value
            _row_update_r(n, indptr, indices, theta, leak, logit_q, r, q_row,
                          work, 200, 1e-12)
        out[n] = _row_bound(n, indptr, indices, theta, leak, colsum, leak_sum,
                            logit_q, logit_prior, r, q_row, active_sum, rows)


# --------------------------------------------------------------------------
# M-step
# --------------------------------------------------------------------------


@njit(nogil=True)
def _by_feature(indptr, indices, n_features):
    """CSC view of the CSR entries (counting sort, O(nnz + D)).

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure.
    n_features : int
        D.

    Returns
    -------
    fptr : int64 array of shape (D + 1,)
        Entries of feature i are ``entries[fptr[i]:fptr[i + 1]]``.
    entries : int64 array of shape (nnz,)
        CSR entry numbers j.
    rows : int64 array of shape (nnz,)
        Row n of each listed entry.
    """
    nnz = indices.shape[0]
    fptr = np.zeros(n_features + 1, dtype=np.int64)
    for j in range(nnz):
        fptr[indices[j] + 1] += 1
    for i in range(n_features):
        fptr[i + 1] += fptr[i]
    fill = fptr[:-1].copy()
    entries = np.empty(nnz, dtype=np.int64)
    rows = np.empty(nnz, dtype=np.int64)
    for n in range(indptr.shape[0] - 1):
        for j in range(indptr[n], indptr[n + 1]):
            p = fill[indices[j]]
            entries[p] = j
            rows[p] = n
            fill[indices[j]] += 1
    return fptr, entries, rows


@njit(nogil=True)
def _feature_objective(t0, t, p0, p1, entries, rows, q, r, n_inactive, c_inact):
    """Terms of sum_n B_n that depend on feature i's parameters (nats).

    ``O_i = sum_{j in i} sum_k r_jk [q_nk f(t0 + t_k / r_jk) + (1 - q_nk) f(t0)]
    - n_inactive t0 - sum_k t_k c_inact_k`` (weights r_jk <= R_TINY dropped).

    Parameters
    ----------
    t0 : float
        Leak, >= LEAK_FLOOR.
    t : float64 array of shape (K,)
        theta_i. >= 0.
    p0, p1 : int
        Range of the feature's entries in ``entries``/``rows``.
    entries, rows : int64 arrays
        From :func:`_by_feature`.
    q : float64 array of shape (B, K)
        Posterior probabilities.
    r : float64 array of shape (nnz, K)
        Jensen weights.
    n_inactive : float
        Number of rows with x_ni = 0.
    c_inact : float64 array of shape (K,)
        ``sum_{n: x_ni = 0} q_nk``.

    Returns
    -------
    float
    """
    K = t.shape[0]
    f0 = log1mexp(t0)
    val = -n_inactive * t0
    for k in range(K):
        val -= t[k] * c_inact[k]
    for p in range(p0, p1):
        j = entries[p]
        n = rows[p]
        a = 0.0
        for k in range(K):
            rk = r[j, k]
            if rk > R_TINY:
                qk = q[n, k]
                a += rk * (1.0 - qk)
                val += rk * qk * log1mexp(t0 + t[k] / rk)
        val += a * f0
    return val


@njit(nogil=True)
def _feature_stats(q, fptr, rows, c_inact):
    """``c_inact[i, k] = sum_{n: x_ni = 0} q_nk`` for every feature, O(nnz K + D K).

    Parameters
    ----------
    q : float64 array of shape (B, K)
        Posterior probabilities.
    fptr, rows : int64 arrays
        From :func:`_by_feature`.
    c_inact : float64 array of shape (D, K) (out)
    """
    D, K = c_inact.shape
    total = np.zeros(K)
    for n in range(q.shape[0]):
        for k in range(K):
            total[k] += q[n, k]
    for i in range(D):
        for k in range(K):
            c_inact[i, k] = total[k]
        for p in range(fptr[i], fptr[i + 1]):
            n = rows[p]
            for k in range(K):
                c_inact[i, k] -= q[n, k]
        for k in range(K):
            c_inact[i, k] = max(c_inact[i, k], 0.0)


@njit(nogil=True)
def _line_search(t0, t, d0, d, g0, g, cur, p0, p1, entries, rows, q, r,
                 n_inactive, c_inact, t_try, leak_min):
    """Backtracking along the projected path ``clip(x + alpha d, lb, ub)``
    (theta in [0, THETA_MAX], the leak at least ``leak_min``).

    Accepts the first alpha in 1, 1/2, ... (60 halvings) with a strict
    increase of the objective and the Armijo condition
    ``gain >= 1e-4 * g . (x_new - x)``.

    Parameters
    ----------
    t0, t : float and float64 array of shape (K,)
        Current point.
    d0, d : float and float64 array of shape (K,)
        Direction.
    g0, g : float and float64 array of shape (K,)
        Gradient at the current point.
    cur : float
        Objective at the current point.
    p0, p1, entries, rows, q, r, n_inactive, c_inact
        As in :func:`_feature_objective`.
    t_try : float64 array of shape (K,) (out)
        Accepted theta_i. (if any).
    leak_min : float
        Lower bound of the leak (>= LEAK_FLOOR).

    Returns
    -------
    t0_new : float
        Accepted leak (NaN if no step was accepted).
    value : float
        Objective at the accepted point.
    """
    K = t.shape[0]
    alpha = 1.0
    for _ in range(60):
        nt0 = max(t0 + alpha * d0, leak_min)
        lin = g0 * (nt0 - t0)
        for k in range(K):
            t_try[k] = min(max(t[k] + alpha * d[k], 0.0), THETA_MAX)
            lin += g[k] * (t_try[k] - t[k])
        val = _feature_objective(nt0, t_try, p0, p1, entries, rows, q, r,
                                 n_inactive, c_inact)
        gain = val - cur
        if gain > 0.0 and gain >= 1e-4 * lin:
            return nt0, val
        alpha *= 0.5
    return math.nan, cur


@njit(nogil=True)
def jj_m_step(indptr, indices, logit_q, r, theta, leak, logit_prior,
              n_newton=10, tol=1e-12, leak_min=LEAK_FLOOR, prior_smoothing=0.0):
    """M-step: maximize sum_n B_n over theta in [0, THETA_MAX], leak >= leak_min, mu.

    mu has the closed form ``mu_k = (mean_n q_nk + a) / (1 + a)`` with
    ``a = prior_smoothing`` (clipped to [PRIOR_CLIP, 1 - PRIOR_CLIP]): the
    maximizer of ``sum_n B_n + a B sum_k log mu_k``, the MAP estimate under a
    Beta(1 + a B, 1) prior on each mu_k (``a = 0``: maximum likelihood).
    The bound separates over features: for feature i with entries
    j = (n, i), x_ni = 1,

        O_i(t0, t) = sum_j [ a_j f(t0) + sum_k r_jk q_nk f(t0 + t_k / r_jk) ]
                     - (B - n_i) t0 - sum_k t_k (sum_n q_nk - sum_{j} q_nk),

    ``a_j = sum_k r_jk (1 - q_nk)``, jointly concave (f concave of an affine
    argument). Its Hessian is an arrow matrix: with u_jk = t0 + t_k / r_jk,
    ``H_00 = sum_j [a_j f''(t0) + sum_k r q f''(u)]``,
    ``H_0k = sum_j q_nk f''(u_jk)``, ``H_kk = sum_j q_nk f''(u_jk) / r_jk``
    and ``H_kl = 0``, so a Newton direction costs O(n_i K) (Schur complement
    on t0). Each feature takes up to ``n_newton`` projected Newton steps
    (variables at their bound with an outward gradient held fixed, a 1e-10
    relative Levenberg shift), each with a projected backtracking (Armijo)
    line search and a diagonally scaled projected gradient step as fallback;
    a step is taken only if it increases O_i, so the total bound never
    decreases. Features active in no row get the exact maximizer
    (theta_i. = 0, leak at ``leak_min``). Cost O(nnz K + D K) per Newton
    iteration: the inactive rows enter only through the statistics
    ``sum_n q_nk`` ([Yan] supplement, LB-CDI; [SH] for the bound).

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of the B rows (the full data or a batch).
    logit_q : float64 array of shape (B, K)
        E-step posteriors.
    r : float64 array of shape (nnz, K)
        E-step Jensen weights.
    theta : float64 array of shape (D, K)
        Updated in place.
    leak : float64 array of shape (D,)
        Updated in place.
    logit_prior : float64 array of shape (K,)
        Updated in place with logit((mean_n q_nk + a) / (1 + a)).
    n_newton : int, default=10
        Maximum Newton iterations per feature.
    tol : float, default=1e-12
        A feature stops once a step gains less than ``tol * (1 + |O_i|)``.
    leak_min : float, default=LEAK_FLOOR
        Lower bound of the leak. Without one the maximizer puts the leak of a
        feature absent from these rows, or fully explained by the causes, at
        the floor, and each later row with that word pays about
        ``-log(LEAK_FLOOR) = 23`` nats; the estimator passes
        ``-log(1 - 1 / (B + 1))``, the leak of a word seen once in B + 1
        rows, the clip of its initial leak. A leak given below ``leak_min``
        is raised to it first.
    prior_smoothing : float, default=0.0
        ``a`` >= 0 above, in pseudo-documents per document.

    Returns
    -------
    float
        Increase of ``sum_i O_i`` (nats, >= 0; the mu part is not included).

    Checked in tests/test_noisy_or_jaakkola_jordan.py
    (test_m_step_never_decreases_the_bound,
    test_m_step_reaches_the_constrained_maximum: against a generic constrained
    optimizer).
    """
    D, K = theta.shape
    B = logit_q.shape[0]
    q = np.empty((B, K))
    for n in range(B):
        for k in range(K):
            q[n, k] = sigmoid(logit_q[n, k])
    if B > 0:
        for k in range(K):
            mean = 0.0
            for n in range(B):
                mean += q[n, k]
            mean = (mean / B + prior_smoothing) / (1.0 + prior_smoothing)
            mean = min(max(mean, PRIOR_CLIP), 1.0 - PRIOR_CLIP)
            logit_prior[k] = math.log(mean) - math.log1p(-mean)
    fptr, entries, rows = _by_feature(indptr, indices, D)
    c_inact = np.empty((D, K))
    _feature_stats(q, fptr, rows, c_inact)
    t = np.empty(K)
    g = np.empty(K)
    hk = np.empty(K)
    b = np.empty(K)
    d = np.empty(K)
    t_try = np.empty(K)
    free = np.empty(K, dtype=np.bool_)
    total_gain = 0.0
    for i in range(D):
        p0 = fptr[i]
        p1 = fptr[i + 1]
        n_inactive = float(B - (p1 - p0))
        ci = c_inact[i]
        if p1 == p0:
            # linear objective -B t0 - sum_k t_k c_k: maximized at the bounds
            t0 = max(leak[i], leak_min)
            before = -n_inactive * t0
            after = -n_inactive * leak_min if B > 0 else before
            if B > 0:
                leak[i] = leak_min
            for k in range(K):
                before -= theta[i, k] * ci[k]
                if ci[k] > 0.0:
                    theta[i, k] = 0.0
                after -= theta[i, k] * ci[k]
            total_gain += after - before
            continue
        t0 = max(leak[i], leak_min)
        for k in range(K):
            t[k] = max(theta[i, k], 0.0)
        start = _feature_objective(t0, t, p0, p1, entries, rows, q, r,
                                   n_inactive, ci)
        cur = start
        for _ in range(n_newton):
            # gradient and arrow Hessian
            fp0 = dlog1mexp(t0)
            fpp0 = -fp0 * (1.0 + fp0)
            g0 = -n_inactive
            h00 = 0.0
            for k in range(K):
                g[k] = -ci[k]
                hk[k] = 0.0
                b[k] = 0.0
            for p in range(p0, p1):
                j = entries[p]
                n = rows[p]
                a = 0.0
                for k in range(K):
                    rk = r[j, k]
                    if rk > R_TINY:
                        qk = q[n, k]
                        a += rk * (1.0 - qk)
                        fp = dlog1mexp(t0 + t[k] / rk)
                        fpp = -fp * (1.0 + fp)
                        g0 += rk * qk * fp
                        g[k] += qk * fp
                        h00 += rk * qk * fpp
                        b[k] += qk * fpp
                        hk[k] += qk * fpp / rk
                g0 += a * fp0
                h00 += a * fpp0
            scale = abs(h00)
            for k in range(K):
                scale = max(scale, abs(hk[k]))
            shift = 1e-10 * scale + 1e-300
            h00 -= shift
            for k in range(K):
                hk[k] -= shift
            # projected Newton direction on the free variables
            free0 = not (t0 <= leak_min and g0 < 0.0)
            for k in range(K):
                free[k] = not ((t[k] <= 0.0 and g[k] < 0.0)
                               or (t[k] >= THETA_MAX and g[k] > 0.0))
            d0 = 0.0
            if free0:
                schur = h00
                rhs = -g0
                for k in range(K):
                    if free[k]:
                        schur -= b[k] * b[k] / hk[k]
                        rhs += b[k] * g[k] / hk[k]
                if schur < 0.0:
                    d0 = rhs / schur
            for k in range(K):
                d[k] = (-g[k] - b[k] * d0) / hk[k] if free[k] else 0.0
            new_t0, val = _line_search(t0, t, d0, d, g0, g, cur, p0, p1, entries,
                                       rows, q, r, n_inactive, ci, t_try, leak_min)
            if math.isnan(new_t0):
                # fallback: diagonally scaled projected gradient
                d0 = g0 / abs(h00)
                for k in range(K):
                    d[k] = g[k] / abs(hk[k])
                new_t0, val = _line_search(t0, t, d0, d, g0, g, cur, p0, p1,
                                           entries, rows, q, r, n_inactive, ci,
                                           t_try, leak_min)
                if math.isnan(new_t0):
                    break
            gain = val - cur
            t0 = new_t0
            for k in range(K):
                t[k] = t_try[k]
            cur = val
            if gain <= tol * (1.0 + abs(cur)):
                break
        leak[i] = t0
        for k in range(K):
            theta[i, k] = t[k]
        total_gain += cur - start
    return total_gain


# --------------------------------------------------------------------------
# NumPy glue
# --------------------------------------------------------------------------


def jj_init_r(indptr, indices, theta):
    """Initial Jensen weights, proportional to the weights of each active feature.

    ``r[j, k] = theta_ik / sum_l theta_il`` for entry j = (n, i) (uniform 1/K
    if the row of theta is zero). With q = 1 these weights make the bound
    tight: every ``theta_ik / r_jk`` equals ``sum_l theta_il``.

    Parameters
    ----------
    indptr : int64 array of shape (B + 1,)
        Unused (the entries are read from ``indices``); kept for symmetry.
    indices : int64 array of shape (nnz,)
        Feature of each CSR entry.
    theta : float64 array of shape (D, K)
        Weights.

    Returns
    -------
    r : float64 array of shape (nnz, K)
        Rows on the simplex.
    """
    theta = np.asarray(theta, dtype=np.float64)
    K = theta.shape[1]
    rows = np.maximum(theta, 0.0)
    total = rows.sum(axis=1, keepdims=True)
    weights = np.where(total > 0, rows / np.where(total > 0, total, 1.0), 1.0 / K)
    return np.ascontiguousarray(weights[np.asarray(indices, dtype=np.int64)])


__all__ = [
    "LEAK_FLOOR",
    "jj_bound",
    "jj_e_step",
    "jj_init_r",
    "jj_m_step",
    "jj_update_r",
]
