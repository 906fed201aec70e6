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
inequality here against exact values and Monte Carlo over q.

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

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import prange
from scipy import special
from sklearn.utils import check_array
from sklearn.utils.extmath import row_norms

from .._numba import njit
from ._vmf import _bessel_quantities, _check_mu_kappa, log_normalizer, vmf_kl

__all__ = [
    "IndependentPriorELBO",
    "VMFGammaParams",
    "VMFGammaPrior",
    "expected_log_sigmoid_bound",
    "expected_logsumexp_upper_bound",
    "expert_bound",
    "gamma_entropy",
    "gamma_kl",
    "gate_bound",
    "independent_prior_elbo",
    "independent_prior_kl",
    "jj_lambda",
    "jj_log_sigmoid_lower_bound",
    "likelihood_bound",
    "likelihood_pieces_from_moments",
    "log1pexp_upper_bound",
    "logsumexp_upper_bound",
    "mabn_expected_energy",
    "mabn_expected_log_prior_lower_bound",
    "mabn_log_normalizer_upper_bound",
    "optimal_gate_auxiliaries",
    "optimal_responsibilities",
    "predict_proba_posterior_mean",
    "projection_moments",
    "rowwise_quadratic_form",
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


class VMFGammaPrior(NamedTuple):
    """Independent prior vMF(u | mu0, kappa0) x Gamma(g | shape alpha1, rate alpha2).

    Attributes
    ----------
    mu0 : array_like of shape (p,) or (K, p)
        Prior mean direction(s), unit.
    kappa0 : float or array_like of shape (K,)
        Prior concentration(s) >= 0 (0: uniform directions).
    alpha1 : float or array_like of shape (K,)
        Prior Gamma shape(s) > 0.
    alpha2 : float or array_like of shape (K,)
        Prior Gamma rate(s) > 0.
    """

    mu0: np.ndarray
    kappa0: float
    alpha1: float
    alpha2: float


def _positive(x, name, K):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim > 1 or (x.ndim == 1 and x.shape[0] not in (1, K)):
        raise ValueError(f"{name} must be a scalar or of shape ({K},); got {x.shape}.")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {x!r}.")
    return np.broadcast_to(x, (K,)).astype(np.float64)


def _check_params(params, p=None, name="params"):
    """(mu (K, p), kappa (K,), r (K,), s (K,)) validated from a 4-sequence."""
    if len(params) != 4:
        raise ValueError(f"{name} must be (mu, kappa, r, s); got {len(params)} items.")
    mu, kappa, r, s = params
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim != 2:
        raise ValueError(f"{name}.mu must have shape (K, p); got {mu.shape}.")
    mu2, kappa2, _ = _check_mu_kappa(mu, kappa, f"{name}.mu")
    K, pp = mu2.shape
    if p is not None and pp != p:
        raise ValueError(f"{name}.mu has {pp} columns but X has {p} features.")
    return (mu2, np.array(kappa2, dtype=np.float64), _positive(r, f"{name}.r", K),
            _positive(s, f"{name}.s", K))


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


def rowwise_quadratic_form(X, M):
    """x_n^T M x_n for every row x_n of X.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n, p)
        Dense or CSR rows.
    M : array_like of shape (p, p)
        Any square matrix.

    Returns
    -------
    q : ndarray of float64 of shape (n,)
        sum_j ((X M) * X)_nj; O(nnz(X) p + n p) for sparse X (``(X @ M)`` is
        dense, the elementwise product keeps X's sparsity).
    """
    X = _check_X(X)
    M = np.asarray(M, dtype=np.float64)
    if M.shape != (X.shape[1], X.shape[1]):
        raise ValueError(f"M must have shape ({X.shape[1]}, {X.shape[1]}); "
                         f"got {M.shape}.")
    XM = X @ M
    if sp.issparse(X):
        return np.asarray(X.multiply(XM).sum(axis=1)).ravel()
    return np.einsum("np,np->n", XM, X)


def projection_moments(X, params):
    """E_q[a_k^T x_n] and E_q[(a_k^T x_n)^2] for a_k = g_k u_k under q.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    params : VMFGammaParams or 4-sequence (mu (K, p), kappa (K,), r (K,), s (K,))
        q(u_k) = vMF(mu_k, kappa_k), q(g_k) = Gamma(shape r_k, rate s_k).

    Returns
    -------
    mean : ndarray of float64 of shape (n, K)
        E[a_k]^T x_n = (r_k/s_k) A_p(kappa_k) mu_k^T x_n ([Xie] supplement
        items (I), (IV)).
    second : ndarray of float64 of shape (n, K)
        x_n^T E[a_k a_k^T] x_n = ((r_k + r_k^2)/s_k^2)
        ((A_p/kappa_k) ||x_n||^2 + (1 - p A_p/kappa_k) (mu_k^T x_n)^2)
        ([Xie] supplement Eq. 14 with the vMF second moment of
        :func:`~skbinvi.experts._vmf.vmf_second_moment`). Always >= mean^2.

    Notes
    -----
    O(n K p) (O(nnz(X) K) for sparse X): the identity-plus-rank-one
    structure of E[u u^T] avoids forming K p x p matrices; it equals
    :func:`rowwise_quadratic_form` with M = E[a_k a_k^T] (tested).
    """
    X = _check_X(X)
    mu, kappa, r, s = _check_params(params, X.shape[1])
    p = mu.shape[1]
    a, a_over_k, omega, _, _ = _bessel_quantities(np.full(kappa.shape, float(p)), kappa)
    proj = np.asarray(X @ mu.T)
    sq = row_norms(X, squared=True)
    e_g = r / s
    e_g2 = (r + r * r) / (s * s)
    mean = proj * (e_g * a)
    second = e_g2 * (a_over_k * sq[:, None] + omega * proj * proj)
    return mean, second


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


def jj_log_sigmoid_lower_bound(t, xi):
    """[JJ] quadratic lower bound on log sigmoid(t).

    log sigmoid(t) >= log sigmoid(xi) + (t - xi)/2 - lam(xi) (t^2 - xi^2),

    with equality at t = +-xi ([JJ] Eq. 5; [Xie] supplement item (VII)).

    Parameters
    ----------
    t : float or array_like
        Argument.
    xi : float or array_like
        Variational parameter, broadcast against ``t``.

    Returns
    -------
    bound : float or ndarray of float64
        The right-hand side, in nats.

    Notes
    -----
    log sigmoid(t) = t/2 - log(2 cosh(t/2)) and log(2 cosh(sqrt(w)/2)) is
    concave in w = t^2 with slope lam(sqrt(w)); its tangent at w = xi^2 is
    the bound.
    """
    t = np.asarray(t, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    out = special.log_expit(xi) + 0.5 * (t - xi) - jj_lambda(xi) * (t * t - xi * xi)
    return out[()] if np.ndim(out) == 0 else out


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


def expert_bound(X, y, beta, xi=None):
    """Lower bounds on E_q[log p(y_n | z_n = k, beta_k, x_n)] for all (n, k).

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta : VMFGammaParams or 4-sequence
        q of the expert vectors beta_k: mu (K, p), kappa (K,), r (K,), s (K,).
    xi : array_like of shape (n, K) or None, default=None
        [JJ] parameters e_nk; None: the optimal e_nk = sqrt(E[(beta_k^T x_n)^2]).

    Returns
    -------
    expert : ndarray of float64 of shape (n, K)
        log sigmoid(e_nk) + ((2 y_n - 1) E[beta_k]^T x_n - e_nk)/2
        - lam(e_nk) (x_n^T E[beta_k beta_k^T] x_n - e_nk^2)
        <= E_q[log sigmoid((2 y_n - 1) beta_k^T x_n)], in nats.
    xi : ndarray of float64 of shape (n, K)
        The e_nk used.

    Notes
    -----
    [Xie] supplement Eqs. 15-17, corrected: beta_k^T x_n (not beta_k^T z_n)
    and the factor (2 y_n - 1) in the linear term (dropped in Eq. 17).
    t = (2 y_n - 1) beta_k^T x_n has E[t^2] = E[(beta_k^T x_n)^2].
    """
    X = _check_X(X)
    y = _check_y(y, X.shape[0])
    mean, second = projection_moments(X, beta)
    sign = (2.0 * y - 1.0)[:, None]
    if xi is not None:
        xi = np.asarray(xi, dtype=np.float64)
        if xi.shape != mean.shape:
            raise ValueError(f"xi must have shape {mean.shape}; got {xi.shape}.")
    return expected_log_sigmoid_bound(sign * mean, second, xi)


# ---------------------------------------------------------------------------
# 2. Gate: Bouchard + JJ
# ---------------------------------------------------------------------------


def log1pexp_upper_bound(u, d):
    """[JJ] bound log(1 + e^u) <= -log sigmoid(d) + (u + d)/2 + lam(d) (u^2 - d^2).

    Parameters
    ----------
    u : float or array_like
        Argument.
    d : float or array_like
        Variational parameter, broadcast against ``u``.

    Returns
    -------
    bound : float or ndarray of float64
        The right-hand side (nats); equality at u = +-d.

    Notes
    -----
    [D] log(1 + e^u) = -log sigmoid(-u); apply
    :func:`jj_log_sigmoid_lower_bound` at t = -u:
    -log sigmoid(-u) <= -log sigmoid(d) - (-u - d)/2 + lam(d) (u^2 - d^2).
    This is the form of [Xie] supplement Eq. 12 (with u = eta^T x - c), where
    -log sigmoid(d) = log(1 + e^{-d}).
    """
    u = np.asarray(u, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    out = -special.log_expit(d) + 0.5 * (u + d) + jj_lambda(d) * (u * u - d * d)
    return out[()] if np.ndim(out) == 0 else out


def logsumexp_upper_bound(t, c, d):
    """[Bou] + [JJ] upper bound on log sum_j exp(t_j), pointwise.

    log sum_j e^{t_j} <= c + sum_j log(1 + e^{t_j - c})
                      <= c + sum_j [-log sigmoid(d_j) + (t_j - c + d_j)/2
                                    + lam(d_j) ((t_j - c)^2 - d_j^2)].

    Parameters
    ----------
    t : array_like of shape (..., K)
        Arguments.
    c : array_like of shape (...)
        [Bou] parameter, any real.
    d : array_like of shape (..., K)
        [JJ] parameters, any real.

    Returns
    -------
    bound : ndarray of float64 of shape (...)
        In nats.

    Notes
    -----
    [Bou]: sum_j e^{t_j} = e^c sum_j e^{t_j - c} <= e^c prod_j (1 + e^{t_j - c}),
    because prod_j (1 + a_j) >= 1 + sum_j a_j >= sum_j a_j for a_j >= 0.
    Then :func:`log1pexp_upper_bound` on each factor ([Xie] supplement Eq. 12).
    """
    t = np.asarray(t, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    return c + np.sum(log1pexp_upper_bound(t - c[..., None], d), axis=-1)


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


def _gate_profile(mean_t, var_t, c, need_value=True):
    """min_d B(c, d) (d = sqrt(w(c))) and its first and second c-derivatives.

    With e = exp(-d), d >= 0: -log sigmoid(d) = log1p(e),
    tanh(d/2) = (1 - e)/(1 + e), sech^2(d/2) = 4 e/(1 + e)^2 (one exp for all);
    lam'(d)/d = (d sech^2(d/2)/2 - tanh(d/2)) / (4 d^3), replaced by its series
    -1/48 + d^2/240 below d = 1e-2 (where the closed form cancels).
    """
    K = mean_t.shape[1]
    diff = c[:, None] - mean_t
    d = np.sqrt(var_t + diff * diff)
    e = np.exp(-d)
    one_p = 1.0 + e
    th = (1.0 - e) / one_p
    small = d < 1e-2
    ds = np.where(small, 1.0, d)
    d2 = d * d
    lam = np.where(small, 0.125 - d2 / 96.0, th / (4.0 * ds))
    lpx = np.where(small, -1.0 / 48.0 + d2 / 240.0,
                   (2.0 * ds * e / (one_p * one_p) - th) / (4.0 * ds ** 3))
    val = None
    if need_value:
        val = c + np.sum(np.log1p(e) + 0.5 * (d - diff), axis=1)
    grad = 1.0 - 0.5 * K + 2.0 * np.sum(lam * diff, axis=1)
    hess = 2.0 * np.sum(lam + lpx * diff * diff, axis=1)
    return val, grad, hess


def optimal_gate_auxiliaries(mean_t, second_t, n_rounds=50, tol=1e-10, c_init=None,
                             method="newton"):
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
    method : {"newton", "newton_numpy", "coordinate"}, default="newton"
        "newton_numpy": the NumPy reference of "newton" (vectorized over
        rows), which the Numba kernel of "newton" (one row at a time, the
        same iteration) is checked against in
        ``tests/test_experts_bounds.py::test_gate_newton_kernel_matches_numpy``.
        "coordinate": alternate the closed-form d-step and c-step below
        (coordinate descent on the upper bound, i.e. ascent on the ELBO; it
        converges linearly, typically a factor ~0.8 per round).
        "newton": Newton's method on h'(c) = 0 for the convex profile
        h(c) = min_d B(c, d), safeguarded by bisection on a bracket with
        h'(lo) < 0 < h'(hi); same minimizer, quadratic convergence (about 5
        iterations to 1e-10 on typical rows; rows where h is flat to
        e^{-|c - m_j|}, e.g. nearly deterministic t split evenly around c,
        fall back to bisection, at no cost in the bound's value).
        For K = 1 the infimum (E[t], log softmax = 0) is only approached as
        c -> -inf; both methods then run ``n_rounds`` coordinate steps.

    Returns
    -------
    c : ndarray of float64 of shape (n,)
    d : ndarray of float64 of shape (n, K)
        d_nj = sqrt(E[(t_nj - c_n)^2]), optimal for the returned c.

    Notes
    -----
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
    if method not in ("newton", "newton_numpy", "coordinate"):
        raise ValueError("method must be 'newton', 'newton_numpy' or 'coordinate'; "
                         f"got {method!r}.")
    mean_t, var_t = _gate_moments(mean_t, second_t)
    n, K = mean_t.shape
    if c_init is None:
        c = 2.0 - 4.0 / K + mean_t.mean(axis=1)
    else:
        c = np.broadcast_to(np.asarray(c_init, dtype=np.float64), (n,)).copy()
    if method == "coordinate" or K == 1:
        for _ in range(int(n_rounds)):
            d = _d_given_c(mean_t, var_t, c)
            c_new = _c_given_d(mean_t, d)
            done = np.max(np.abs(c_new - c) / (1.0 + np.abs(c)), initial=0.0) <= tol
            c = c_new
            if done:
                break
        return c, _d_given_c(mean_t, var_t, c)
    # safeguarded Newton on h'(c) = 0 (h convex, K >= 2): keep a bracket
    # [lo, hi] with h'(lo) < 0 < h'(hi); take the Newton step when it stays
    # inside (or is below tol), else bisect.
    lo = mean_t.min(axis=1) - 1.0  # all 2 lam_j (c - m_j) < 0: h' < 1 - K/2 <= 0
    # [D] for delta = c - max_j m_j >= max(log(4K), sqrt(K) max_j sd_j), every
    # term 2 lam_j (c - m_j) = tanh(d_j/2) (c - m_j)/(2 d_j) >= (1 - 1/K)/2
    # (tanh(d/2) >= 1 - 2 e^{-delta}, (c - m)/d >= 1 - sd^2/(2 delta^2)), so
    # h' >= 1 - K/2 + (K - 1)/2 = 1/2 > 0
    hi = (mean_t.max(axis=1) + 1.0
          + np.log(4.0 * K) + np.sqrt(K * var_t.max(axis=1)))
    c = np.clip(c, lo, hi)
    if method == "newton":
        c = _gate_newton_rows(np.ascontiguousarray(mean_t), np.ascontiguousarray(var_t),
                              c, lo, hi, int(n_rounds), float(tol))
        return c, _d_given_c(mean_t, var_t, c)
    # work on a compacted copy of the unconverged rows (re-compacted when
    # fewer than half of the working rows are still moving)
    idx = np.arange(n)
    ma, va, ca, la, ha = mean_t, var_t, c.copy(), lo, hi
    moving = np.ones(n, dtype=bool)
    for _ in range(int(n_rounds)):
        _, g, H = _gate_profile(ma, va, ca, False)
        la = np.where(g < 0.0, ca, la)
        ha = np.where(g > 0.0, ca, ha)
        with np.errstate(divide="ignore", invalid="ignore"):
            cand = ca - g / H
        scale = tol * (1.0 + np.abs(ca))
        ok = (H > 0.0) & (((cand > la) & (cand < ha)) | (np.abs(cand - ca) <= scale))
        c_new = np.where(ok, cand, 0.5 * (la + ha))
        c_new = np.where(g == 0.0, ca, c_new)
        moving = np.abs(c_new - ca) > scale
        ca = c_new
        n_moving = int(moving.sum())
        if n_moving == 0:
            break
        if n_moving < 0.5 * idx.size:
            c[idx] = ca
            idx, ma, va = idx[moving], ma[moving], va[moving]
            ca, la, ha = ca[moving], la[moving], ha[moving]
    c[idx] = ca
    return c, _d_given_c(mean_t, var_t, c)



@njit(inline="always")
def _gate_derivatives(mean_i, var_i, ci, d, e, lam):
    """h'(c), h''(c) of one row (K >= 2); fills d_j = sqrt(w_j(c)), e_j = exp(-d_j)
    and lam_j = lam(d_j) (K,) at this c, for :func:`_likelihood_row`."""
    K = mean_i.shape[0]
    g = 1.0 - 0.5 * K
    H = 0.0
    for j in range(K):
        diff = ci - mean_i[j]
        dj = np.sqrt(var_i[j] + diff * diff)
        ej = np.exp(-dj)
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


@njit(inline="always")
def _gate_newton_row(mean_i, var_i, ci, la, ha, n_rounds, tol, gain_tol, d, e, lam):
    """The safeguarded Newton iteration of :func:`_gate_newton_rows` for one row.

    Returns the last c at which the derivatives were evaluated: the step from
    it is below tol (1 + |c|) when the row converged. ``d``, ``e``, ``lam``
    (K,) hold d_j, exp(-d_j) and lam(d_j) at that c, so that the caller does
    not evaluate them again.
    """
    # n_rounds Newton steps, then one more evaluation at the last c: one call
    # site of _gate_derivatives (each inlined copy costs compile time)
    last = max(n_rounds, 0)
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

    The iteration of :func:`optimal_gate_auxiliaries` (``method="newton"``)
    with the derivatives of :func:`_gate_profile`, fused per row (one exp
    per row and term per iteration, no (n, K) temporaries); a row stops as
    soon as its step is below tol (1 + |c|) (and keeps the c before that
    step). Checked against the NumPy reference ``method="newton_numpy"`` in
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


def gate_bound(X, eta, c=None, d=None, n_rounds=50, tol=1e-10, c_init=None):
    """Gate terms: E_q[eta_k^T x_n] and an upper bound on E_q[logsumexp_j eta_j^T x_n].

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    eta : VMFGammaParams or 4-sequence
        q of the gate vectors eta_k.
    c, d, n_rounds, tol, c_init
        As in :func:`expected_logsumexp_upper_bound`.

    Returns
    -------
    linear : ndarray of float64 of shape (n, K)
        E[eta_k]^T x_n = (r_k/s_k) A_p(kappa_k) mu_k^T x_n.
    lse_upper : ndarray of float64 of shape (n,)
        >= E_q[log sum_j exp(eta_j^T x_n)], in nats.
    c : ndarray of shape (n,)
    d : ndarray of shape (n, K)

    Notes
    -----
    E_q[log softmax_k(eta^T x_n)] >= linear[:, k] - lse_upper ([Xie]
    supplement Eqs. 11-14).
    """
    mean, second = projection_moments(X, eta)
    lse_upper, c, d = expected_logsumexp_upper_bound(mean, second, c, d, n_rounds, tol,
                                                     c_init)
    return mean, lse_upper, c, d


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


class IndependentPriorELBO(NamedTuple):
    """Value and pieces of the independent-prior ELBO (nats, summed over samples).

    Attributes
    ----------
    elbo : float
        ``likelihood - kl_beta - kl_eta``.
    likelihood : float
        Lower bound on E_q[log p(y, z | X, beta, eta)] + H[q(z)]
        (:func:`likelihood_bound`) = ``expert + gate + entropy``.
    expert : float
        sum_nk phi_nk expert_nk.
    gate : float
        sum_nk phi_nk E[eta_k]^T x_n - sum_n lse_upper_n.
    entropy : float
        sum_n H[phi_n].
    kl_beta, kl_eta : float
        KL(q || prior) of the expert and gate vectors (:func:`independent_prior_kl`).
    phi : ndarray of shape (n, K)
        The responsibilities used (the optimal ones if none were given).
    phi_opt : ndarray of shape (n, K)
        The optimal responsibilities (:func:`optimal_responsibilities`).
    xi : ndarray of shape (n, K)
        Expert [JJ] parameters e_nk.
    c : ndarray of shape (n,)
        Gate [Bou] parameters.
    d : ndarray of shape (n, K)
        Gate [JJ] parameters.
    """

    elbo: float
    likelihood: float
    expert: float
    gate: float
    entropy: float
    kl_beta: float
    kl_eta: float
    phi: np.ndarray
    phi_opt: np.ndarray
    xi: np.ndarray
    c: np.ndarray
    d: np.ndarray


def _likelihood_pieces(X, y, beta, eta, phi, xi, c, d, n_rounds, tol, c_init):
    X = _check_X(X)
    n, p = X.shape
    beta_c = _check_params(beta, p, "beta")
    eta_c = _check_params(eta, p, "eta")
    K = beta_c[0].shape[0]
    if eta_c[0].shape[0] != K:
        raise ValueError(f"beta has {K} experts but eta has {eta_c[0].shape[0]}.")
    y = _check_y(y, n)
    return likelihood_pieces_from_moments(y, *projection_moments(X, beta_c),
                                          *projection_moments(X, eta_c), phi, xi, c, d,
                                          n_rounds, tol, c_init)


def likelihood_pieces_from_moments(y, mean_b, second_b, mean_e, second_e, phi=None,
                                   xi=None, c=None, d=None, n_rounds=50, tol=1e-10,
                                   c_init=None, _reference=False):
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
    _reference : bool, default=False
        Private, for tests: with every auxiliary optimal (all None, K >= 2)
        the pieces come from the fused Numba kernel
        :func:`_moment_rows`; True computes them with the NumPy
        functions of this module instead, the reference the kernel is
        checked against in
        ``tests/test_experts_bounds.py::test_fused_likelihood_kernel_matches_numpy``.

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
    if (K >= 2 and phi is None and xi is None and c is None and d is None
            and not _reference):
        return _optimal_likelihood_pieces(y, mean_b, second_b, mean_e, second_e,
                                          n_rounds, tol, c_init)
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


@njit
def _log_expit(x):
    if x >= 0.0:
        return -np.log1p(np.exp(-x))
    return x - np.log1p(np.exp(x))


@njit(inline="always")
def _likelihood_row(sign_i, mean_b, second_b, mean_e, ci, phi, xi, d, e, lam_d, a,
                    want_weights, g_mean, g_second):
    """Optimal xi and phi and the three pieces of the likelihood bound, one row.

    ``d``, ``e``, ``lam_d`` (K,) hold d_j, exp(-d_j) and lam(d_j) at ``ci``
    (from :func:`_gate_newton_row`). With the optimal auxiliaries the [JJ]
    quadratic terms vanish (xi^2 = E[t^2], d^2 = E[(t - c)^2]): expert_k =
    log sigmoid(xi_k) + ((2y - 1) E[t_k] - xi_k)/2, the gate bound is c +
    sum_j [log(1 + e^{-d_j}) + (E[eta_j^T x] - c + d_j)/2], and phi is the
    softmax of expert + E[eta^T x]. Fills phi, xi (K,); returns (expert
    term, gate term, entropy) of the row; ``a`` is a (K,) buffer. With
    ``want_weights`` also fills the weights (2K,) of
    :class:`~skbinvi.experts._variational._FixedAuxLikelihood` at these
    auxiliaries (experts then gates): G_M = phi (2y - 1)/2, G_V = -phi
    lam(xi); G_M = phi - 1/2 + 2 c lam(d), G_V = -lam(d), lam(x) =
    tanh(x/2)/(4x) from the exp(-x) at hand (the series 1/8 - x^2/96 below
    x = 1e-2, as in :func:`_gate_derivatives`). Checked against the NumPy
    functions of this module in
    ``tests/test_experts_bounds.py::test_fused_likelihood_kernel_matches_numpy``."""
    K = mean_b.shape[0]
    lse = ci
    top = -np.inf
    for k in range(K):
        x = np.sqrt(max(second_b[k], 0.0))
        xi[k] = x
        ex = np.exp(-x)
        # log sigmoid(x) = -log(1 + e^{-x}) for x >= 0
        expert = -np.log1p(ex) + 0.5 * (sign_i * mean_b[k] - x)
        if want_weights:
            # lam(xi) kept in g_second until phi is known
            if x < 1e-2:
                g_second[k] = 0.125 - x * x / 96.0
            else:
                g_second[k] = (1.0 - ex) / ((1.0 + ex) * 4.0 * x)
        lse += np.log1p(e[k]) + 0.5 * (mean_e[k] - ci + d[k])
        a[k] = expert + mean_e[k]
        if a[k] > top:
            top = a[k]
    total = 0.0
    for k in range(K):
        phi[k] = np.exp(a[k] - top)
        total += phi[k]
    e_term = 0.0
    g_term = 0.0
    # entropy: log phi_k = a_k - top - log(total), one log per row
    h_term = np.log(total)
    for k in range(K):
        pk = phi[k] / total
        phi[k] = pk
        if pk > 0.0:
            e_term += pk * (a[k] - mean_e[k])
            g_term += pk * mean_e[k]
            h_term -= pk * (a[k] - top)
        if want_weights:
            g_mean[k] = 0.5 * pk * sign_i
            g_second[k] = -pk * g_second[k]
            g_mean[K + k] = pk - 0.5 + 2.0 * ci * lam_d[k]
            g_second[K + k] = -lam_d[k]
    return e_term, g_term - lse, max(h_term, 0.0)


@njit(inline="always")
def _optimal_row(sign_i, mean_b, second_b, mean_e, var_e, c0_i, use_c0, n_rounds, tol,
                 gain_tol, phi, xi, d, e, lam, a, terms, want_weights, g_mean,
                 g_second):
    """One row of :func:`_optimal_likelihood_pieces` from its moments (K,) each.

    Bracket [lo, hi] and start of the gate parameter c as in
    :func:`optimal_gate_auxiliaries` (``c0_i`` when ``use_c0``, else
    2 - 4 / K + mean_k E[eta_k^T x]), :func:`_gate_newton_row`, then
    :func:`_likelihood_row` at the c it returns, whose (expert, gate,
    entropy) terms are added to ``terms`` (3,). Returns c.
    """
    K = mean_e.shape[0]
    lo = np.inf
    hi = -np.inf
    vmax = -np.inf
    msum = 0.0
    for k in range(K):
        lo = min(lo, mean_e[k])
        hi = max(hi, mean_e[k])
        vmax = max(vmax, var_e[k])
        msum += mean_e[k]
    lo = lo - 1.0
    hi = hi + 1.0 + np.log(4.0 * K) + np.sqrt(K * vmax)
    ci = c0_i if use_c0 else 2.0 - 4.0 / K + msum / K
    ci = _gate_newton_row(mean_e, var_e, min(max(ci, lo), hi), lo, hi, n_rounds, tol,
                          gain_tol, d, e, lam)
    r = _likelihood_row(sign_i, mean_b, second_b, mean_e, ci, phi, xi, d, e, lam, a,
                        want_weights, g_mean, g_second)
    terms[0] += r[0]
    terms[1] += r[1]
    terms[2] += r[2]
    return ci


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


@njit
def _sum_row_terms(row_terms):
    """Column sums of the (n, 3) row terms in row order (the same for any
    number of threads)."""
    out = np.zeros(3)
    for i in range(row_terms.shape[0]):
        for j in range(3):
            out[j] += row_terms[i, j]
    return out[0], out[1], out[2]


@njit(inline="always")
def _objective_range(lo, hi, sign, sq, t_b, t_e, s_b, s_e, indptr, indices, data, mut_b,
                     mut_e, source, coef_b, coef_e, c0, use_c0, n_rounds, tol, gain_tol,
                     want_weights, phi, xi, d, c, g_mean, g_second, row_terms):
    """Rows lo..hi-1 of :func:`_objective_rows` or :func:`_moment_rows` (their
    own (K,) buffers).

    ``source`` says where the moments of row i come from. 0: the projections
    t = mu^T x are ``t_b[i]``, ``t_e[i]``; 1: they are formed here from the
    CSR row (``indptr``, ``indices``, ``data``) and the mean directions
    transposed, ``mut_b``, ``mut_e`` (p, K): the sums of sparse-times-dense
    products in the same order, without the (n, K) arrays; with 0 and 1 the
    moments are formed from t, ``sq`` and ``coef_*``. 2: the moments are
    given, E[t] in ``t_b``, ``t_e`` and E[t^2] in ``s_b``, ``s_e`` (those of
    :func:`_moment_rows`).
    """
    K = phi.shape[1]
    a, var_e, e, lam = np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    mean_b, second_b, mean_e = np.empty(K), np.empty(K), np.empty(K)
    row_b, row_e = np.empty(K), np.empty(K)
    for i in range(lo, hi):
        if source == 2:
            for k in range(K):
                mean_b[k] = t_b[i, k]
                second_b[k] = s_b[i, k]
                m = t_e[i, k]
                mean_e[k] = m
                var_e[k] = max(s_e[i, k] - m * m, 0.0)
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
            for k in range(K):
                tb = row_b[k]
                mean_b[k] = coef_b[0, k] * tb
                second_b[k] = coef_b[1, k] * sq[i] + coef_b[2, k] * (tb * tb)
                te = row_e[k]
                m = coef_e[0, k] * te
                mean_e[k] = m
                var_e[k] = max(coef_e[1, k] * sq[i] + coef_e[2, k] * (te * te) - m * m,
                               0.0)
        w = i if want_weights else 0
        c[i] = _optimal_row(sign[i], mean_b, second_b, mean_e, var_e,
                            c0[i] if use_c0 else 0.0, use_c0, n_rounds, tol, gain_tol,
                            phi[i], xi[i], d[i], e, lam, a, row_terms[i], want_weights,
                            g_mean[w], g_second[w])


@njit
def _objective_rows_serial_into(sign, sq, t_b, t_e, s_b, s_e, indptr, indices, data,
                                mut_b, mut_e, source, coef_b, coef_e, c0, use_c0,
                                n_rounds, tol, gain_tol, want_weights, phi, xi, d, c,
                                g_mean, g_second):
    """:func:`_objective_rows_serial` writing into given outputs (arguments of
    :func:`_objective_range`); returns the terms."""
    n = sign.shape[0]
    row_terms = np.zeros((n, 3))
    _objective_range(0, n, sign, sq, t_b, t_e, s_b, s_e, indptr, indices, data, mut_b,
                     mut_e, source, coef_b, coef_e, c0, use_c0, n_rounds, tol, gain_tol,
                     want_weights, phi, xi, d, c, g_mean, g_second, row_terms)
    return _sum_row_terms(row_terms)


@njit(parallel=True)
def _objective_rows_parallel_into(sign, sq, t_b, t_e, s_b, s_e, indptr, indices, data,
                                  mut_b, mut_e, source, coef_b, coef_e, c0, use_c0,
                                  n_rounds, tol, gain_tol, want_weights, phi, xi, d, c,
                                  g_mean, g_second):
    """:func:`_objective_rows_serial_into` in parallel chunks of rows (the same
    numbers); returns the terms."""
    n = sign.shape[0]
    row_terms = np.zeros((n, 3))
    for chunk in prange((n + _ROW_CHUNK - 1) // _ROW_CHUNK):
        _objective_range(chunk * _ROW_CHUNK, min(n, (chunk + 1) * _ROW_CHUNK), sign, sq,
                         t_b, t_e, s_b, s_e, indptr, indices, data, mut_b, mut_e, source,
                         coef_b, coef_e, c0, use_c0, n_rounds, tol, gain_tol,
                         want_weights, phi, xi, d, c, g_mean, g_second, row_terms)
    return _sum_row_terms(row_terms)


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


def _objective_rows_serial(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds,
                           tol, gain_tol, want_weights, csr=None):
    """:func:`_objective_rows_serial_into` into new arrays (a plain function:
    a Numba function calling a parallel one can crash when both are loaded
    from Numba's cache); ``csr`` as in :func:`_objective_rows`."""
    n, K = sq.shape[0], coef_b.shape[1]
    phi, xi, d, c, g_mean, g_second = _row_outputs(n, K, want_weights)
    terms = _objective_rows_serial_into(sign, sq, *_rows_source(t_b, t_e, csr), coef_b,
                                        coef_e, c0, use_c0, n_rounds, tol, gain_tol,
                                        want_weights, phi, xi, d, c, g_mean, g_second)
    return phi, xi, c, d, terms, g_mean, g_second


def _objective_rows_parallel(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds,
                             tol, gain_tol, want_weights, csr=None):
    """:func:`_objective_rows_parallel_into` into new arrays (see
    :func:`_objective_rows_serial`)."""
    n, K = sq.shape[0], coef_b.shape[1]
    phi, xi, d, c, g_mean, g_second = _row_outputs(n, K, want_weights)
    terms = _objective_rows_parallel_into(sign, sq, *_rows_source(t_b, t_e, csr),
                                          coef_b, coef_e, c0, use_c0, n_rounds, tol,
                                          gain_tol, want_weights, phi, xi, d, c, g_mean,
                                          g_second)
    return phi, xi, c, d, terms, g_mean, g_second


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
    last two the fixed-auxiliary weights (n, 2K) of :func:`_likelihood_row`
    (only with ``want_weights``). The kernels of :func:`_objective_rows`
    with the moments given (source 2 of :func:`_objective_range`: one
    compiled row pass for both). Large passes run in parallel chunks of
    rows (:func:`use_parallel`); each row's terms are kept and summed in row
    order, so the result does not depend on the number of threads.
    """
    n, K = mean_b.shape
    phi, xi, d, c, g_mean, g_second = _row_outputs(n, K, want_weights)
    kernel = (_objective_rows_parallel_into if use_parallel(n, K)
              else _objective_rows_serial_into)
    unused_f, unused_i = np.zeros(1), np.zeros(1, dtype=np.int64)
    unused = np.zeros((1, K))
    terms = kernel(sign, unused_f, mean_b, mean_e, second_b, second_e, unused_i, unused_i,
                   unused_f, unused, unused, 2, unused, unused, c0, use_c0, n_rounds, tol,
                   gain_tol, want_weights, phi, xi, d, c, g_mean, g_second)
    return phi, xi, c, d, terms, g_mean, g_second


def _objective_rows(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds, tol,
                    gain_tol, want_weights, out=None, csr=None):
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
    in (K,) buffers (no (n, K) temporaries), then :func:`_optimal_row`.
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
    kernel = (_objective_rows_parallel_into if use_parallel(n, K)
              else _objective_rows_serial_into)
    terms = kernel(sign, sq, *_rows_source(t_b, t_e, csr), coef_b, coef_e, c0, use_c0,
                   n_rounds, tol, gain_tol, want_weights, phi, xi, d, c, g_mean,
                   g_second)
    return phi, xi, c, d, terms, g_mean, g_second


def likelihood_bound(X, y, beta, eta, phi=None, *, xi=None, c=None, d=None,
                     n_rounds=50, tol=1e-10, c_init=None, return_aux=False):
    """Lower bound on E_q[log p(y, z | X, beta, eta)] + H[q(z)], in nats.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta, eta : VMFGammaParams or 4-sequence
        q of the expert and gate vectors (K rows each).
    phi : array_like of shape (n, K) or None, default=None
        q(z_n) = Categorical(phi_n); None: the optimal phi.
    xi, c, d : array_like or None
        Auxiliary parameters (shapes (n, K), (n,), (n, K)); None: optimal
        (see :func:`expert_bound`, :func:`expected_logsumexp_upper_bound`).
    n_rounds, tol, c_init
        Controls of :func:`optimal_gate_auxiliaries` for (c, d) (``c_init``:
        warm start, e.g. the previous ``c``).
    return_aux : bool, default=False
        Also return a dict with the pieces and auxiliaries.

    Returns
    -------
    value : float
        L_lik = sum_n sum_k phi_nk (expert_nk + E[eta_k]^T x_n)
        - sum_n lse_upper_n + sum_n H[phi_n], total over samples (nats).
    aux : dict, only if ``return_aux``
        Keys ``expert``, ``gate``, ``entropy`` (floats, summing to value),
        ``phi``, ``phi_opt``, ``xi``, ``c``, ``d``.

    Notes
    -----
    E_q[log p(y_n, z_n | ...)] = sum_k phi_nk (E log sigmoid((2y_n - 1)
    beta_k^T x_n) + E eta_k^T x_n) - E log sum_j exp(eta_j^T x_n) ([Xie]
    supplement Eqs. 10-18); the first expectation is bounded below by
    :func:`expert_bound`, the last above by :func:`gate_bound`. Cost
    O(n K p + n K (number of (c, d) iterations)).
    """
    e_term, g_term, h_term, phi, phi_opt, xi, c, d = _likelihood_pieces(
        X, y, beta, eta, phi, xi, c, d, n_rounds, tol, c_init)
    value = e_term + g_term + h_term
    if not return_aux:
        return value
    return value, dict(expert=e_term, gate=g_term, entropy=h_term, phi=phi,
                       phi_opt=phi_opt, xi=xi, c=c, d=d)


# ---------------------------------------------------------------------------
# 4. KL to independent priors
# ---------------------------------------------------------------------------


def gamma_kl(r, s, alpha1, alpha2):
    """KL(Gamma(shape r, rate s) || Gamma(shape alpha1, rate alpha2)), in nats [D].

    Parameters
    ----------
    r, s : float or array_like
        Shape and rate of q, > 0.
    alpha1, alpha2 : float or array_like
        Shape and rate of the prior, > 0. All four broadcast.

    Returns
    -------
    kl : float or ndarray of float64
        (r - alpha1) psi(r) - log Gamma(r) + log Gamma(alpha1)
        + alpha1 (log s - log alpha2) + r (alpha2 - s) / s >= 0.

    Notes
    -----
    [D] log Gamma(g | a, b) = a log b - log Gamma(a) + (a - 1) log g - b g and
    E_q[log g] = psi(r) - log s, E_q[g] = r / s ([Xie] supplement items
    (IV), (V)): E_q log q = r log s - log Gamma(r) + (r - 1)(psi(r) - log s) - r
    (supplement Eq. 7, correct) and E_q log p = alpha1 log alpha2
    - log Gamma(alpha1) + (alpha1 - 1)(psi(r) - log s) - alpha2 r / s; their
    difference simplifies to the formula above.
    """
    r, s, a1, a2 = (np.asarray(v, dtype=np.float64) for v in (r, s, alpha1, alpha2))
    for v, name in ((r, "r"), (s, "s"), (a1, "alpha1"), (a2, "alpha2")):
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name} must be finite and > 0.")
    out = ((r - a1) * special.digamma(r) - special.gammaln(r) + special.gammaln(a1)
           + a1 * (np.log(s) - np.log(a2)) + r * (a2 - s) / s)
    return out[()] if out.ndim == 0 else out


def gamma_entropy(r, s):
    """Entropy of Gamma(shape r, rate s), nats: r - log s + lgamma(r) + (1 - r) psi(r).

    Parameters
    ----------
    r, s : float or array_like
        Shape and rate, > 0.

    Returns
    -------
    entropy : float or ndarray of float64
        -E[log Gamma(g | r, s)] (minus supplement Eq. 7's Gamma part).
    """
    r, s = np.asarray(r, dtype=np.float64), np.asarray(s, dtype=np.float64)
    out = r - np.log(s) + special.gammaln(r) + (1.0 - r) * special.digamma(r)
    return out[()] if out.ndim == 0 else out


def independent_prior_kl(params, prior):
    """KL(q(u_k) q(g_k) || vMF(mu0, kappa0) Gamma(alpha1, alpha2)) for each k, in nats.

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        mu (K, p), kappa (K,), r (K,), s (K,).
    prior : VMFGammaPrior or 4-sequence
        mu0 ((p,) or (K, p)), kappa0, alpha1, alpha2.

    Returns
    -------
    kl : ndarray of float64 of shape (K,)
        :func:`~skbinvi.experts._vmf.vmf_kl` + :func:`gamma_kl` (q and the
        prior factorize over u and g). Equals -(E_q[log prior] - E_q[log q])
        of [Xie] supplement Eqs. 6-7 and 20 for independent priors, with the
        log C_p(kappa_hat) that Eq. 7 omits.
    """
    mu, kappa, r, s = _check_params(params)
    if len(prior) != 4:
        raise ValueError("prior must be (mu0, kappa0, alpha1, alpha2).")
    mu0, kappa0, alpha1, alpha2 = prior
    # a shared mu0 (p,) or kappa0 (scalar) is broadcast to every vector
    mu0 = np.broadcast_to(np.asarray(mu0, dtype=np.float64), mu.shape)
    kappa0 = np.broadcast_to(np.asarray(kappa0, dtype=np.float64), kappa.shape)
    return (np.asarray(vmf_kl(mu, kappa, mu0, kappa0))
            + np.broadcast_to(gamma_kl(r, s, alpha1, alpha2), kappa.shape))


# ---------------------------------------------------------------------------
# 5. The whole independent-prior ELBO; prediction
# ---------------------------------------------------------------------------


def independent_prior_elbo(X, y, beta, eta, phi=None, *, prior, prior_eta=None,
                           n_rounds=50, tol=1e-10, c_init=None, return_aux=False):
    """ELBO of the BMEM with independent vMF x Gamma priors (no diversity), in nats.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta, eta : VMFGammaParams or 4-sequence
        q of the expert and gate vectors: mu (K, p) unit rows, kappa (K,),
        r (K,), s (K,).
    phi : array_like of shape (n, K) or None, default=None
        q(z); None: the optimal responsibilities.
    prior : VMFGammaPrior or 4-sequence
        (mu0, kappa0, alpha1, alpha2) of the expert vectors (and of the gate
        vectors unless ``prior_eta`` is given).
    prior_eta : VMFGammaPrior or 4-sequence or None
        Prior of the gate vectors; None: ``prior``.
    n_rounds, tol, c_init
        Controls of :func:`optimal_gate_auxiliaries` (``c_init``: warm start).
    return_aux : bool, default=False
        Return an :class:`IndependentPriorELBO` instead of the float.

    Returns
    -------
    elbo : float or IndependentPriorELBO
        L_lik - sum_k KL(q(beta_k) || prior) - sum_k KL(q(eta_k) || prior_eta)
        <= log p(y | X) (total over samples). This is the objective of the
        posterior-regularization method without lambda_1 Omega + lambda_2 Omega
        ([Xie] supplement Eqs. 19-20) and of the BMEM with independent vMF
        priors. The auxiliaries xi, c, d are at their closed-form optima.
    """
    X = _check_X(X)
    e_term, g_term, h_term, phi, phi_opt, xi, c, d = _likelihood_pieces(
        X, y, beta, eta, phi, None, None, None, n_rounds, tol, c_init)
    p = X.shape[1]
    prior_e = prior if prior_eta is None else prior_eta
    kl_b = float(np.sum(independent_prior_kl(_check_params(beta, p, "beta"), prior)))
    kl_e = float(np.sum(independent_prior_kl(_check_params(eta, p, "eta"), prior_e)))
    lik = e_term + g_term + h_term
    value = lik - kl_b - kl_e
    if not return_aux:
        return value
    return IndependentPriorELBO(value, lik, e_term, g_term, h_term, kl_b, kl_e,
                                phi, phi_opt, xi, c, d)


def predict_proba_posterior_mean(X, beta, eta):
    """p(y = 1 | x) = sum_k softmax(E[eta]^T x)_k sigmoid(E[beta_k]^T x) at the means.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    beta, eta : VMFGammaParams or 4-sequence
        q of the expert and gate vectors; E[a_k] = (r_k/s_k) A_p(kappa_k) mu_k.

    Returns
    -------
    proba : ndarray of float64 of shape (n, 2)
        Columns P(y = 0 | x), P(y = 1 | x) (scikit-learn order); rows sum to 1
        (user guide, "The model" [D]).
    """
    X = _check_X(X)
    mean_b = projection_moments(X, beta)[0]
    mean_e = projection_moments(X, eta)[0]
    if mean_b.shape[1] != mean_e.shape[1]:
        raise ValueError("beta and eta must have the same number of rows K.")
    gate = special.softmax(mean_e, axis=1)
    p1 = np.clip(np.sum(gate * special.expit(mean_b), axis=1), 0.0, 1.0)
    return np.column_stack([1.0 - p1, p1])


# ---------------------------------------------------------------------------
# 6. Type II MABN prior: log-normalizer bound, energy
# ---------------------------------------------------------------------------


def _check_means(mean_directions):
    m = np.asarray(mean_directions, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 2:
        raise ValueError("mean_directions must have shape (K, p), p >= 2; "
                         f"got {m.shape}.")
    if not np.all(np.isfinite(m)):
        raise ValueError("mean_directions must be finite.")
    if np.any(np.linalg.norm(m, axis=1) > 1.0 + _MEAN_NORM_TOL):
        raise ValueError("mean_directions are means of unit vectors: their norms "
                         "must be <= 1.")
    return m


def _check_kappa_scalar(kappa):
    kappa = float(kappa)
    if not np.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa must be finite and >= 0; got {kappa!r}.")
    return kappa


def mabn_log_normalizer_upper_bound(mean_directions, kappa, return_gradient=False):
    """Upper bounds on E_q[log Z_i] of the Type II MABN prior, nodes i = 1..K [D].

    Type II MABN ([Xie] main paper; user guide, "The mutual angular prior"): u_1 ~
    vMF(mu0, kappa) and for i >= 2, p(u_i | u_1..u_{i-1}) = exp(kappa (-s_i)^T u_i)
    / Z_i with s_i = sum_{j<i} u_j, so Z_i = 1 / C_p(kappa ||s_i||) =:
    exp(f(||s_i||)).

    Parameters
    ----------
    mean_directions : array_like of shape (K, p)
        E_q[u_k] in the network's order (norms <= 1; for q = vMF(mu_hat_k,
        kappa_hat_k) this is A_p(kappa_hat_k) mu_hat_k, see
        :func:`~skbinvi.experts._vmf.vmf_mean`). Under q the u_k are independent.
    kappa : float
        Prior concentration kappa >= 0.
    return_gradient : bool, default=False
        Also return the gradient of the sum of the bounds.

    Returns
    -------
    bound : ndarray of float64 of shape (K,)
        bound[0] = log Z_1 = -log C_p(kappa) (exact, the vMF(mu0, kappa) node);
        bound[i-1] = f(0) + (f(i-1) - f(0)) / (i-1) * sqrt(Q_i) >= E_q[log Z_i]
        for i >= 2, with Q_i = E_q ||s_i||^2 (nats).
    gradient : ndarray of float64 of shape (K, p), only if ``return_gradient``
        d(sum_i bound_i)/d mean_directions (Euclidean; chain through
        E u = A_p(kappa_hat) mu_hat for the variational parameters).

    Notes
    -----
    [D] Derivation. Let f(r) = -log C_p(kappa r) = log I_nu(kappa r)
    - nu log(kappa r) + (p/2) log(2 pi), nu = p/2 - 1. Since
    d/dx [log I_nu(x) - nu log x] = I_nu'(x)/I_nu(x) - nu/x = I_{nu+1}(x)/I_nu(x)
    (I_nu' = I_{nu+1} + (nu/x) I_nu), f'(r) = kappa A_p(kappa r) in
    [0, kappa), and A_p is increasing, so f is convex and increasing on
    r >= 0.

    1. Chord: ||s_i|| lies in [0, R], R = i - 1 (i - 1 unit vectors), so
       convexity gives f(||s_i||) <= f(0) + (f(R) - f(0)) ||s_i|| / R.
       (Exact at ||s_i|| in {0, R}; for i = 2, ||s_2|| = ||u_1|| = 1 = R and
       the bound is exact.)
    2. Jensen: the chord is increasing in ||s_i|| and sqrt is concave, so
       E||s_i|| <= sqrt(E||s_i||^2).
    3. Independence under q and ||u_j|| = 1:
       Q_i = E||s_i||^2 = (i - 1) + 2 sum_{j<l<i} E[u_j]^T E[u_l]
           = (i - 1) + ||S_i||^2 - sum_{j<i} ||E u_j||^2,  S_i = sum_{j<i} E u_j.

    Hence E_q[log Z_i] <= f(0) + (f(i-1) - f(0)) / (i-1) sqrt(Q_i), with
    f(0) = log |S^{p-1}| = log(2 pi^{p/2} / Gamma(p/2)). The bound is finite
    for all p; the supplement's Lemma 1 is not a bound (for p >= 19 it tends
    to -inf; see the module docstring).

    Gradient: dQ_i/dE u_j = 2 (S_i - E u_j) for j < i, so
    d bound_i / d E u_j = slope_i (S_i - E u_j) / sqrt(Q_i),
    slope_i = (f(i-1) - f(0)) / (i-1). sqrt is not differentiable at
    Q_i = 0 (only when i - 1 unit-norm means sum to zero, i.e. kappa_hat =
    inf); there node i contributes 0 to the gradient. Cost O(K p).
    """
    m = _check_means(mean_directions)
    kappa = _check_kappa_scalar(kappa)
    K, p = m.shape
    R = np.arange(K, dtype=np.float64)  # i - 1 for nodes i = 1..K
    f0 = -float(log_normalizer(p, 0.0))
    fR = -np.asarray(log_normalizer(p, kappa * R), dtype=np.float64).reshape(K)
    slope = np.zeros(K)
    slope[1:] = (fR[1:] - f0) / R[1:]
    # S_i = sum_{j<i} m_j and sum_{j<i} ||m_j||^2 (exclusive cumulative sums)
    S = np.zeros_like(m)
    S[1:] = np.cumsum(m, axis=0)[:-1]
    sq = np.einsum("kp,kp->k", m, m)
    sumsq = np.concatenate([[0.0], np.cumsum(sq)[:-1]])
    Q = np.maximum(R + np.einsum("kp,kp->k", S, S) - sumsq, 0.0)
    sqrtQ = np.sqrt(Q)
    bound = f0 + slope * sqrtQ
    bound[0] = -float(log_normalizer(p, kappa))
    if not return_gradient:
        return bound
    coef = np.zeros(K)
    pos = sqrtQ > 0.0
    coef[pos] = slope[pos] / sqrtQ[pos]
    coef[0] = 0.0
    # grad_k = sum_{i > k} coef_i (S_i - m_k)   (0-based: nodes i > k)
    cS = coef[:, None] * S
    tail_cS = np.zeros_like(m)
    tail_c = np.zeros(K)
    tail_cS[:-1] = np.cumsum(cS[::-1], axis=0)[::-1][1:]
    tail_c[:-1] = np.cumsum(coef[::-1])[::-1][1:]
    grad = tail_cS - tail_c[:, None] * m
    return bound, grad


def mabn_expected_energy(mean_directions, kappa, mu0=None, return_gradient=False):
    """E_q[kappa (-s_i)^T u_i] = -kappa sum_{j<i} E[u_j]^T E[u_i] for nodes i = 1..K.

    Parameters
    ----------
    mean_directions : array_like of shape (K, p)
        E_q[u_k] in the network's order (norms <= 1).
    kappa : float
        Prior concentration >= 0.
    mu0 : array_like of shape (p,) or None, default=None
        Mean direction of node 1's vMF(mu0, kappa). None: node 1's term is 0
        (s_1 = 0); otherwise kappa mu0^T E[u_1].
    return_gradient : bool, default=False
        Also return the gradient of the sum over nodes.

    Returns
    -------
    energy : ndarray of float64 of shape (K,)
        Per-node expected exponents, in nats ([Xie] supplement Eq. 6, first
        two terms; exact since u_i and s_i are independent under q).
    gradient : ndarray of shape (K, p), only if ``return_gradient``
        -kappa (sum_l E u_l - E u_k) (+ kappa mu0 for k = 1).
    """
    m = _check_means(mean_directions)
    kappa = _check_kappa_scalar(kappa)
    S = np.zeros_like(m)
    S[1:] = np.cumsum(m, axis=0)[:-1]
    energy = -kappa * np.einsum("kp,kp->k", S, m)
    mu0_v = None
    if mu0 is not None:
        mu0_v = np.asarray(mu0, dtype=np.float64)
        if mu0_v.shape != (m.shape[1],):
            raise ValueError(f"mu0 must have shape ({m.shape[1]},); got {mu0_v.shape}.")
        energy[0] = kappa * float(mu0_v @ m[0])
    if not return_gradient:
        return energy
    grad = -kappa * (m.sum(axis=0)[None, :] - m)
    if mu0_v is not None:
        grad[0] += kappa * mu0_v
    return energy, grad


def mabn_expected_log_prior_lower_bound(mean_directions, kappa, mu0,
                                        return_gradient=False):
    """Lower bounds on E_q[log p(u_i | u_1..u_{i-1})] of the Type II MABN prior [D].

    Parameters
    ----------
    mean_directions : array_like of shape (K, p)
        E_q[u_k] in the network's order (norms <= 1).
    kappa : float
        Prior concentration >= 0.
    mu0 : array_like of shape (p,)
        Unit mean direction of node 1.
    return_gradient : bool, default=False
        Also return the gradient of the sum.

    Returns
    -------
    lower : ndarray of float64 of shape (K,)
        Node 1: log C_p(kappa) + kappa mu0^T E u_1 (exact); node i >= 2:
        -kappa S_i^T E u_i - (upper bound on E log Z_i) from
        :func:`mabn_log_normalizer_upper_bound`. Nats. Sum over nodes
        <= E_q[log p_MABN(u_1, ..., u_K)]; the Gamma magnitudes' prior terms
        are separate (:func:`gamma_kl`, :func:`gamma_entropy`).
    gradient : ndarray of shape (K, p), only if ``return_gradient``
        Of the sum, with respect to the mean directions.
    """
    mu0 = np.asarray(mu0, dtype=np.float64)
    if mu0.ndim != 1 or abs(np.linalg.norm(mu0) - 1.0) > 1e-6:
        raise ValueError("mu0 must be a unit vector of shape (p,).")
    if return_gradient:
        e, ge = mabn_expected_energy(mean_directions, kappa, mu0, True)
        z, gz = mabn_log_normalizer_upper_bound(mean_directions, kappa, True)
        return e - z, ge - gz
    return (mabn_expected_energy(mean_directions, kappa, mu0)
            - mabn_log_normalizer_upper_bound(mean_directions, kappa))
