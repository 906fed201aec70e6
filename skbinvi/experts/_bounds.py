"""ELBO pieces of the Bayesian mixture of experts (BMEM) without the diversity prior.

Model (user guide :ref:`experts`; [Xie] main paper and supplement section 2).
K experts, inputs x_n in R^p (rows of X), labels y_n in {0, 1}:

    z_n ~ Categorical(softmax_k(eta_k^T x_n)),
    y_n | z_n = k ~ Bernoulli(sigmoid(beta_k^T x_n)),

and every weight vector a (each beta_k and each eta_k) is a = g u with a
magnitude g > 0 and a direction u on the unit sphere S^{p-1}.

Variational family (mean field; [Xie] supplement Eq. 9):
q(u) = vMF(u | mu_hat, kappa_hat), q(g) = Gamma(g | shape r, rate s) for every
beta_k and eta_k, q(z_n) = Categorical(phi_n). Under q, g and u are
independent, so with A = A_p(kappa_hat) (:func:`~skbinvi.experts._vmf.bessel_ratio`)

    E[a]     = E[g] E[u]          = (r / s) A mu_hat,
    E[a a^T] = E[g^2] E[u u^T]
             = ((r + r^2) / s^2) ((A / kappa_hat) I
                                  + (1 - p A / kappa_hat) mu_hat mu_hat^T)

(:func:`~skbinvi.experts._vmf.vmf_second_moment`). For a projection
t = a^T x this gives E[t] = (r/s) A mu_hat^T x and
E[t^2] = ((r + r^2)/s^2) ((A/kappa_hat) ||x||^2 + (1 - p A/kappa_hat) (mu_hat^T x)^2)
(:func:`projection_moments`): O(n K p) for dense or CSR X, no p x p matrix.

Contents
--------
1. [JJ] bound on log sigmoid and the expert term (:func:`jj_lambda`,
   :func:`jj_log_sigmoid_lower_bound`, :func:`expected_log_sigmoid_bound`,
   :func:`expert_bound`).
2. [Bou] + [JJ] upper bound on the log-sum-exp of the gate
   (:func:`log1pexp_upper_bound`, :func:`logsumexp_upper_bound`,
   :func:`optimal_gate_auxiliaries`, :func:`expected_logsumexp_upper_bound`,
   :func:`gate_bound`).
3. The lower bound on E_q[log p(y, z | X, beta, eta)] + H[q(z)]
   (:func:`likelihood_bound`, :func:`optimal_responsibilities`).
4. KL of q to independent vMF x Gamma priors (:func:`gamma_kl`,
   :func:`gamma_entropy`, :func:`independent_prior_kl`).
5. The whole independent-prior ELBO (:func:`independent_prior_elbo`) and
   prediction at posterior means (:func:`predict_proba_posterior_mean`).
6. A valid upper bound on E_q[log Z_i] of the Type II mutual angular
   Bayesian network (MABN) prior, replacing the supplement's Lemma 1
   (:func:`mabn_log_normalizer_upper_bound`, :func:`mabn_expected_energy`,
   :func:`mabn_expected_log_prior_lower_bound`).

All values are in nats. ``tests/test_experts_bounds.py`` checks every
inequality here against exact values and Monte Carlo over q. The NumPy
functions of items 1-6 that no fit calls (the expert, gate and likelihood
bounds as functions of q, the KLs, the MABN bound pieces, the ELBO and
:func:`predict_proba_posterior_mean`) are the tests' reference
implementations and live in tests/_reference/experts.py; this module keeps
the fused kernels the fit runs and the helpers they share.

Corrections to the sources (see also the user guide, "Errors in the printed equations")
----------------------------------------------------------
* Supplement Eqs. 15 and 16 write beta_k^T z_n; it is beta_k^T x_n.
* Supplement Eq. 17 drops the factor (2 y_n - 1) of the linear term; the
  correct term is ((2 y_n - 1) E[beta_k]^T x_n - e_nk) / 2. Without it the
  "bound" exceeds E_q[log sigmoid] for y_n = 0 (tested).
* Supplement Eq. 7 omits log C_p(kappa_hat) from E_q[log q(a~)]; it depends
  on kappa_hat and must be kept (we use :func:`~skbinvi.experts._vmf.vmf_kl`).
* Supplement Eq. 6, first line, writes q(g_i) for the prior p(g_i).
* Supplement item (VII) is the [JJ] bound (attributed there to [Bou]).
* The closed form of c_n in the user guide is correct (derivation in
  :func:`optimal_gate_auxiliaries`).
* Supplement Lemma 1 (Eq. 5) is not an upper bound. Its item (VI) applied
  to an integral, log int exp(x) <= gamma + int log(1 + exp(x - gamma)), does
  not follow from the discrete [Bou] bound and is false for measures of total
  mass m < 1 (constant x: the right side tends to -inf as gamma -> -inf); the
  unit sphere of R^p has area m < 1 for p >= 19. [D] Read literally, Eq. 5 is
  gamma (1 - m/2) + m lam(xi) gamma^2 + m [log(1 + e^{-xi}) + xi/2
  - lam(xi) xi^2] + m lam(xi) kappa^2 ||s||^2; minimizing over gamma and
  letting xi -> inf (lam ~ 1/(4 xi)) it behaves like
  xi (m - 1)/m + m kappa^2 ||s||^2 / (4 xi), which tends to -inf when m < 1,
  below log Z_i >= log m - kappa ||s|| (tested). For m > 1 its minimum is
  about kappa ||s|| sqrt(m - 1), far above log Z_i ~ kappa ||s||. Item (X)
  also uses the area of the sphere of R^{p+1} (2 pi^{(p+1)/2} /
  Gamma((p+1)/2)) for that of R^p, and bounds (e_1^T y)^2 by 1. We use the
  chord bound [D] of :func:`mabn_log_normalizer_upper_bound` instead.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016 (main paper Lemma 1; supplement Eqs. 5-18).
[JJ] T. Jaakkola, M. Jordan, "Bayesian parameter estimation via variational
methods", Statistics and Computing 10 (2000) 25-37.
[Bou] G. Bouchard, "Efficient bounds for the softmax function, applications
to inference in hybrid models", NIPS workshop 2007.
[D] our derivations, written out in the docstrings and tested.
"""

import math
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import prange
from scipy import special
from sklearn.utils import check_array

from .._numba import njit

__all__ = [
    "VMFGammaParams",
    "expected_log_sigmoid_bound",
    "expected_logsumexp_upper_bound",
    "jj_lambda",
    "likelihood_pieces_from_moments",
    "optimal_gate_auxiliaries",
    "optimal_responsibilities",
]

# below this |xi|, lam(xi) = 1/8 - xi^2/96 + ... is 1/8 to double precision
_LAM_SMALL = 1e-8
# tolerance on ||E u_k|| <= 1 for MABN mean directions
_MEAN_NORM_TOL = 1e-9


# ---------------------------------------------------------------------------
# parameter containers and checks
# ---------------------------------------------------------------------------


class VMFGammaParams(NamedTuple):
    """Variational parameters of K vectors a_k = g_k u_k ([Xie] supplement Eq. 9).

    q(u_k) = vMF(u_k | mu[k], kappa[k]), q(g_k) = Gamma(g_k | shape r[k], rate s[k]).

    Attributes
    ----------
    mu : array_like of shape (K, p)
        Mean directions mu_hat_k, unit rows.
    kappa : float or array_like of shape (K,)
        Concentrations kappa_hat_k >= 0 (a scalar is shared, as in the supplement).
    r : float or array_like of shape (K,)
        Gamma shapes, > 0.
    s : float or array_like of shape (K,)
        Gamma rates, > 0.
    """

    mu: np.ndarray
    kappa: np.ndarray
    r: np.ndarray
    s: np.ndarray


def _positive(x, name, K):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim > 1 or (x.ndim == 1 and x.shape[0] not in (1, K)):
        raise ValueError(f"{name} must be a scalar or of shape ({K},); got {x.shape}.")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {x!r}.")
    return np.broadcast_to(x, (K,)).astype(np.float64)


def _check_X(X):
    X = check_array(X, accept_sparse="csr", dtype=np.float64)
    if sp.issparse(X):
        X = X.tocsr()
    return X


def _check_y(y, n):
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},); got {y.shape}.")
    yf = y.astype(np.float64)
    if not np.all((yf == 0.0) | (yf == 1.0)):
        raise ValueError("y must contain only 0 and 1.")
    return yf


def _check_phi(phi, n, K):
    phi = np.asarray(phi, dtype=np.float64)
    if phi.shape != (n, K):
        raise ValueError(f"phi must have shape ({n}, {K}); got {phi.shape}.")
    if not np.all(np.isfinite(phi)) or np.any(phi < 0) \
            or np.any(np.abs(phi.sum(axis=1) - 1.0) > 1e-8):
        raise ValueError("the rows of phi must be probability vectors.")
    return phi


# ---------------------------------------------------------------------------
# moments of projections
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# 1. Jaakkola-Jordan bound, expert term
# ---------------------------------------------------------------------------


def jj_lambda(xi):
    """lam(xi) = (sigmoid(xi) - 1/2) / (2 xi) = tanh(xi/2) / (4 xi), lam(0) = 1/8 [JJ].

    Parameters
    ----------
    xi : float or array_like
        Variational parameter (any real; lam is even).

    Returns
    -------
    lam : float or ndarray of float64
        In (0, 1/8], decreasing in |xi|; ~1/(4 |xi|) for large |xi|.
        The supplement writes it as -(1/2 - g(xi)) / (2 xi).
    """
    x = np.abs(np.asarray(xi, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x > _LAM_SMALL, np.tanh(0.5 * x) / (4.0 * x), 0.125)
    return out[()] if out.ndim == 0 else out


def expected_log_sigmoid_bound(mean_t, second_t, xi=None):
    """Lower bound on E[log sigmoid(t)] from the first two moments of t [JJ].

    Parameters
    ----------
    mean_t : array_like
        E[t].
    second_t : array_like
        E[t^2] (same shape), >= E[t]^2.
    xi : array_like or None, default=None
        Variational parameters (same shape). None: the optimal xi = sqrt(E[t^2]).

    Returns
    -------
    bound : ndarray of float64
        log sigmoid(xi) + (E[t] - xi)/2 - lam(xi) (E[t^2] - xi^2) <= E[log sigmoid(t)],
        in nats (the [JJ] bound is pointwise in t and linear in (t, t^2)).
    xi : ndarray of float64
        The xi used.

    Notes
    -----
    [D] d/dxi of the bound is -lam'(xi) (E[t^2] - xi^2) (the terms from
    log sigmoid(xi), -xi/2 and 2 xi lam(xi) cancel), and lam' < 0 for
    xi > 0, so the bound increases up to xi^2 = E[t^2] and decreases after:
    xi = sqrt(E[t^2]) is the maximizer ([JJ]; the supplement's e_nk). There the
    bound is log sigmoid(xi) + (E[t] - xi)/2.
    """
    mean_t = np.asarray(mean_t, dtype=np.float64)
    second_t = np.asarray(second_t, dtype=np.float64)
    if xi is None:
        xi = np.sqrt(np.maximum(second_t, 0.0))
        value = special.log_expit(xi) + 0.5 * (mean_t - xi)
    else:
        xi = np.asarray(xi, dtype=np.float64)
        value = (special.log_expit(xi) + 0.5 * (mean_t - xi)
                 - jj_lambda(xi) * (second_t - xi * xi))
    return value, xi


# ---------------------------------------------------------------------------
# 2. Gate: Bouchard + JJ
# ---------------------------------------------------------------------------


def _gate_value(mean_t, var_t, c, d):
    w = var_t + (mean_t - c[:, None]) ** 2  # E[(t - c)^2]
    terms = (-special.log_expit(d) + 0.5 * (mean_t - c[:, None] + d)
             + jj_lambda(d) * (w - d * d))
    return c + terms.sum(axis=1)


def _c_given_d(mean_t, d):
    K = mean_t.shape[1]
    lam = jj_lambda(d)
    num = 0.5 * K - 1.0 + 2.0 * np.sum(lam * mean_t, axis=1)
    return num / (2.0 * lam.sum(axis=1))


def _d_given_c(mean_t, var_t, c):
    return np.sqrt(var_t + (mean_t - c[:, None]) ** 2)


def _gate_moments(mean_t, second_t):
    mean_t = np.asarray(mean_t, dtype=np.float64)
    second_t = np.asarray(second_t, dtype=np.float64)
    if mean_t.ndim != 2 or mean_t.shape != second_t.shape:
        raise ValueError("mean_t and second_t must have the same shape (n, K); got "
                         f"{mean_t.shape} and {second_t.shape}.")
    var_t = np.maximum(second_t - mean_t * mean_t, 0.0)
    return mean_t, var_t


def optimal_gate_auxiliaries(mean_t, second_t, n_rounds=50, tol=1e-10, c_init=None):
    """Optimal (c_n, d_nj) of the expected [Bou] + [JJ] log-sum-exp bound.

    Parameters
    ----------
    mean_t : array_like of shape (n, K)
        m_nj = E[t_nj] (for the gate, E[eta_j]^T x_n).
    second_t : array_like of shape (n, K)
        E[t_nj^2] (for the gate, x_n^T E[eta_j eta_j^T] x_n).
    n_rounds : int, default=50
        Maximum number of iterations.
    tol : float, default=1e-10
        Stop when max_n |c_n change| <= tol (1 + |c_n|).
    c_init : array_like of shape (n,) or None
        Starting c (warm start); None: the c-step at d = 0 (lam = 1/8),
        c = 2 - 4/K + mean_j m_nj.

    Returns
    -------
    c : ndarray of float64 of shape (n,)
    d : ndarray of float64 of shape (n, K)
        d_nj = sqrt(E[(t_nj - c_n)^2]), optimal for the returned c.

    Notes
    -----
    K >= 2: Newton's method on h'(c) = 0 for the convex profile
    h(c) = min_d B(c, d) below, safeguarded by bisection on a bracket with
    h'(lo) < 0 < h'(hi) (:func:`_gate_bracket`), one row at a time in a
    Numba kernel (:func:`_gate_newton_rows`); quadratic convergence (about 5
    iterations to 1e-10 on typical rows; rows where h is flat to
    e^{-|c - m_j|}, e.g. nearly deterministic t split evenly around c, fall
    back to bisection, at no cost in the bound's value). For K = 1 the
    infimum (E[t], log softmax = 0) is only approached as c -> -inf:
    ``n_rounds`` coordinate steps (:func:`_gate_coordinate`). The NumPy
    reference of the Newton iteration and plain coordinate descent (the
    d-step and c-step below, linear convergence, a factor ~0.8 per round)
    are in tests/_reference/experts.py, checked against this solver in
    tests/test_experts_bounds.py.

    [D] The expected bound for row n (:func:`expected_logsumexp_upper_bound`) is

        B(c, d) = c + sum_j [-log sigmoid(d_j) + (m_j - c + d_j)/2
                             + lam(d_j) (w_j(c) - d_j^2)],
        w_j(c) = E[(t_j - c)^2] = v_j - 2 c m_j + c^2,  v_j = E[t_j^2].

    d-step: as in :func:`expected_log_sigmoid_bound`, dB/dd_j =
    lam'(d_j) (w_j - d_j^2), so d_j^2 = w_j(c) = E[(eta_j^T x_n - c_n)^2]
    (the user guide's formula, correct). c-step: B is a convex quadratic in c for fixed
    d (dB/dc = 1 - K/2 + 2 sum_j lam(d_j) (c - m_j), d2B/dc2 = 2 sum_j lam_j > 0),
    minimized at

        c = ((K/2 - 1) + 2 sum_j lam(d_j) m_j) / (2 sum_j lam(d_j)),

    which is the user guide's formula (correct). Each step decreases B. Moreover
    the profile h(c) = min_d B(c, d) = c (1 - K/2)
    + sum_j [log(2 cosh(sqrt(w_j(c))/2)) + m_j/2] is convex in c
    (log 2 cosh(x/2) is convex and increasing for x >= 0, and
    sqrt(w_j(c)) = ||(c - m_j, sd_j)|| is convex), so the fixed point is the
    global minimizer of B. Its derivatives (envelope theorem) are
    h'(c) = 1 - K/2 + 2 sum_j lam_j (c - m_j) and
    h''(c) = 2 sum_j [lam_j + (lam'(d_j)/d_j) (c - m_j)^2] <= 2 sum_j lam_j,
    so the coordinate step c - h'/(2 sum lam) is a shortened Newton step.
    Cost O(n K) per iteration.
    """
    mean_t, var_t = _gate_moments(mean_t, second_t)
    c = _gate_start(mean_t, c_init)
    if mean_t.shape[1] == 1:
        return _gate_coordinate(mean_t, var_t, c, n_rounds, tol)
    lo, hi = _gate_bracket(mean_t, var_t)
    c = _gate_newton_rows(np.ascontiguousarray(mean_t), np.ascontiguousarray(var_t),
                          np.clip(c, lo, hi), lo, hi, int(n_rounds), float(tol))
    return c, _d_given_c(mean_t, var_t, c)


def _gate_start(mean_t, c_init):
    """The starting c (n,): ``c_init`` (copied) or the c-step at d = 0
    (lam = 1/8), c = 2 - 4/K + mean_j m_nj."""
    n, K = mean_t.shape
    if c_init is None:
        return 2.0 - 4.0 / K + mean_t.mean(axis=1)
    return np.broadcast_to(np.asarray(c_init, dtype=np.float64), (n,)).copy()


def _gate_coordinate(mean_t, var_t, c, n_rounds, tol):
    """(c, d) after up to ``n_rounds`` alternating d-steps and c-steps from c."""
    for _ in range(int(n_rounds)):
        d = _d_given_c(mean_t, var_t, c)
        c_new = _c_given_d(mean_t, d)
        done = np.max(np.abs(c_new - c) / (1.0 + np.abs(c)), initial=0.0) <= tol
        c = c_new
        if done:
            break
    return c, _d_given_c(mean_t, var_t, c)


def _gate_bracket(mean_t, var_t):
    """(lo, hi) (n,) with h'(lo) < 0 < h'(hi) for K >= 2 [D]."""
    K = mean_t.shape[1]
    lo = mean_t.min(axis=1) - 1.0  # all 2 lam_j (c - m_j) < 0: h' < 1 - K/2 <= 0
    # [D] for delta = c - max_j m_j >= max(log(4K), sqrt(K) max_j sd_j), every
    # term 2 lam_j (c - m_j) = tanh(d_j/2) (c - m_j)/(2 d_j) >= (1 - 1/K)/2
    # (tanh(d/2) >= 1 - 2 e^{-delta}, (c - m)/d >= 1 - sd^2/(2 delta^2)), so
    # h' >= 1 - K/2 + (K - 1)/2 = 1/2 > 0
    hi = (mean_t.max(axis=1) + 1.0
          + np.log(4.0 * K) + np.sqrt(K * var_t.max(axis=1)))
    return lo, hi


@njit(inline="always")
def _gate_derivatives(mean_i, var_i, ci, d, e, lam):
    """h'(c), h''(c) of one row (K >= 2); fills d_j = sqrt(w_j(c)), e_j = exp(-d_j)
    and lam_j = lam(d_j) (K,) at this c, for the likelihood pieces of
    :func:`_objective_range`."""
    K = mean_i.shape[0]
    g = 1.0 - 0.5 * K
    H = 0.0
    for j in range(K):
        diff = ci - mean_i[j]
        dj = math.sqrt(var_i[j] + diff * diff)
        ej = math.exp(-dj)
        if dj < 1e-2:
            d2 = dj * dj
            lj = 0.125 - d2 / 96.0
            lpx = -1.0 / 48.0 + d2 / 240.0
        else:
            one_p = 1.0 + ej
            th = (1.0 - ej) / one_p
            lj = th / (4.0 * dj)
            lpx = (2.0 * dj * ej / (one_p * one_p) - th) / (4.0 * dj * dj * dj)
        d[j] = dj
        e[j] = ej
        lam[j] = lj
        g += 2.0 * lj * diff
        H += 2.0 * (lj + lpx * diff * diff)
    return g, H


@njit(error_model="numpy")
def _gate_newton_row(mean_i, var_i, ci, la, ha, n_rounds, tol, gain_tol, d, e, lam):
    """The safeguarded Newton iteration of :func:`_gate_newton_rows` for one row.

    Returns the last c at which the derivatives were evaluated: the step from
    it is below tol (1 + |c|) when the row converged. ``d``, ``e``, ``lam``
    (K,) hold d_j, exp(-d_j) and lam(d_j) at that c, so that the caller does
    not evaluate them again.
    """
    # n_rounds Newton steps, then one more evaluation at the last c: one call
    # site of _gate_derivatives (each inlined copy costs compile time)
    last = n_rounds if n_rounds > 0 else 0
    for it in range(last + 1):
        g, H = _gate_derivatives(mean_i, var_i, ci, d, e, lam)
        if it == last:
            break
        if H > 0.0 and g * g <= 2.0 * gain_tol * H:
            return ci
        if g < 0.0:
            la = ci
        elif g > 0.0:
            ha = ci
        scale = tol * (1.0 + abs(ci))
        if g == 0.0:
            return ci
        ok = False
        cand = ci
        if H > 0.0:
            cand = ci - g / H
            ok = (cand > la and cand < ha) or abs(cand - ci) <= scale
        c_new = cand if ok else 0.5 * (la + ha)
        if not abs(c_new - ci) > scale:
            return ci
        ci = c_new
    return ci


@njit
def _gate_newton_rows(mean_t, var_t, c, lo, hi, n_rounds, tol):
    """Safeguarded Newton on h'(c) = 0, one row at a time (K >= 2).

    The iteration of :func:`optimal_gate_auxiliaries` with the derivatives
    h'(c), h''(c) of :func:`_gate_derivatives`, fused per row (one exp per
    row and term per iteration, no (n, K) temporaries); a row stops as soon
    as its step is below tol (1 + |c|) (and keeps the c before that step).
    Checked against the vectorized NumPy reference
    (``gate_auxiliaries_reference`` of tests/_reference/experts.py) in
    ``tests/test_experts_bounds.py::test_gate_newton_kernel_matches_numpy``.
    """
    n, K = mean_t.shape
    out = np.empty(n)
    d, e, lam = np.empty(K), np.empty(K), np.empty(K)
    for i in range(n):
        out[i] = _gate_newton_row(mean_t[i], var_t[i], c[i], lo[i], hi[i], n_rounds,
                                  tol, 0.0, d, e, lam)
    return out


def expected_logsumexp_upper_bound(mean_t, second_t, c=None, d=None, n_rounds=50,
                                   tol=1e-10, c_init=None):
    """Upper bound on E[log sum_j exp(t_nj)] from the moments of t [Bou, JJ].

    Parameters
    ----------
    mean_t : array_like of shape (n, K)
        E[t_nj].
    second_t : array_like of shape (n, K)
        E[t_nj^2].
    c : array_like of shape (n,) or None
        [Bou] parameters. None: optimal (given ``d`` if provided, else jointly
        by :func:`optimal_gate_auxiliaries`).
    d : array_like of shape (n, K) or None
        [JJ] parameters. None: optimal given c, d_nj = sqrt(E[(t_nj - c_n)^2]).
    n_rounds, tol, c_init
        Passed to :func:`optimal_gate_auxiliaries` when both c and d are None
        (``c_init``: warm start, e.g. the c of the previous evaluation).

    Returns
    -------
    bound : ndarray of float64 of shape (n,)
        c_n + sum_j [-log sigmoid(d_nj) + (E t_nj - c_n + d_nj)/2
        + lam(d_nj) (E[(t_nj - c_n)^2] - d_nj^2)] >= E[log sum_j exp(t_nj)],
        in nats ([Xie] supplement Eq. 13, with "=" read as ">="; every bound
        is pointwise in t and linear in t, t^2).
    c : ndarray of shape (n,)
    d : ndarray of shape (n, K)
    """
    mean_t, var_t = _gate_moments(mean_t, second_t)
    n = mean_t.shape[0]
    if c is None and d is None:
        c, d = optimal_gate_auxiliaries(mean_t, second_t, n_rounds, tol, c_init)
    elif c is None:
        d = np.asarray(d, dtype=np.float64)
        c = _c_given_d(mean_t, d)
    else:
        c = np.broadcast_to(np.asarray(c, dtype=np.float64), (n,)).copy()
        if d is None:
            d = _d_given_c(mean_t, var_t, c)
    d = np.asarray(d, dtype=np.float64)
    if d.shape != mean_t.shape:
        raise ValueError(f"d must have shape {mean_t.shape}; got {d.shape}.")
    return _gate_value(mean_t, var_t, c, d), c, d


# ---------------------------------------------------------------------------
# 3. Likelihood bound, responsibilities
# ---------------------------------------------------------------------------


def optimal_responsibilities(expert, gate_linear):
    """phi_nk proportional to exp(E[eta_k]^T x_n + expert_nk) (softmax over k).

    Parameters
    ----------
    expert : array_like of shape (n, K)
        Expert bounds from :func:`expert_bound`.
    gate_linear : array_like of shape (n, K)
        E[eta_k]^T x_n from :func:`gate_bound`.

    Returns
    -------
    phi : ndarray of float64 of shape (n, K)
        Rows on the simplex.

    Notes
    -----
    [D] For row n the bound is sum_k phi_nk a_nk + H(phi_n) + (terms free of
    phi) with a_nk = expert_nk + gate_linear_nk; by Gibbs' inequality
    sum_k phi_k a_k + H(phi) <= log sum_k e^{a_k}, with equality at
    phi = softmax(a). The log-sum-exp bound does not depend on phi.
    """
    a = np.asarray(expert, dtype=np.float64) + np.asarray(gate_linear, dtype=np.float64)
    return special.softmax(a, axis=1)


def likelihood_pieces_from_moments(y, mean_b, second_b, mean_e, second_e, phi=None,
                                   xi=None, c=None, d=None, n_rounds=50, tol=1e-10,
                                   c_init=None):
    """The likelihood bound's pieces from the projection moments of any q.

    Parameters
    ----------
    y : ndarray of shape (n,)
        Labels in {0, 1} (float).
    mean_b, second_b : ndarray of shape (n, K)
        E[beta_k^T x_n] and E[(beta_k^T x_n)^2] under q.
    mean_e, second_e : ndarray of shape (n, K)
        The same for the gate vectors eta_k.
    phi, xi, c, d : ndarray or None
        Auxiliaries to hold fixed; None: optimal (as in
        :func:`likelihood_bound`).
    n_rounds, tol, c_init
        Controls of :func:`optimal_gate_auxiliaries`.
    Returns
    -------
    e_term, g_term, h_term : float
        Expert, gate and entropy parts of the bound (nats, totals).
    phi, phi_opt, xi, c, d : ndarray
        The auxiliaries used and the optimal responsibilities.

    Notes
    -----
    The bound depends on q only through these moments, so the same code
    serves the vMF x Gamma family and the Gaussian family of the BMEM-G
    baseline.
    """
    n, K = mean_b.shape
    if K >= 2 and phi is None and xi is None and c is None and d is None:
        return _optimal_likelihood_pieces(y, mean_b, second_b, mean_e, second_e,
                                          n_rounds, tol, c_init)
    return _numpy_likelihood_pieces(y, mean_b, second_b, mean_e, second_e, phi, xi, c,
                                    d, n_rounds, tol, c_init)


def _numpy_likelihood_pieces(y, mean_b, second_b, mean_e, second_e, phi, xi, c, d,
                             n_rounds, tol, c_init):
    """:func:`likelihood_pieces_from_moments` with the NumPy functions of this
    module (any auxiliaries held fixed, any K): the reference the fused kernel
    :func:`_moment_rows` is checked against in
    ``tests/test_experts_bounds.py::test_fused_likelihood_kernel_matches_numpy``."""
    n, K = mean_b.shape
    if xi is not None:
        xi = np.asarray(xi, dtype=np.float64)
        if xi.shape != mean_b.shape:
            raise ValueError(f"xi must have shape {mean_b.shape}; got {xi.shape}.")
    expert, xi = expected_log_sigmoid_bound((2.0 * y - 1.0)[:, None] * mean_b,
                                            second_b, xi)
    lse_upper, c, d = expected_logsumexp_upper_bound(mean_e, second_e, c, d, n_rounds,
                                                     tol, c_init)
    phi_opt = optimal_responsibilities(expert, mean_e)
    phi = phi_opt if phi is None else _check_phi(phi, n, K)
    e_term = float(np.sum(phi * expert))
    g_term = float(np.sum(phi * mean_e) - np.sum(lse_upper))
    h_term = float(np.sum(special.entr(phi)))
    return e_term, g_term, h_term, phi, phi_opt, xi, c, d


def _optimal_likelihood_pieces(y, mean_b, second_b, mean_e, second_e, n_rounds, tol,
                               c_init, want_weights=False, gain_tol=0.0):
    """:func:`likelihood_pieces_from_moments` at optimal auxiliaries, K >= 2, fused
    (:func:`_moment_rows`: gate bracket, Newton and pieces in one pass); with
    ``want_weights`` a last item (G_M, G_V), the fixed-auxiliary weights (n, 2K)."""
    mean_e = np.asarray(mean_e, dtype=np.float64)
    second_e = np.asarray(second_e, dtype=np.float64)
    if mean_e.ndim != 2 or mean_e.shape != second_e.shape:
        raise ValueError("mean_t and second_t must have the same shape (n, K); got "
                         f"{mean_e.shape} and {second_e.shape}.")
    n = mean_e.shape[0]
    use_c0 = c_init is not None
    # a writable copy: a read-only c0 (from broadcast_to) would compile another
    # signature of the kernel
    c0 = (np.array(np.broadcast_to(np.asarray(c_init, dtype=np.float64), (n,)))
          if use_c0 else np.zeros(1))
    sign = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    phi, xi, c, d, terms, g_mean, g_second = _moment_rows(
        sign, *(np.ascontiguousarray(v, dtype=np.float64)
                for v in (mean_b, second_b, mean_e, second_e)),
        c0, use_c0, int(n_rounds), float(tol), float(gain_tol), want_weights)
    out = (terms[0], terms[1], terms[2], phi, phi, xi, c, d)
    return out + ((g_mean, g_second),) if want_weights else out


# rows per task of the parallel row passes (each task allocates its (K,) buffers once)
_ROW_CHUNK = 512
# row passes with at least this many row-vector pairs (n K) run in parallel.
# In isolation two threads beat one from a few thousand pairs (Adult rows,
# n = 2,000, K = 30: the row pass 3.3 against 10.1 ms), but inside a fit the
# BMEM-G start at 2,000-4,000 rows took 4.6 s with the threshold at 8,000
# against 3.9-4.5 s with this one (the OpenMP threads' busy-waiting between
# the small passes costs more than they save)
PARALLEL_MIN_WORK = 200_000


def _row_outputs(n, K, want_weights):
    """Outputs phi, xi, d (n, K), c (n,) and the weights G_M, G_V ((n, 2K) with
    ``want_weights``, else (1, 2K), unused) of the row kernels."""
    nw = n if want_weights else 1
    return (np.empty((n, K)), np.empty((n, K)), np.empty((n, K)), np.empty(n),
            np.empty((nw, 2 * K)), np.empty((nw, 2 * K)))


@njit(error_model="numpy")
def _objective_range(lo, hi, sign, sq, sq_shift, t_b, t_e, s_b, s_e, indptr, indices,
                     data, mut_b, mut_e, source, coef_b, coef_e, c0, use_c0, n_rounds,
                     tol, gain_tol, want_weights, phi, xi, d, c, g_mean, g_second,
                     row_terms):
    """Rows lo..hi-1 of :func:`_objective_rows` or :func:`_moment_rows`: the
    (expert, gate, entropy) terms of each row into ``row_terms`` (n, 3);
    returns their sums over these rows, in row order.

    ``source`` says where the moments of row i come from. 0: the projections
    t = mu^T x are ``t_b[i]``, ``t_e[i]``; 1: they are formed here from the
    CSR row (``indptr``, ``indices``, ``data``) and the mean directions
    transposed, ``mut_b``, ``mut_e`` (p, K): the sums of sparse-times-dense
    products in the same order, without the (n, K) arrays; with 0 and 1 the
    moments are formed from t, ``sq`` and ``coef_*`` (the experts' squared
    row norms are ``sq + sq_shift``: their design may scale the intercept
    column, :class:`~skbinvi.experts._ascent.ObjectiveConfig`). 2: the moments are
    given, E[t] in ``t_b``, ``t_e`` and E[t^2] in ``s_b``, ``s_e`` (those of
    :func:`_moment_rows`).

    Per row, from its moments (K,) each: the bracket [lo, hi] and start of
    the gate parameter c as in :func:`optimal_gate_auxiliaries` (``c0[i]``
    when ``use_c0``, else 2 - 4 / K + mean_k E[eta_k^T x]), then
    :func:`_gate_newton_row`, which leaves d_j, exp(-d_j) and lam(d_j) at
    the c it returns; at that c, the optimal xi and phi (into ``xi``,
    ``phi``) and the three pieces of the likelihood bound. With the optimal
    auxiliaries the [JJ] quadratic terms vanish (xi^2 = E[t^2], d^2 =
    E[(t - c)^2]): expert_k = log sigmoid(xi_k) + ((2y - 1) E[t_k] - xi_k)/2,
    the gate bound is c + sum_j [log(1 + e^{-d_j}) + (E[eta_j^T x] - c +
    d_j)/2], and phi is the softmax of expert + E[eta^T x]. With
    ``want_weights`` also the weights (2K,) of
    :class:`~skbinvi.experts._variational._FixedAuxLikelihood` at these
    auxiliaries (experts then gates) into row i of ``g_mean``, ``g_second``:
    G_M = phi (2y - 1)/2, G_V = -phi lam(xi); G_M = phi - 1/2 + 2 c lam(d),
    G_V = -lam(d), lam(x) = tanh(x/2)/(4x) from the exp(-x) at hand (the
    series 1/8 - x^2/96 below x = 1e-2, as in :func:`_gate_derivatives`).
    Checked against the NumPy functions of this module in
    ``tests/test_experts_bounds.py::test_fused_likelihood_kernel_matches_numpy``.
    """
    K = phi.shape[1]
    a, var_e, e, lam = np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    mean_b, second_b, mean_e = np.empty(K), np.empty(K), np.empty(K)
    row_b, row_e = np.empty(K), np.empty(K)
    total_e = 0.0
    total_g = 0.0
    total_h = 0.0
    for i in range(lo, hi):
        if source == 2:
            for k in range(K):
                mean_b[k] = t_b[i, k]
                second_b[k] = s_b[i, k]
                m = t_e[i, k]
                mean_e[k] = m
                v = s_e[i, k] - m * m
                var_e[k] = 0.0 if 0.0 > v else v
        elif source == 1:
            for k in range(K):
                row_b[k] = 0.0
                row_e[k] = 0.0
            for j in range(indptr[i], indptr[i + 1]):
                x = data[j]
                ub = mut_b[indices[j]]
                ue = mut_e[indices[j]]
                for k in range(K):
                    row_b[k] += x * ub[k]
                    row_e[k] += x * ue[k]
        else:
            for k in range(K):
                row_b[k] = t_b[i, k]
                row_e[k] = t_e[i, k]
        if source != 2:
            sq_b = sq[i] + sq_shift
            for k in range(K):
                tb = row_b[k]
                mean_b[k] = coef_b[0, k] * tb
                second_b[k] = coef_b[1, k] * sq_b + coef_b[2, k] * (tb * tb)
                te = row_e[k]
                m = coef_e[0, k] * te
                mean_e[k] = m
                v = coef_e[1, k] * sq[i] + coef_e[2, k] * (te * te) - m * m
                var_e[k] = 0.0 if 0.0 > v else v
        # the bracket and start of c
        c_lo = math.inf
        c_hi = -math.inf
        vmax = -math.inf
        msum = 0.0
        for k in range(K):
            m = mean_e[k]
            if m < c_lo:
                c_lo = m
            if m > c_hi:
                c_hi = m
            if var_e[k] > vmax:
                vmax = var_e[k]
            msum += m
        c_lo = c_lo - 1.0
        c_hi = c_hi + 1.0 + math.log(4.0 * K) + math.sqrt(K * vmax)
        ci = c0[i] if use_c0 else 2.0 - 4.0 / K + msum / K
        if c_lo > ci:
            ci = c_lo
        if c_hi < ci:
            ci = c_hi
        ci = _gate_newton_row(mean_e, var_e, ci, c_lo, c_hi, n_rounds, tol, gain_tol,
                              d[i], e, lam)
        c[i] = ci
        # xi, phi and the pieces at c
        phi_i, xi_i, d_i = phi[i], xi[i], d[i]
        w = i if want_weights else 0
        gm, gs = g_mean[w], g_second[w]
        lse = ci
        top = -math.inf
        for k in range(K):
            s2 = second_b[k]
            x = math.sqrt(0.0 if 0.0 > s2 else s2)
            xi_i[k] = x
            ex = math.exp(-x)
            # log sigmoid(x) = -log(1 + e^{-x}) for x >= 0
            expert = -math.log1p(ex) + 0.5 * (sign[i] * mean_b[k] - x)
            if want_weights:
                # lam(xi) kept in g_second until phi is known
                if x < 1e-2:
                    gs[k] = 0.125 - x * x / 96.0
                else:
                    gs[k] = (1.0 - ex) / ((1.0 + ex) * 4.0 * x)
            lse += math.log1p(e[k]) + 0.5 * (mean_e[k] - ci + d_i[k])
            a[k] = expert + mean_e[k]
            if a[k] > top:
                top = a[k]
        total = 0.0
        for k in range(K):
            phi_i[k] = math.exp(a[k] - top)
            total += phi_i[k]
        e_term = 0.0
        g_term = 0.0
        # entropy: log phi_k = a_k - top - log(total), one log per row
        h_term = math.log(total)
        for k in range(K):
            pk = phi_i[k] / total
            phi_i[k] = pk
            if pk > 0.0:
                e_term += pk * (a[k] - mean_e[k])
                g_term += pk * mean_e[k]
                h_term -= pk * (a[k] - top)
            if want_weights:
                gm[k] = 0.5 * pk * sign[i]
                gs[k] = -pk * gs[k]
                gm[K + k] = pk - 0.5 + 2.0 * ci * lam[k]
                gs[K + k] = -lam[k]
        g_term -= lse
        h_term = 0.0 if 0.0 > h_term else h_term
        row_terms[i, 0] = e_term
        row_terms[i, 1] = g_term
        row_terms[i, 2] = h_term
        total_e += e_term
        total_g += g_term
        total_h += h_term
    return total_e, total_g, total_h


@njit(parallel=True)
def _objective_rows_parallel(sign, sq, sq_shift, t_b, t_e, s_b, s_e, indptr, indices,
                             data, mut_b, mut_e, source, coef_b, coef_e, c0, use_c0,
                             n_rounds, tol, gain_tol, want_weights, phi, xi, d, c,
                             g_mean, g_second, row_terms):
    """:func:`_objective_range` over all rows in parallel chunks of rows; the
    row terms are summed in row order afterwards (the numbers of the serial
    pass)."""
    n = sign.shape[0]
    for chunk in prange((n + _ROW_CHUNK - 1) // _ROW_CHUNK):
        _objective_range(chunk * _ROW_CHUNK, min(n, (chunk + 1) * _ROW_CHUNK), sign, sq,
                         sq_shift,
                         t_b, t_e, s_b, s_e, indptr, indices, data, mut_b, mut_e,
                         source, coef_b, coef_e, c0, use_c0, n_rounds, tol, gain_tol,
                         want_weights, phi, xi, d, c, g_mean, g_second, row_terms)
    total_e = 0.0
    total_g = 0.0
    total_h = 0.0
    for i in range(n):
        total_e += row_terms[i, 0]
        total_g += row_terms[i, 1]
        total_h += row_terms[i, 2]
    return total_e, total_g, total_h


def _row_pass(args, parallel):
    """The terms of :func:`_objective_range` over all rows of ``args`` (its
    arguments after ``lo``, ``hi``, without ``row_terms``), serial or in
    parallel chunks (:func:`_objective_rows_parallel`): the same numbers."""
    n = args[0].shape[0]
    row_terms = np.empty((n, 3))
    if parallel:
        return _objective_rows_parallel(*args, row_terms)
    return _objective_range(0, n, *args, row_terms)


def _rows_source(t_b, t_e, csr):
    """The projection arguments of the row kernels: (t_b, t_e, s_b, s_e,
    indptr, indices, data, mu_b^T, mu_e^T, source) from given projections
    (n, K) each (source 0), or, when ``t_b``, ``t_e`` are None, from ``csr`` =
    (indptr, indices, data, mu_b (K, p), mu_e (K, p)) (source 1); see
    :func:`_objective_range`."""
    empty_i, empty_f = np.zeros(1, dtype=np.int64), np.zeros(1)
    if t_b is not None:
        unused = np.zeros((1, t_b.shape[1]))
        return (t_b, t_e, unused, unused, empty_i, empty_i, empty_f, unused, unused, 0)
    indptr, indices, data, mu_b, mu_e = csr
    unused = np.zeros((1, mu_b.shape[0]))
    return (unused, unused, unused, unused, indptr, indices, data,
            np.ascontiguousarray(mu_b.T), np.ascontiguousarray(mu_e.T), 1)


def use_parallel(n, K):
    """Whether a pass over n rows and K vectors runs the parallel variant of a
    kernel: from ``PARALLEL_MIN_WORK`` row-vector pairs on (below, starting
    the threads costs more than they save; both variants give the same
    numbers)."""
    return n * K >= PARALLEL_MIN_WORK


def _moment_rows(sign, mean_b, second_b, mean_e, second_e, c0, use_c0, n_rounds, tol,
                 gain_tol, want_weights):
    """:func:`_optimal_likelihood_pieces` in one pass over the rows (K >= 2).

    ``mean_*``, ``second_*`` (n, K) are the projection moments; the gate
    variances are max(second - mean^2, 0) as in :func:`_gate_moments`.
    Returns (phi, xi, c, d, (expert, gate, entropy terms), G_M, G_V), the
    last two the fixed-auxiliary weights (n, 2K) of :func:`_objective_range`
    (only with ``want_weights``). The kernel of :func:`_objective_rows`
    with the moments given (source 2 of :func:`_objective_range`: one
    compiled row pass for both). Large passes run in parallel chunks of
    rows (:func:`use_parallel`); each row's terms are kept and summed in row
    order, so the result does not depend on the number of threads.
    """
    n, K = mean_b.shape
    phi, xi, d, c, g_mean, g_second = _row_outputs(n, K, want_weights)
    unused_f, unused_i = np.zeros(1), np.zeros(1, dtype=np.int64)
    unused = np.zeros((1, K))
    terms = _row_pass((sign, unused_f, 0.0, mean_b, mean_e, second_b, second_e,
                       unused_i, unused_i, unused_f, unused, unused, 2, unused, unused,
                       c0, use_c0, n_rounds, tol, gain_tol, want_weights, phi, xi, d, c,
                       g_mean, g_second), use_parallel(n, K))
    return phi, xi, c, d, terms, g_mean, g_second


def _objective_rows(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds, tol,
                    gain_tol, want_weights, out=None, csr=None, sq_shift=0.0):
    """:func:`_moment_rows` of a vMF x Gamma q from the projections.

    ``t_b``, ``t_e`` (n, K) are mu_k^T x_n of the experts and gates, or None
    with ``csr`` = (indptr, indices, data, mu_b, mu_e): CSR X (sorted unique
    int64 indices, as :func:`~skbinvi.experts._variational._canonical_csr`
    gives) and the mean directions (K, p) each, from which each row's
    projections are formed inside the pass (on the full Adult data, K = 30,
    the two sparse products X mu^T took 8-15 ms of a 60-75 ms pass, serial).
    ``coef_*`` (3, K) are the coefficients (E g A, E g^2 A / kappa,
    E g^2 (1 - p A / kappa)) of :func:`projection_moments`: per row the
    moments E[a^T x] = c1 t and E[(a^T x)^2] = c2 ||x||^2 + c3 t^2 are formed
    in (K,) buffers (no (n, K) temporaries), then the rest of
    :func:`_objective_range`. ``sq_shift``: the experts' squared row norms
    are ``sq + sq_shift`` (an expert design whose constant column is
    scaled; ``t_b`` or ``mu_b`` are then of that design).
    Returns (phi, xi, c, d, terms, G_M, G_V) as :func:`_moment_rows` (serial
    or parallel in the same way). ``out``: arrays (phi, xi, d, c, G_M, G_V)
    of a previous call that nothing uses any more, overwritten instead of
    allocating new ones (fresh pages of ~55 MB per pass on the full Adult
    data cost about as much as a tenth of the pass); used only with
    ``want_weights`` and matching shapes.
    """
    n, K = sq.shape[0], coef_b.shape[1]
    if (out is None or not want_weights or out[0].shape != (n, K)
            or out[3].shape != (n,) or out[4].shape != (n, 2 * K)):
        out = _row_outputs(n, K, want_weights)
    phi, xi, d, c, g_mean, g_second = out
    terms = _row_pass((sign, sq, float(sq_shift), *_rows_source(t_b, t_e, csr),
                       coef_b, coef_e, c0,
                       use_c0, n_rounds, tol, gain_tol, want_weights, phi, xi, d, c,
                       g_mean, g_second), use_parallel(n, K))
    return phi, xi, c, d, terms, g_mean, g_second


# ---------------------------------------------------------------------------
# 4. KL to independent priors
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# 5. The whole independent-prior ELBO; prediction
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# 6. Type II MABN prior: log-normalizer bound, energy
# ---------------------------------------------------------------------------


