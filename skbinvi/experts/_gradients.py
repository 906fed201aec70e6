"""Gradients of the mixture-of-experts ELBO pieces for gradient ascent on q.

Every weight vector of the Bayesian mixture of experts (user guide :ref:`experts`;
[Xie] supplement section 2) is a = g u with q(u) = vMF(u | mu, kappa) and
q(g) = Gamma(g | shape r, rate s), K vectors for the experts (beta) and K for
the gates (eta), stored as :class:`~skbinvi.experts._bounds.VMFGammaParams`.
This module gives the gradients of the objective pieces of
:mod:`skbinvi.experts._bounds` with respect to (mu, kappa, r, s), as needed
to fit those parameters by (projected / Riemannian) gradient ascent, the step
of [Xie] that has no closed form ("the rest (a^ on the sphere by projected
gradient, r, s, bound parameters) by gradient ascent", user guide, "The algorithm"):

1. :func:`likelihood_bound_gradients`: of
   :func:`~skbinvi.experts._bounds.likelihood_bound` with the auxiliaries
   (xi, c, d) and the responsibilities phi held fixed;
2. :func:`kl_gradients`: of
   :func:`~skbinvi.experts._bounds.independent_prior_kl`;
3. :func:`mabn_gradients`: of the Type II MABN expected log prior lower bound
   :func:`~skbinvi.experts._bounds.mabn_expected_log_prior_lower_bound`;
4. :func:`angular_regularizer_gradients`: of the posterior-regularization
   term Omega({E u_k}) (:mod:`skbinvi.experts._angular`);
5. :func:`independent_prior_elbo_gradients`: 1 minus 2 for the expert and
   gate vectors (the gradient of
   :func:`~skbinvi.experts._bounds.independent_prior_elbo` at fixed
   auxiliaries);
6. steps on the sphere and on log-scale positive parameters:
   :func:`project_to_tangent`, :func:`retract_to_sphere`,
   :func:`log_parametrization_gradient`, :func:`ascent_step`.

Coordinate ascent
-----------------
Holding (phi, xi, c, d) fixed while stepping (mu, kappa, r, s) is valid
coordinate ascent on the lower bound: every auxiliary enters a bound that
holds for all of its values, the auxiliaries are then re-optimized in closed
form or by their own solver (:func:`~skbinvi.experts._bounds.expert_bound`,
:func:`~skbinvi.experts._bounds.optimal_gate_auxiliaries`,
:func:`~skbinvi.experts._bounds.optimal_responsibilities`), and neither step
decreases the bound. At the optimal auxiliaries the fixed-auxiliary gradient
also equals the gradient of the profiled bound (envelope theorem), since each
auxiliary is an interior stationary point.

Gradient conventions
--------------------
Gradients are returned in :class:`VMFGammaGradient` (fields mu (K, p),
kappa (K,), r (K,), s (K,)); a field on which the function does not depend
is zero, so gradients of different pieces can be added field by field
(:func:`combine`). The mu field is the Euclidean gradient of the expression
written with ||mu_k|| = 1 substituted (as
:func:`~skbinvi.experts._vmf.vmf_kl_gradient`); only its tangent part
(:func:`project_to_tangent`) is meaningful on the sphere. All objective
values are in nats (Omega in radians); gradients are per unit of parameter.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016, supplement Eqs. 5-20.
[JJ] T. Jaakkola, M. Jordan, "Bayesian parameter estimation via variational
methods", Statistics and Computing 10 (2000) 25-37.
[Bou] G. Bouchard, "Efficient bounds for the softmax function", 2007.
[AM] P.-A. Absil, R. Mahony, R. Sepulchre, "Optimization Algorithms on
Matrix Manifolds", Princeton 2008, sections 3.6 (Riemannian gradient of a
submanifold: tangent projection) and 4.1 (retractions; x / ||x|| on the
sphere).
[D] our derivations, written out in the docstrings and checked against
central finite differences in tests/test_experts_gradients.py.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.utils.extmath import row_norms

from ._angular import mutual_angular_value_and_gradient
from ._bounds import (
    VMFGammaParams,
    _check_params,
    _check_phi,
    _check_X,
    _check_y,
    expected_log_sigmoid_bound,
    expected_logsumexp_upper_bound,
    gamma_kl,
    jj_lambda,
    mabn_expected_log_prior_lower_bound,
)
from ._vmf import _bessel_quantities, vmf_kl, vmf_kl_gradient

__all__ = [
    "MomentCoefficients",
    "VMFGammaGradient",
    "angular_regularizer_gradients",
    "ascent_step",
    "chain_coefficients",
    "combine",
    "gamma_kl_gradient",
    "independent_prior_elbo_gradients",
    "kl_gradients",
    "likelihood_bound_gradients",
    "log_parametrization_gradient",
    "mabn_gradients",
    "mean_direction_chain",
    "moment_coefficients",
    "project_to_tangent",
    "retract_to_sphere",
]


class VMFGammaGradient(NamedTuple):
    """Gradient of a scalar objective with respect to VMFGammaParams fields.

    Attributes
    ----------
    mu : ndarray of shape (K, p)
        Euclidean gradient in the mean directions (project with
        :func:`project_to_tangent` for the sphere).
    kappa : ndarray of shape (K,)
        d/d kappa_k.
    r : ndarray of shape (K,)
        d/d r_k (Gamma shapes).
    s : ndarray of shape (K,)
        d/d s_k (Gamma rates).
    """

    mu: np.ndarray
    kappa: np.ndarray
    r: np.ndarray
    s: np.ndarray


def combine(*terms):
    """Weighted sum of gradients, field by field.

    Parameters
    ----------
    *terms : (float, VMFGammaGradient) pairs
        Weights w_i and gradients G_i (same K, p).

    Returns
    -------
    grad : VMFGammaGradient
        sum_i w_i G_i.
    """
    if not terms:
        raise ValueError("combine needs at least one (weight, gradient) pair.")
    fields = []
    for f in range(4):
        fields.append(sum(float(w) * np.asarray(g[f], dtype=np.float64)
                          for w, g in terms))
    return VMFGammaGradient(*fields)


# ---------------------------------------------------------------------------
# moments of projections: coefficients and their derivatives
# ---------------------------------------------------------------------------


class MomentCoefficients(NamedTuple):
    """c1, c2, c3 of the projection moments and their parameter derivatives.

    E[a_k^T x] = c1_k t and E[(a_k^T x)^2] = c2_k ||x||^2 + c3_k t^2 with
    t = mu_k^T x (see :func:`moment_coefficients`). Every field has shape (K,).
    """

    c1: np.ndarray
    c2: np.ndarray
    c3: np.ndarray
    dc1_dkappa: np.ndarray
    dc2_dkappa: np.ndarray
    dc3_dkappa: np.ndarray
    dc1_dr: np.ndarray
    dc2_dr: np.ndarray
    dc3_dr: np.ndarray
    dc1_ds: np.ndarray
    dc2_ds: np.ndarray
    dc3_ds: np.ndarray


def _checked_coefficients(mu, kappa, r, s):
    p = mu.shape[1]
    p_arr = np.full(kappa.shape, float(p))
    a, a_over_k, omega, da, _ = _bessel_quantities(p_arr, kappa)
    # d(A/kappa)/dkappa = (A' - A/kappa)/kappa = (omega - A^2)/kappa by the
    # Riccati identity A' = 1 - A^2 - (p-1) A/kappa. omega - A^2 is accurate
    # at small kappa (omega from expm1 in the series region), A' - A/kappa at
    # large kappa (A' from the asymptotic series; omega - A^2 there loses
    # ~kappa eps relative, 3e-11 at kappa = 1e5). The numerator is
    # O(kappa^2) at small and O(1/kappa) at large kappa. At kappa = 0 the
    # limit is 0 (A/kappa is even in kappa).
    with np.errstate(divide="ignore", invalid="ignore"):
        num = np.where(kappa > p, da - a_over_k, omega - a * a)
        d_aok = np.where(kappa > 0.0, num / kappa, 0.0)
    e_g = r / s
    e_g2 = (r + r * r) / (s * s)
    c1 = e_g * a
    c2 = e_g2 * a_over_k
    c3 = e_g2 * omega
    de_g2_dr = (2.0 * r + 1.0) / (s * s)
    de_g2_ds = -2.0 * e_g2 / s
    return MomentCoefficients(
        c1, c2, c3,
        e_g * da, e_g2 * d_aok, -p * e_g2 * d_aok,
        a / s, de_g2_dr * a_over_k, de_g2_dr * omega,
        -e_g * a / s, de_g2_ds * a_over_k, de_g2_ds * omega)


def moment_coefficients(params):
    """Coefficients of the projection moments under q and their derivatives [D].

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        mu (K, p) unit rows, kappa (K,) >= 0, r (K,) > 0, s (K,) > 0.

    Returns
    -------
    coef : MomentCoefficients
        With A = A_p(kappa) (:func:`~skbinvi.experts._vmf.bessel_ratio`),
        E g = r/s, E g^2 = r (r+1)/s^2:

        * c1 = (r/s) A,
        * c2 = (r (r+1)/s^2) A/kappa,
        * c3 = (r (r+1)/s^2) (1 - p A/kappa),

        so that E[a_k^T x] = c1_k mu_k^T x and E[(a_k^T x)^2] =
        c2_k ||x||^2 + c3_k (mu_k^T x)^2, exactly as
        :func:`~skbinvi.experts._bounds.projection_moments` (tested), and
        their derivatives in kappa, r and s (all shape (K,)).

    Notes
    -----
    [D] With A' = dA/dkappa (:func:`~skbinvi.experts._vmf.d_bessel_ratio_dkappa`)
    and D = d(A/kappa)/dkappa = (A' - A/kappa)/kappa = (1 - p A/kappa - A^2)/kappa
    (Riccati identity A' = 1 - A^2 - (p-1) A/kappa; D -> 0 as kappa -> 0):

        dc1/dkappa = (r/s) A',   dc2/dkappa = E g^2 D,   dc3/dkappa = -p E g^2 D,
        dc1/dr = A/s,            dc{2,3}/dr = ((2r+1)/s^2) {A/kappa, 1 - p A/kappa},
        dc1/ds = -r A/s^2,       dc{2,3}/ds = -(2/s) c{2,3}.
    """
    mu, kappa, r, s = _check_params(params)
    return _checked_coefficients(mu, kappa, r, s)


# ---------------------------------------------------------------------------
# 1. likelihood bound at fixed auxiliaries
# ---------------------------------------------------------------------------


def _chain_moments(X, sq, mu, coef, g_mean, g_second):
    """Chain dL/dmean, dL/dsecond (n, K) to mu, kappa, r, s [D]."""
    t = np.asarray(X @ mu.T)  # (n, K)
    g_t = g_mean * coef.c1 + 2.0 * g_second * coef.c3 * t
    if sp.issparse(X):
        g_mu = np.asarray(X.T @ g_t).T
    else:
        g_mu = g_t.T @ X
    g_c1 = np.einsum("nk,nk->k", g_mean, t)
    g_c2 = sq @ g_second
    g_c3 = np.einsum("nk,nk->k", g_second, t * t)
    mean = coef.c1 * t
    second = coef.c2 * sq[:, None] + coef.c3 * t * t
    return chain_coefficients(coef, g_mu, g_c1, g_c2, g_c3), mean, second


def chain_coefficients(coef, g_mu, g_c1, g_c2, g_c3):
    """Assemble dL/d(mu, kappa, r, s) from dL/dmu and dL/d(c1, c2, c3) [D].

    Parameters
    ----------
    coef : MomentCoefficients
        From :func:`moment_coefficients`.
    g_mu : ndarray of shape (K, p)
        Partial derivative in mu at fixed (c1, c2, c3).
    g_c1, g_c2, g_c3 : ndarray of shape (K,)
        Partial derivatives in the moment coefficients.

    Returns
    -------
    grad : VMFGammaGradient
        mu: ``g_mu``; theta in (kappa, r, s):
        sum_i dL/dc_i dc_i/dtheta (chain rule).
    """
    g_kappa = g_c1 * coef.dc1_dkappa + g_c2 * coef.dc2_dkappa + g_c3 * coef.dc3_dkappa
    g_r = g_c1 * coef.dc1_dr + g_c2 * coef.dc2_dr + g_c3 * coef.dc3_dr
    g_s = g_c1 * coef.dc1_ds + g_c2 * coef.dc2_ds + g_c3 * coef.dc3_ds
    return VMFGammaGradient(g_mu, g_kappa, g_r, g_s)


def likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d, return_value=False):
    """Gradients of the likelihood lower bound at fixed (phi, xi, c, d) [D].

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta, eta : VMFGammaParams or 4-sequence
        q of the expert and gate vectors: mu (K, p) unit rows, kappa (K,),
        r (K,), s (K,).
    phi : array_like of shape (n, K)
        Responsibilities q(z_n) (rows on the simplex), held fixed.
    xi : array_like of shape (n, K)
        Expert [JJ] parameters e_nk, held fixed.
    c : array_like of shape (n,)
        Gate [Bou] parameters, held fixed.
    d : array_like of shape (n, K)
        Gate [JJ] parameters, held fixed.
    return_value : bool, default=False
        Also return the bound's value at these auxiliaries.

    Returns
    -------
    grad_beta : VMFGammaGradient
        dL/d(mu, kappa, r, s) of the expert vectors.
    grad_eta : VMFGammaGradient
        dL/d(mu, kappa, r, s) of the gate vectors.
    value : float, only if ``return_value``
        :func:`~skbinvi.experts._bounds.likelihood_bound` with the given
        phi, xi, c, d (nats, total over samples).

    Notes
    -----
    [D] Write t_nk = mu_k^T x_n and, for either set of vectors,
    M_nk = E[a_k^T x_n] = c1_k t_nk and
    V_nk = E[(a_k^T x_n)^2] = c2_k ||x_n||^2 + c3_k t_nk^2
    (:func:`moment_coefficients`). For fixed auxiliaries the bound
    L = sum_nk phi_nk expert_nk + sum_nk phi_nk M^eta_nk - sum_n lse_n + H(phi)
    is linear in the moments:

    * expert_nk = log sig(xi_nk) + ((2 y_n - 1) M^beta_nk - xi_nk)/2
      - lam(xi_nk) (V^beta_nk - xi_nk^2), hence
      dL/dM^beta_nk = phi_nk (2 y_n - 1)/2 and dL/dV^beta_nk = -phi_nk lam(xi_nk);
    * lse_n = c_n + sum_j [-log sig(d_nj) + (M^eta_nj - c_n + d_nj)/2
      + lam(d_nj) (V^eta_nj - 2 c_n M^eta_nj + c_n^2 - d_nj^2)] (the gate's
      E[(t - c)^2] = V - 2 c M + c^2), hence
      dL/dM^eta_nk = phi_nk - 1/2 + 2 c_n lam(d_nk) and
      dL/dV^eta_nk = -lam(d_nk).

    With G_M = dL/dM and G_V = dL/dV ((n, K) arrays):

        dL/dt_nk   = c1_k G_M,nk + 2 c3_k t_nk G_V,nk,
        dL/dmu_k   = sum_n dL/dt_nk x_n          (X^T (dL/dt), O(nnz(X) K)),
        dL/dc1_k   = sum_n G_M,nk t_nk,
        dL/dc2_k   = sum_n G_V,nk ||x_n||^2,
        dL/dc3_k   = sum_n G_V,nk t_nk^2,

    then dL/dtheta = sum_i dL/dc_i dc_i/dtheta for theta in (kappa, r, s)
    (:func:`moment_coefficients`). The entropy H(phi) and the auxiliaries do
    not depend on (mu, kappa, r, s). The mu gradient is Euclidean (the
    formula with ||mu_k|| = 1 substituted); project it with
    :func:`project_to_tangent`. Cost O(nnz(X) K + n K).

    The gate's variance is used as V - M^2 without the clip at 0 that
    :func:`~skbinvi.experts._bounds.expected_logsumexp_upper_bound` applies
    against rounding (V >= M^2 holds exactly under q).
    """
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    beta_c = _check_params(beta, p, "beta")
    eta_c = _check_params(eta, p, "eta")
    K = beta_c[0].shape[0]
    if eta_c[0].shape[0] != K:
        raise ValueError(f"beta has {K} experts but eta has {eta_c[0].shape[0]}.")
    phi = _check_phi(phi, n, K)
    xi = np.asarray(xi, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if xi.shape != (n, K):
        raise ValueError(f"xi must have shape ({n}, {K}); got {xi.shape}.")
    if d.shape != (n, K):
        raise ValueError(f"d must have shape ({n}, {K}); got {d.shape}.")
    if c.shape != (n,):
        raise ValueError(f"c must have shape ({n},); got {c.shape}.")
    sq = row_norms(X, squared=True)
    sign = 2.0 * y - 1.0

    lam_xi = jj_lambda(xi)
    gb, mean_b, second_b = _chain_moments(
        X, sq, beta_c[0], _checked_coefficients(*beta_c),
        0.5 * phi * sign[:, None], -phi * lam_xi)
    lam_d = jj_lambda(d)
    ge, mean_e, second_e = _chain_moments(
        X, sq, eta_c[0], _checked_coefficients(*eta_c),
        phi - 0.5 + 2.0 * c[:, None] * lam_d, -lam_d)
    if not return_value:
        return gb, ge
    expert = expected_log_sigmoid_bound(sign[:, None] * mean_b, second_b, xi)[0]
    lse = expected_logsumexp_upper_bound(mean_e, second_e, c, d)[0]
    value = float(np.sum(phi * (expert + mean_e)) - np.sum(lse)
                  + np.sum(special.entr(phi)))
    return gb, ge, value


# ---------------------------------------------------------------------------
# 2. KL to the independent priors
# ---------------------------------------------------------------------------


def gamma_kl_gradient(r, s, alpha1, alpha2):
    """Gradient of :func:`~skbinvi.experts._bounds.gamma_kl` in (r, s) [D].

    Parameters
    ----------
    r, s : float or array_like
        Shape and rate of q, > 0.
    alpha1, alpha2 : float or array_like
        Shape and rate of the prior, > 0. All four broadcast.

    Returns
    -------
    grad_r : ndarray of float64
        (r - alpha1) psi'(r) + alpha2/s - 1.
    grad_s : ndarray of float64
        alpha1/s - r alpha2/s^2.

    Notes
    -----
    [D] KL = (r - alpha1) psi(r) - log Gamma(r) + log Gamma(alpha1)
    + alpha1 (log s - log alpha2) + r (alpha2 - s)/s. In r: psi(r)
    + (r - alpha1) psi'(r) - psi(r) + (alpha2 - s)/s; in s: alpha1/s
    - r alpha2/s^2. On grad_s = 0, s = r alpha2/alpha1, grad_r becomes
    (r - alpha1) (psi'(r) - 1/r), and psi'(r) > 1/r for r > 0, so
    (alpha1, alpha2) (where KL = 0) is the only stationary point.
    """
    r, s, a1, a2 = (np.asarray(v, dtype=np.float64) for v in (r, s, alpha1, alpha2))
    for v, name in ((r, "r"), (s, "s"), (a1, "alpha1"), (a2, "alpha2")):
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name} must be finite and > 0.")
    g_r = (r - a1) * special.polygamma(1, r) + a2 / s - 1.0
    g_s = a1 / s - r * a2 / (s * s)
    return g_r, g_s


def _check_prior(prior, K, p):
    if len(prior) != 4:
        raise ValueError("prior must be (mu0, kappa0, alpha1, alpha2).")
    mu0, kappa0, alpha1, alpha2 = prior
    mu0 = np.atleast_2d(np.asarray(mu0, dtype=np.float64))
    if mu0.ndim != 2 or mu0.shape[1] != p or mu0.shape[0] not in (1, K):
        raise ValueError(f"prior mu0 must have shape ({p},) or ({K}, {p}); "
                         f"got {np.shape(prior[0])}.")
    mu0 = np.broadcast_to(mu0, (K, p))
    kappa0 = np.broadcast_to(np.asarray(kappa0, dtype=np.float64), (K,))
    return mu0, kappa0, alpha1, alpha2


def kl_gradients(params, prior, return_value=False):
    """Gradient of sum_k KL(q(u_k) q(g_k) || vMF(mu0, kappa0) Gamma(alpha1, alpha2)).

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        mu (K, p), kappa (K,), r (K,), s (K,).
    prior : VMFGammaPrior or 4-sequence
        (mu0, kappa0, alpha1, alpha2); mu0 of shape (p,) or (K, p), the others
        scalars or (K,).
    return_value : bool, default=False
        Also return the KL values (shape (K,), nats).

    Returns
    -------
    grad : VMFGammaGradient
        Of the summed KL (so row k is the gradient of KL_k):
        mu: -kappa0 A_p(kappa_k) mu0 (Euclidean),
        kappa: A_p'(kappa_k) (kappa_k - kappa0 mu0^T mu_k)
        (:func:`~skbinvi.experts._vmf.vmf_kl_gradient`),
        r, s: :func:`gamma_kl_gradient`.
    kl : ndarray of shape (K,), only if ``return_value``
        As :func:`~skbinvi.experts._bounds.independent_prior_kl`.

    Notes
    -----
    The prior's mu0 is broadcast to (K, p) before calling
    :func:`~skbinvi.experts._vmf.vmf_kl_gradient`, so a shared mu0 of shape
    (p,) may be combined with per-vector kappa0 of shape (K,).
    """
    mu, kappa, r, s = _check_params(params)
    K, p = mu.shape
    mu0, kappa0, alpha1, alpha2 = _check_prior(prior, K, p)
    g_mu, g_k = vmf_kl_gradient(mu, kappa, mu0, kappa0)
    g_r, g_s = gamma_kl_gradient(r, s, alpha1, alpha2)
    grad = VMFGammaGradient(np.asarray(g_mu, dtype=np.float64).reshape(K, p),
                            np.asarray(g_k, dtype=np.float64).reshape(K),
                            np.broadcast_to(g_r, (K,)).astype(np.float64),
                            np.broadcast_to(g_s, (K,)).astype(np.float64))
    if not return_value:
        return grad
    kl = (np.asarray(vmf_kl(mu, kappa, mu0, kappa0)).reshape(K)
          + np.broadcast_to(gamma_kl(r, s, alpha1, alpha2), (K,)))
    return grad, kl


def independent_prior_elbo_gradients(X, y, beta, eta, phi, xi, c, d, *, prior,
                                     prior_eta=None, return_value=False):
    """Gradients of the independent-prior ELBO at fixed (phi, xi, c, d).

    Parameters
    ----------
    X, y, beta, eta, phi, xi, c, d
        As in :func:`likelihood_bound_gradients`.
    prior : VMFGammaPrior or 4-sequence
        Prior of the expert vectors (and of the gates unless ``prior_eta``).
    prior_eta : VMFGammaPrior or 4-sequence or None
        Prior of the gate vectors; None: ``prior``.
    return_value : bool, default=False
        Also return the ELBO's value at these auxiliaries.

    Returns
    -------
    grad_beta, grad_eta : VMFGammaGradient
        Of L_lik - sum_k KL(q(beta_k) || prior) - sum_k KL(q(eta_k) || prior_eta)
        (:func:`~skbinvi.experts._bounds.independent_prior_elbo`).
    value : float, only if ``return_value``
        That ELBO at the given auxiliaries (equal to
        :func:`~skbinvi.experts._bounds.independent_prior_elbo` when they are
        the optimal ones), nats.
    """
    out = likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d, return_value)
    prior_e = prior if prior_eta is None else prior_eta
    kb = kl_gradients(beta, prior, return_value)
    ke = kl_gradients(eta, prior_e, return_value)
    if not return_value:
        return (combine((1.0, out[0]), (-1.0, kb)),
                combine((1.0, out[1]), (-1.0, ke)))
    value = out[2] - float(np.sum(kb[1])) - float(np.sum(ke[1]))
    return (combine((1.0, out[0]), (-1.0, kb[0])),
            combine((1.0, out[1]), (-1.0, ke[0])), value)


# ---------------------------------------------------------------------------
# 3.-4. functions of the mean directions E[u_k] = A_p(kappa_k) mu_k
# ---------------------------------------------------------------------------


def mean_direction_chain(params, grad_mean):
    """Chain dF/dE[u_k] to (mu, kappa) through E[u_k] = A_p(kappa_k) mu_k [D].

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        mu (K, p), kappa (K,), r, s.
    grad_mean : array_like of shape (K, p)
        dF/dm_k at m_k = A_p(kappa_k) mu_k.

    Returns
    -------
    grad : VMFGammaGradient
        mu: A_p(kappa_k) dF/dm_k; kappa: A_p'(kappa_k) mu_k^T dF/dm_k;
        r, s: 0.
    """
    mu, kappa, _, _ = _check_params(params)
    K, p = mu.shape
    g = np.asarray(grad_mean, dtype=np.float64)
    if g.shape != (K, p):
        raise ValueError(f"grad_mean must have shape ({K}, {p}); got {g.shape}.")
    a, _, _, da, _ = _bessel_quantities(np.full(K, float(p)), kappa)
    return VMFGammaGradient(a[:, None] * g, da * np.einsum("kp,kp->k", mu, g),
                            np.zeros(K), np.zeros(K))


def mabn_gradients(params, kappa_prior, mu0, return_value=False):
    """Gradient of the Type II MABN expected log prior lower bound in (mu, kappa).

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        q of the K direction vectors, rows in the network's order.
    kappa_prior : float
        The MABN concentration kappa >= 0.
    mu0 : array_like of shape (p,)
        Unit mean direction of node 1.
    return_value : bool, default=False
        Also return the summed bound.

    Returns
    -------
    grad : VMFGammaGradient
        Of F = sum_i mabn_expected_log_prior_lower_bound(E[u], kappa_prior, mu0)_i
        (:func:`~skbinvi.experts._bounds.mabn_expected_log_prior_lower_bound`,
        <= E_q log p_MABN(u_1..u_K)); mu (Euclidean) and kappa fields; r, s are 0
        (the Gamma magnitudes' prior is separate).
    value : float, only if ``return_value``
        F, nats.

    Notes
    -----
    [D] F depends on q only through m_k = E[u_k] = A_p(kappa_k) mu_k
    ([Xie] supplement item (I)); with G = dF/dm (returned by the bound,
    derived in :func:`~skbinvi.experts._bounds.mabn_log_normalizer_upper_bound`),
    dF/dmu_k = A_p(kappa_k) G_k and dF/dkappa_k = A_p'(kappa_k) mu_k^T G_k
    (:func:`mean_direction_chain`). The full MABN ELBO also needs the vMF
    entropy of q (e.g. -:func:`kl_gradients` with kappa0 = 0 gives the
    gradient of H[q(u)] - log |S^{p-1}|).
    """
    mu, kappa, r, s = _check_params(params)
    K, p = mu.shape
    a = _bessel_quantities(np.full(K, float(p)), kappa)[0]
    value, g = mabn_expected_log_prior_lower_bound(a[:, None] * mu, kappa_prior, mu0,
                                                   return_gradient=True)
    grad = mean_direction_chain((mu, kappa, r, s), g)
    if return_value:
        return grad, float(np.sum(value))
    return grad


def angular_regularizer_gradients(params, gamma, return_value=False):
    """Gradient of Omega({E[u_k]}) in (mu, kappa) (posterior regularization) [D].

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        q of the K vectors; kappa_k > 0 (E[u_k] = 0 at kappa_k = 0, where the
        angles are undefined).
    gamma : float
        Weight of the variance term of Omega, >= 0.
    return_value : bool, default=False
        Also return Omega.

    Returns
    -------
    grad : VMFGammaGradient
        mu: dOmega/dmu_k (Euclidean, orthogonal to mu_k); kappa: 0; r, s: 0.
    value : float, only if ``return_value``
        Omega({E[u_k]}) = Omega({mu_k}), radians
        (:func:`~skbinvi.experts._angular.mutual_angular_regularizer`).

    Notes
    -----
    [D] Omega depends on the rows only through the angles between them, so
    it is invariant to positive rescaling of each row:
    Omega({A_p(kappa_k) mu_k}) = Omega({mu_k}) for A_p(kappa_k) > 0
    (kappa_k > 0). Hence its gradient in kappa is exactly 0 (equivalently:
    by the chain rule it is A_p'(kappa_k) mu_k^T G_k with G_k = dOmega/dm_k
    orthogonal to m_k, which :mod:`~skbinvi.experts._angular` guarantees),
    and the mu gradient A_p(kappa_k) G_k(A mu) = G_k(mu) because
    dOmega/dm is homogeneous of degree -1 in each row. Both identities are
    tested. Cost O(K^2 p).
    """
    mu, kappa, _, _ = _check_params(params)
    if np.any(kappa <= 0.0):
        raise ValueError("angular_regularizer_gradients needs kappa > 0 "
                         "(E[u_k] = 0 at kappa_k = 0).")
    K = mu.shape[0]
    value, g = mutual_angular_value_and_gradient(mu, gamma)
    grad = VMFGammaGradient(g, np.zeros(K), np.zeros(K), np.zeros(K))
    if return_value:
        return grad, float(value)
    return grad


# ---------------------------------------------------------------------------
# 5. steps on the sphere and positive parameters
# ---------------------------------------------------------------------------


def project_to_tangent(mu, grad):
    """Riemannian gradient on the unit sphere: (I - mu_k mu_k^T) grad_k per row [AM].

    Parameters
    ----------
    mu : array_like of shape (K, p) or (p,)
        Points on the sphere (unit rows; re-normalized here).
    grad : array_like, same shape
        Euclidean gradients.

    Returns
    -------
    tangent : ndarray of float64, same shape
        grad_k - (mu_k^T grad_k) mu_k, orthogonal to mu_k. This is the
        gradient of the restriction to the sphere ([AM] section 3.6.1), and
        the directional derivative along any tangent v is tangent^T v.
    """
    mu = np.asarray(mu, dtype=np.float64)
    grad = np.asarray(grad, dtype=np.float64)
    if mu.shape != grad.shape:
        raise ValueError(f"mu and grad must have the same shape; got {mu.shape} "
                         f"and {grad.shape}.")
    u = retract_to_sphere(mu)
    return grad - np.sum(grad * u, axis=-1, keepdims=True) * u


def retract_to_sphere(mu):
    """Retraction x -> x / ||x|| of each row onto the unit sphere [AM].

    Parameters
    ----------
    mu : array_like of shape (K, p) or (p,)
        Nonzero rows (e.g. mu + step * tangent gradient).

    Returns
    -------
    unit : ndarray of float64, same shape
        Rows divided by their Euclidean norms. For tangent v,
        R(mu + h v) = mu + h v + O(h^2) ([AM] example 4.1.1).
    """
    mu = np.asarray(mu, dtype=np.float64)
    norms = np.linalg.norm(mu, axis=-1, keepdims=True)
    if np.any(norms == 0.0) or not np.all(np.isfinite(norms)):
        raise ValueError("cannot retract zero or non-finite rows onto the sphere.")
    return mu / norms


def log_parametrization_gradient(params, grad):
    """Gradient in (mu, log kappa, log r, log s): chain factor grad * value.

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        Current mu, kappa, r, s.
    grad : VMFGammaGradient or 4-sequence
        Gradient in (mu, kappa, r, s).

    Returns
    -------
    grad_log : VMFGammaGradient
        mu unchanged; kappa * dF/dkappa, r * dF/dr, s * dF/ds
        (dF/dlog x = x dF/dx). Steps in log scale keep kappa, r, s positive.
    """
    mu, kappa, r, s = _check_params(params)
    g_mu, g_k, g_r, g_s = (np.asarray(v, dtype=np.float64) for v in grad)
    return VMFGammaGradient(g_mu, kappa * g_k, r * g_r, s * g_s)


def ascent_step(params, grad, step_size, log_scale=True):
    """One gradient-ascent step: retraction on the sphere, log scale for the rest.

    Parameters
    ----------
    params : VMFGammaParams or 4-sequence
        Current mu (K, p), kappa, r, s.
    grad : VMFGammaGradient or 4-sequence
        Gradient of the objective in (mu, kappa, r, s) (Euclidean mu).
    step_size : float or 4-sequence of float
        Step length(s) for (mu, kappa, r, s); one float is shared.
    log_scale : bool, default=True
        If True, kappa, r, s move along the log-parametrized gradient:
        x <- x exp(step x dF/dx) (always positive; kappa = 0 stays 0).
        If False, x <- x + step dF/dx (may leave the domain; the checks of
        :mod:`~skbinvi.experts._bounds` then raise).

    Returns
    -------
    new_params : VMFGammaParams
        mu <- retract_to_sphere(mu + step project_to_tangent(mu, dF/dmu)).

    Notes
    -----
    For a small enough step the objective increases whenever the (projected,
    log-scaled) gradient is nonzero: the step direction has positive inner
    product with the gradient of the composition with the retraction and
    the exponential, whose differentials at step 0 are the identity and
    diag(x) ([AM] section 4.2).
    """
    mu, kappa, r, s = _check_params(params)
    steps = np.broadcast_to(np.asarray(step_size, dtype=np.float64), (4,))
    g_mu, g_k, g_r, g_s = (np.asarray(v, dtype=np.float64) for v in grad)
    new_mu = retract_to_sphere(mu + steps[0] * project_to_tangent(mu, g_mu))
    if log_scale:
        new = [x * np.exp(h * x * g) for x, h, g in
               ((kappa, steps[1], g_k), (r, steps[2], g_r), (s, steps[3], g_s))]
    else:
        new = [x + h * g for x, h, g in
               ((kappa, steps[1], g_k), (r, steps[2], g_r), (s, steps[3], g_s))]
    return VMFGammaParams(new_mu, *new)
