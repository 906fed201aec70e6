"""Reference implementations for the tests of :mod:`skbinvi.experts`.

Moved out of the package (issue 74): the closed-form bounds, KL divergences,
vMF moments and the NumPy gradient implementation of the BMEM objective, the
plain drivers ``fit_variational`` / ``fit_gaussian_variational`` /
``run_monte_carlo_em``, and the NumPy likelihood of the Metropolis-Hastings
sampler. The estimator runs the fused kernels of ``_ascent``, ``_bounds``,
``_variational`` and ``_mcmc``; the tests compare those kernels with these
formulas and with finite differences / enumeration.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.utils import check_random_state
from sklearn.utils.extmath import row_norms

from skbinvi.experts._angular import _check_A, value_and_grad_unchecked
from skbinvi.experts._ascent import ObjectiveConfig, prior_constants
from skbinvi.experts._bounds import (
    _MEAN_NORM_TOL,
    VMFGammaParams,
    _check_X,
    _check_y,
    _d_given_c,
    _gate_bracket,
    _gate_coordinate,
    _gate_moments,
    _gate_start,
    _positive,
    _row_outputs,
    _row_pass,
    _rows_source,
    expected_log_sigmoid_bound,
    expected_logsumexp_upper_bound,
    jj_lambda,
    likelihood_pieces_from_moments,
)
from skbinvi.experts._mcmc import (
    _loglik_fast,
    fit_mabn_hyperparameters,
    run_metropolis_hastings,
)
from skbinvi.experts._variational import (
    VariationalState,
    _fixed_aux_statistics,
    _init_params,
    _mean_directions,
    _use_statistics,
    gaussian_init,
    gaussian_iteration,
    gaussian_objective_and_aux,
    objective_and_aux,
    variational_iteration,
)
from skbinvi.experts._vmf import (
    _as_kappa,
    _bessel_quantities,
    _check_mu_kappa,
    _log_iv_pieces,
    _log_normalizer_scaled,
    _prepare_p_kappa,
    _scalar_or_array,
    _series_mask,
    log_normalizer,
    vmf_entropy,
)

# ---------------------------------------------------------------------------
# von Mises-Fisher functions (were skbinvi/experts/_vmf.py)
# ---------------------------------------------------------------------------


def log_bessel_iv(nu, kappa):
    """log I_nu(kappa), the log of the modified Bessel function of the first kind.

    Parameters
    ----------
    nu : float or array_like
        Order, nu >= 0 (for the vMF normalizer nu = p/2 - 1).
    kappa : float or array_like
        Argument, kappa >= 0, finite; broadcast against ``nu``.

    Returns
    -------
    log_iv : float or ndarray of float64
        log I_nu(kappa), broadcast shape of the inputs. At kappa = 0 it is 0
        for nu = 0 and -inf for nu > 0.

    Notes
    -----
    ``log(scipy.special.ive(nu, kappa)) + kappa`` where ive (= I_nu e^{-kappa})
    neither underflows nor is in the small-argument region; elsewhere the
    power series [AS 9.6.10]
    log I_nu(kappa) = nu log(kappa/2) - log Gamma(nu+1) + log 0F1(; nu+1; kappa^2/4),
    whose leading term is the small-kappa limit. Relative accuracy ~1e-14
    against mpmath for nu <= 100, kappa in [1e-8, 1e5] (tests).
    """
    nu_arr = np.asarray(nu, dtype=np.float64)
    if not np.all(np.isfinite(nu_arr)) or np.any(nu_arr < 0):
        raise ValueError(f"nu must be finite and >= 0; got {nu!r}.")
    kappa = _as_kappa(kappa)
    nu_b, k_b = np.broadcast_arrays(nu_arr, kappa)
    shape = nu_b.shape
    nu_f, k_f = nu_b.ravel().astype(np.float64), k_b.ravel().astype(np.float64)
    mask = _series_mask(nu_f, k_f, 0.0)
    pieces = _log_iv_pieces(nu_f, k_f, mask)
    out = pieces + k_f  # the ive branch
    with np.errstate(divide="ignore", invalid="ignore"):
        lead = np.where(nu_f == 0.0, 0.0, nu_f * np.log(0.5 * k_f))
    series = lead - special.gammaln(nu_f + 1.0) + pieces
    out = np.where(mask, series, out)
    return _scalar_or_array(out.reshape(shape))


def bessel_ratio(p, kappa):
    """A_p(kappa) = I_{p/2}(kappa) / I_{p/2-1}(kappa), the vMF mean resultant length.

    Parameters
    ----------
    p : int or array_like of int
        Dimension of the ambient space, p >= 2 (the sphere is S^{p-1}).
    kappa : float or array_like
        Concentration, kappa >= 0, finite; broadcast against ``p``.

    Returns
    -------
    A : float or ndarray of float64
        A_p(kappa) in [0, 1): ||E x|| for x ~ vMF(mu, kappa) ([Xie] supplement
        item (I); [MJ] chapter 9). Increasing in kappa, A_p(0) = 0,
        A_p(kappa) = kappa/p (1 - kappa^2/(p (p+2)) + ...) for small kappa and
        A_p(kappa) = 1 - (p-1)/(2 kappa) + O(kappa^{-2}) for large kappa.

    Notes
    -----
    Ratio of ``scipy.special.ive`` values (the exponential scalings cancel);
    at small kappa or where ive underflows, (kappa/p) exp(L(p/2+1) - L(p/2)),
    L(b) = log 0F1(; b; kappa^2/4), which is exact at kappa = 0.
    """
    p_f, k_f, shape = _prepare_p_kappa(p, kappa)
    a = _bessel_quantities(p_f, k_f)[0]
    return _scalar_or_array(a.reshape(shape))


def d_bessel_ratio_dkappa(p, kappa):
    """dA_p/dkappa = 1 - A_p^2 - (p-1) A_p / kappa, the variance of mu^T x [D].

    Parameters
    ----------
    p : int or array_like of int
        Dimension, p >= 2.
    kappa : float or array_like
        Concentration, kappa >= 0, finite; broadcast against ``p``.

    Returns
    -------
    dA : float or ndarray of float64
        dA_p/dkappa > 0. Limits: 1/p at kappa = 0, (p-1)/(2 kappa^2) for large
        kappa.

    Notes
    -----
    [D] With nu = p/2 - 1, I_nu' = I_{nu+1} + (nu/kappa) I_nu and
    I_{nu+1}' = I_nu - ((nu+1)/kappa) I_{nu+1} [AS 9.6.26], so for
    A = I_{nu+1}/I_nu

        A' = I_{nu+1}'/I_nu - A I_nu'/I_nu
           = 1 - (nu+1) A/kappa - A (A + nu/kappa) = 1 - A^2 - (p-1) A/kappa.

    Since -log C_p is the log-partition function of the exponential family in
    t = mu^T x (d/dkappa (-log C_p(kappa)) = A_p(kappa)), A_p' = Var(mu^T x)
    >= 0. For kappa >= max(100, 2.5 (p-1)) the two sides of the difference
    agree to many digits, and the asymptotic series of
    ``_ratio_asymptotic`` is used instead. Needed for gradients of the ELBO
    with respect to a variational concentration (e.g. d/dkappa of
    kappa A_p(kappa) is A_p + kappa A_p').
    """
    p_f, k_f, shape = _prepare_p_kappa(p, kappa)
    da = _bessel_quantities(p_f, k_f)[3]
    return _scalar_or_array(da.reshape(shape))


def vmf_mean(mu, kappa):
    """E[x] = A_p(kappa) mu for x ~ vMF(mu, kappa) ([Xie] supplement item (I)).

    Parameters
    ----------
    mu : array_like of shape (p,) or (K, p)
        Mean directions, unit rows (| ||mu_k|| - 1 | <= 1e-6), p >= 2.
    kappa : float or array_like of shape (K,)
        Concentrations >= 0; a scalar is shared by all rows.

    Returns
    -------
    mean : ndarray of float64, same shape as ``mu``
        A_p(kappa_k) mu_k; its norm A_p(kappa_k) < 1.
    """
    mu2, kappa, single = _check_mu_kappa(mu, kappa)
    p = np.full(kappa.shape, float(mu2.shape[1]))
    a = _bessel_quantities(p, np.array(kappa, dtype=np.float64))[0]
    out = a[:, None] * mu2
    return out[0] if single else out


def vmf_second_moment(mu, kappa):
    """E[x x^T] = (A_p/kappa) I + (1 - p A_p/kappa) mu mu^T for x ~ vMF(mu, kappa) [D].

    Parameters
    ----------
    mu : array_like of shape (p,) or (K, p)
        Mean directions, unit rows.
    kappa : float or array_like of shape (K,)
        Concentrations >= 0.

    Returns
    -------
    second_moment : ndarray of float64, shape (p, p) or (K, p, p)
        Symmetric positive semi-definite, trace exactly 1 (||x|| = 1). At
        kappa = 0 it is I / p (the uniform distribution); as kappa -> inf it
        tends to mu mu^T.

    Notes
    -----
    [D] Let t = mu^T x. Because -log C_p(kappa) is the log-partition
    function in t, E t = A_p and Var t = A_p' (see
    :func:`d_bessel_ratio_dkappa`), so E t^2 = A_p' + A_p^2
    = 1 - (p-1) A_p/kappa. The law is invariant under rotations fixing mu, so
    E[x x^T] = E t^2 mu mu^T + s (I - mu mu^T) with (p-1) s = E||x||^2 - E t^2
    = (p-1) A_p/kappa, i.e. s = A_p / kappa. Hence
    E[x x^T] = (A_p/kappa) I + (1 - p A_p/kappa) mu mu^T. This is the
    expectation needed in Eq. 14 of the [Xie] supplement,
    E[a~^T x x^T a~] = x^T E[a~ a~^T] x.
    """
    mu2, kappa, single = _check_mu_kappa(mu, kappa)
    p = np.full(kappa.shape, float(mu2.shape[1]))
    _, a_over_k, omega, _, _ = _bessel_quantities(p, np.array(kappa, dtype=np.float64))
    eye = np.eye(mu2.shape[1])
    out = (a_over_k[:, None, None] * eye
           + omega[:, None, None] * mu2[:, :, None] * mu2[:, None, :])
    return out[0] if single else out


def vmf_covariance(mu, kappa):
    """Cov[x] for x ~ vMF(mu, kappa) ([Xie] supplement item (II)).

    Parameters
    ----------
    mu : array_like of shape (p,) or (K, p)
        Mean directions, unit rows.
    kappa : float or array_like of shape (K,)
        Concentrations >= 0.

    Returns
    -------
    cov : ndarray of float64, shape (p, p) or (K, p, p)
        (A_p/kappa) (I - mu mu^T) + A_p' mu mu^T, which equals the
        supplement's (h/kappa) I + (1 - 2 (nu+1) h/kappa - h^2) mu mu^T with
        h = A_p(kappa) = I_{nu+1}/I_nu, nu = p/2 - 1 (2 (nu+1) = p).
        trace(cov) + ||E x||^2 = 1 exactly, i.e. E||x||^2 = 1 [D].

    Notes
    -----
    [D] Subtract E x E x^T = A_p^2 mu mu^T from :func:`vmf_second_moment`:
    cov = (A/kappa) I + (1 - p A/kappa - A^2) mu mu^T, and
    1 - p A/kappa - A^2 = A' - A/kappa (the Riccati identity of
    :func:`d_bessel_ratio_dkappa`). The variance along mu, A', is computed
    without cancellation also at very large kappa, where the printed form
    loses digits; the variance across mu is A_p/kappa.
    """
    mu2, kappa, single = _check_mu_kappa(mu, kappa)
    p = np.full(kappa.shape, float(mu2.shape[1]))
    _, a_over_k, _, da, _ = _bessel_quantities(p, np.array(kappa, dtype=np.float64))
    eye = np.eye(mu2.shape[1])
    outer = mu2[:, :, None] * mu2[:, None, :]
    out = (a_over_k[:, None, None] * (eye - outer) + da[:, None, None] * outer)
    return out[0] if single else out


def _pair(mu_q, kappa_q, mu_0, kappa_0):
    mu_q2, kq, single_q = _check_mu_kappa(mu_q, kappa_q, "mu_q")
    mu_02, k0, single_0 = _check_mu_kappa(mu_0, kappa_0, "mu_0")
    if mu_q2.shape[1] != mu_02.shape[1]:
        raise ValueError(f"mu_q and mu_0 have different dimensions "
                         f"{mu_q2.shape[1]} and {mu_02.shape[1]}.")
    n = max(mu_q2.shape[0], mu_02.shape[0])
    for arr, name in ((mu_q2, "mu_q"), (mu_02, "mu_0")):
        if arr.shape[0] not in (1, n):
            raise ValueError(f"{name} has {arr.shape[0]} rows, expected 1 or {n}.")
    mu_q2 = np.broadcast_to(mu_q2, (n, mu_q2.shape[1]))
    mu_02 = np.broadcast_to(mu_02, (n, mu_02.shape[1]))
    kq = np.broadcast_to(kq, (n,)).astype(np.float64)
    k0 = np.broadcast_to(k0, (n,)).astype(np.float64)
    p = np.full(n, float(mu_q2.shape[1]))
    return mu_q2, kq, mu_02, k0, p, single_q and single_0


def _one_minus_dot(u, v):
    """1 - u^T v row-wise for unit rows, as ||u - v||^2 / 2 (exact near u = v)."""
    d = u - v
    return 0.5 * np.einsum("kp,kp->k", d, d)


def expected_log_vmf_density(mu_q, kappa_q, mu_0, kappa_0):
    """E_{x ~ vMF(mu_q, kappa_q)}[log vMF(x | mu_0, kappa_0)], in nats [D].

    Parameters
    ----------
    mu_q : array_like of shape (p,) or (K, p)
        Mean directions of the distribution q of x (unit rows).
    kappa_q : float or array_like of shape (K,)
        Concentrations of q, >= 0.
    mu_0 : array_like of shape (p,) or (K, p)
        Mean directions of the density evaluated (e.g. a prior), unit rows.
    kappa_0 : float or array_like of shape (K,)
        Its concentrations, >= 0 (0: the uniform density).

    Returns
    -------
    value : float or ndarray of float64 of shape (K,)
        log C_p(kappa_0) + kappa_0 A_p(kappa_q) mu_0^T mu_q. A float when both
        mean directions are 1-D.

    Notes
    -----
    [D] log vMF(x | mu_0, kappa_0) = log C_p(kappa_0) + kappa_0 mu_0^T x is
    linear in x, and E_q x = A_p(kappa_q) mu_q ([Xie] supplement item (I)).
    This is the term E_q[log p(a~)] of an independent vMF prior (the "pr"
    method, supplement Eq. 20), including the constant log C_p(kappa_0).
    """
    mu_q2, kq, mu_02, k0, p, single = _pair(mu_q, kappa_q, mu_0, kappa_0)
    a_q, _, _, _, one_minus_a_q = _bessel_quantities(p, kq)
    one_minus_dot = _one_minus_dot(mu_q2, mu_02)
    # log C(k0) + k0 A dot = (log C(k0) + k0) - k0 (1 - A dot),
    # 1 - A dot = (1 - A) + A (1 - dot)
    out = (_log_normalizer_scaled(p, k0)
           - k0 * (one_minus_a_q + a_q * one_minus_dot))
    return out[0] if single else out


def vmf_kl(mu_q, kappa_q, mu_0, kappa_0):
    """KL(vMF(mu_q, kappa_q) || vMF(mu_0, kappa_0)) in nats [D].

    Parameters
    ----------
    mu_q : array_like of shape (p,) or (K, p)
        Mean directions of q, unit rows, p >= 2.
    kappa_q : float or array_like of shape (K,)
        Concentrations of q, >= 0.
    mu_0 : array_like of shape (p,) or (K, p)
        Mean directions of the reference distribution, unit rows.
    kappa_0 : float or array_like of shape (K,)
        Its concentrations, >= 0.

    Returns
    -------
    kl : float or ndarray of float64 of shape (K,)
        log C_p(kappa_q) - log C_p(kappa_0)
        + A_p(kappa_q) (kappa_q - kappa_0 mu_0^T mu_q) >= 0, zero iff the two
        distributions coincide (up to rounding, ~1e-16 kappa; not clipped).

    Notes
    -----
    [D] KL = E_q[log q(x) - log p(x)] with log q(x) = log C_p(kappa_q)
    + kappa_q mu_q^T x and log p(x) = log C_p(kappa_0) + kappa_0 mu_0^T x, both
    linear in x; E_q x = A_p(kappa_q) mu_q and mu_q^T mu_q = 1 give
    E_q log q = log C_p(kappa_q) + kappa_q A_p(kappa_q) (the negative entropy)
    and E_q log p = log C_p(kappa_0) + kappa_0 A_p(kappa_q) mu_0^T mu_q
    (:func:`expected_log_vmf_density`). kappa_0 = 0 (uniform reference) gives
    log |S^{p-1}| - H(q). Evaluated as
    (log C(kq) + kq) - (log C(k0) + k0) + (k0 - kq)(1 - A(kq))
    + k0 A(kq) ||mu_q - mu_0||^2 / 2, which is the same expression with no
    cancellation between O(kappa) terms (exactly 0 for identical arguments).
    """
    mu_q2, kq, mu_02, k0, p, single = _pair(mu_q, kappa_q, mu_0, kappa_0)
    a_q, _, _, _, one_minus_a_q = _bessel_quantities(p, kq)
    one_minus_dot = _one_minus_dot(mu_q2, mu_02)
    # rearranged so that no two O(kappa) numbers cancel:
    # KL = (log C(kq) + kq) - (log C(k0) + k0) + (k0 - kq)(1 - A(kq))
    #      + k0 A(kq) (1 - mu_0^T mu_q)
    out = (_log_normalizer_scaled(p, kq) - _log_normalizer_scaled(p, k0)
           + (k0 - kq) * one_minus_a_q + k0 * a_q * one_minus_dot)
    return out[0] if single else out


def vmf_kl_gradient(mu_q, kappa_q, mu_0, kappa_0):
    """Gradients of :func:`vmf_kl` with respect to mu_q and kappa_q [D].

    Parameters
    ----------
    mu_q, kappa_q, mu_0, kappa_0
        As in :func:`vmf_kl`.

    Returns
    -------
    grad_mu_q : ndarray of float64, shape of the broadcast mean directions
        (p,) or (K, p): the Euclidean gradient -kappa_0 A_p(kappa_q) mu_0 of
        the KL written with ||mu_q|| = 1 substituted. On the sphere use its
        tangent part (I - mu_q mu_q^T) grad_mu_q (projected gradient).
    grad_kappa_q : float or ndarray of float64 of shape (K,)
        A_p'(kappa_q) (kappa_q - kappa_0 mu_0^T mu_q).

    Notes
    -----
    [D] d/dkappa log C_p(kappa) = -A_p(kappa) (:func:`log_normalizer`), so
    d KL/d kappa_q = -A_p + A_p' (kappa_q - kappa_0 mu_0^T mu_q) + A_p
    = A_p'(kappa_q) (kappa_q - kappa_0 mu_0^T mu_q); it vanishes at
    kappa_q = kappa_0 mu_0^T mu_q and is positive above (A_p' > 0), the
    minimizer being kappa_q = kappa_0 when mu_q = mu_0.
    """
    mu_q2, kq, mu_02, k0, p, single = _pair(mu_q, kappa_q, mu_0, kappa_0)
    a_q, _, _, da_q, _ = _bessel_quantities(p, kq)
    dot = np.einsum("kp,kp->k", mu_q2, mu_02)
    g_mu = -(k0 * a_q)[:, None] * mu_02
    g_k = da_q * (kq - k0 * dot)
    if single:
        return g_mu[0], g_k[0]
    return g_mu, g_k


# ---------------------------------------------------------------------------
# mutual angular regularizer (were skbinvi/experts/_angular.py)
# ---------------------------------------------------------------------------


def _check_gamma(gamma):
    gamma = float(gamma)
    if not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be finite and >= 0; got {gamma!r}.")
    return gamma


def _value_and_grad(A, gamma, need_grad):
    A, norms = _check_A(A)
    return value_and_grad_unchecked(A, norms, _check_gamma(gamma), need_grad)


def mutual_angular_regularizer(A, gamma):
    """Omega(A) = mean of the pairwise angles - gamma * their variance ([Xie] Eq. 12).

    Parameters
    ----------
    A : array_like of shape (K, p)
        Nonzero, finite rows a_1, ..., a_K (e.g. the expert or gate weight
        vectors, or their variational means).
    gamma : float
        Weight of the variance term, gamma >= 0.

    Returns
    -------
    omega : float
        In radians. mean_{i<j} theta_ij - gamma var_{i<j} theta_ij over the
        M = K (K-1)/2 unordered pairs, the variance being the population one
        (1/M sum (theta_ij - mean)^2), which equals the ordered-pair version
        over i != j with 1/(K (K-1)). Bounds: Omega <= pi/2, with equality iff
        the rows are mutually orthogonal (then the variance is 0 for any
        gamma); Omega >= -gamma pi^2/16. For K = 1 there are no pairs and
        Omega = 0 by convention.

    Raises
    ------
    ValueError
        If A is not 2-D, not finite, has a zero row, or gamma < 0.

    Notes
    -----
    Invariant to scaling any row by a positive constant and to flipping the
    sign of any row (the angles use |cos|), and to a common rotation.
    """
    return _value_and_grad(A, gamma, need_grad=False)[0]


def mutual_angular_gradient(A, gamma):
    """Gradient dOmega/dA of :func:`mutual_angular_regularizer` [D].

    Parameters
    ----------
    A : array_like of shape (K, p)
        Nonzero, finite rows.
    gamma : float
        Weight of the variance term, gamma >= 0.

    Returns
    -------
    grad : ndarray of float64 of shape (K, p)
        dOmega/da_i in rows; each row is orthogonal to a_i (Omega is scale
        invariant). All zeros for K = 1.

    Raises
    ------
    ValueError
        If A is not 2-D, not finite, has a zero row, or gamma < 0.

    Notes
    -----
    [D] With M = K (K-1)/2 and m the mean angle,
    dOmega/dtheta_ij = (1 - 2 gamma (theta_ij - m)) / M for each unordered
    pair (the derivative of the mean term of the variance,
    -(2/M^2) sum (theta - m), vanishes). For c = u_i^T u_j != 0,
    theta = arccos(|c|), dtheta/dc = -sign(c) / sin(theta) and
    dc/da_i = (u_j - c u_i) / ||a_i||, so

        dtheta_ij / da_i = -P_i (s_ij u_j) / (||a_i|| sin theta_ij),

    a vector of norm 1/||a_i|| orthogonal to a_i, bounded as theta -> 0 (the
    angle behaves like a cone, not like arccos near 1). Hence
    dOmega/da_i = sum_{j != i} dOmega/dtheta_ij dtheta_ij/da_i.
    Non-differentiable points, where a (Clarke) subgradient is used:

    * c_ij = 0 exactly (orthogonal pair, the kink of |c|, theta at its
      maximum pi/2): the pair contributes 0, which lies between the two
      one-sided derivatives;
    * theta_ij <= ``PARALLEL_TOL`` (parallel pair, the apex of the cone):
      the pair contributes 0, exact at theta = 0; below 1e-10 rad the
      direction is not resolved in float64.
    """
    return _value_and_grad(A, gamma, need_grad=True)[1]


def mutual_angular_value_and_gradient(A, gamma):
    """Omega(A) and dOmega/dA in one pass (shares the O(K^2 p) geometry).

    Parameters
    ----------
    A : array_like of shape (K, p)
        Nonzero, finite rows.
    gamma : float
        Weight of the variance term, gamma >= 0.

    Returns
    -------
    omega : float
        As :func:`mutual_angular_regularizer`.
    grad : ndarray of float64 of shape (K, p)
        As :func:`mutual_angular_gradient`.
    """
    return _value_and_grad(A, gamma, need_grad=True)


# ---------------------------------------------------------------------------
# ELBO pieces as functions of q (were skbinvi/experts/_bounds.py)
# ---------------------------------------------------------------------------


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


def _likelihood_pieces(X, y, beta, eta, phi, xi, c, d, n_rounds, tol, c_init,
                       expert_X=None):
    X = _check_X(X)
    expert_X = X if expert_X is None else _check_X(expert_X)
    n, p = X.shape
    beta_c = _check_params(beta, p, "beta")
    eta_c = _check_params(eta, p, "eta")
    K = beta_c[0].shape[0]
    if eta_c[0].shape[0] != K:
        raise ValueError(f"beta has {K} experts but eta has {eta_c[0].shape[0]}.")
    y = _check_y(y, n)
    return likelihood_pieces_from_moments(y, *projection_moments(expert_X, beta_c),
                                          *projection_moments(X, eta_c), phi, xi, c, d,
                                          n_rounds, tol, c_init)


def _objective_rows_serial(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds,
                           tol, gain_tol, want_weights, csr=None):
    """The serial row pass of :func:`_objective_rows` into new arrays; ``csr``
    as in :func:`_objective_rows`."""
    return _rows_into_new(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds, tol,
                          gain_tol, want_weights, csr, False)


def _objective_rows_parallel(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds,
                             tol, gain_tol, want_weights, csr=None):
    """The parallel row pass of :func:`_objective_rows` into new arrays (see
    :func:`_objective_rows_serial`)."""
    return _rows_into_new(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds, tol,
                          gain_tol, want_weights, csr, True)


def _rows_into_new(sign, sq, t_b, t_e, coef_b, coef_e, c0, use_c0, n_rounds, tol,
                   gain_tol, want_weights, csr, parallel):
    n, K = sq.shape[0], coef_b.shape[1]
    phi, xi, d, c, g_mean, g_second = _row_outputs(n, K, want_weights)
    terms = _row_pass((sign, sq, 0.0, *_rows_source(t_b, t_e, csr), coef_b, coef_e,
                       c0, use_c0, n_rounds, tol, gain_tol, want_weights, phi, xi, d,
                       c, g_mean, g_second), parallel)
    return phi, xi, c, d, terms, g_mean, g_second


def likelihood_bound(X, y, beta, eta, phi=None, *, xi=None, c=None, d=None,
                     n_rounds=50, tol=1e-10, c_init=None, return_aux=False,
                     expert_X=None):
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
    expert_X : array_like of shape (n, p) or None
        The experts' design, when it differs from the gates' X (an
        intercept column scaled for the experts alone); None: X.

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
        X, y, beta, eta, phi, xi, c, d, n_rounds, tol, c_init, expert_X)
    value = e_term + g_term + h_term
    if not return_aux:
        return value
    return value, dict(expert=e_term, gate=g_term, entropy=h_term, phi=phi,
                       phi_opt=phi_opt, xi=xi, c=c, d=d)


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


# ---------------------------------------------------------------------------
# moment coefficients and their derivatives (were skbinvi/experts/_gradients.py)
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
# variational drivers (were skbinvi/experts/_variational.py)
# ---------------------------------------------------------------------------


@dataclass
class VariationalFitResult:
    """Result of :func:`fit_variational`.

    Attributes
    ----------
    beta : VMFGammaParams
        q of the K expert vectors: mu (K, p) unit rows, kappa (K,), r (K,), s (K,).
    eta : VMFGammaParams
        q of the K gate vectors, same shapes.
    objective_history : ndarray of shape (n_iter + 1,)
        The objective (nats, total over samples) at the initial q and after
        each iteration, each at the auxiliaries used (non-decreasing).
    n_iter : int
        Number of gradient iterations performed.
    converged : bool
        True if stopped by ``tol`` (or because no ascent step was found)
        before ``max_iter``.
    phi : ndarray of shape (n, K)
        Final responsibilities q(z_n).
    xi : ndarray of shape (n, K)
        Final expert [JJ] parameters.
    c : ndarray of shape (n,)
        Final gate [Bou] parameters.
    d : ndarray of shape (n, K)
        Final gate [JJ] parameters.
    method : str
        "vi" or "pr".
    step_size : ndarray of shape (8,)
        Last step sizes of the 8 blocks (beta mu, kappa, r, s; eta mu, kappa, r, s).
    """

    beta: VMFGammaParams
    eta: VMFGammaParams
    objective_history: np.ndarray
    n_iter: int
    converged: bool
    phi: np.ndarray
    xi: np.ndarray
    c: np.ndarray
    d: np.ndarray
    method: str
    step_size: np.ndarray = field(default=None)

    @property
    def objective(self):
        """Final objective value (nats)."""
        return float(self.objective_history[-1])


def _as_params(params):
    mu, kappa, r, s = params
    K = np.asarray(mu).shape[0]
    return VMFGammaParams(np.asarray(mu, dtype=np.float64),
                          np.broadcast_to(np.asarray(kappa, dtype=np.float64),
                                          (K,)).copy(),
                          np.broadcast_to(np.asarray(r, dtype=np.float64), (K,)).copy(),
                          np.broadcast_to(np.asarray(s, dtype=np.float64), (K,)).copy())


def _direction_prior(params, cfg, lam):
    """Reference (used by the tests and :func:`variational_objective`; the fit uses
    :func:`skbinvi.experts._ascent.direction_parts`).

    The part of the prior (+ regularizer) term that depends on (mu, kappa), nats."""
    method, kappa_prior, mu0, alpha1, alpha2, gamma = cfg[:6]
    p = params.mu.shape[1]
    if method == "pr":
        mu0_k = np.broadcast_to(mu0, params.mu.shape)
        value = -float(np.sum(vmf_kl(params.mu, params.kappa, mu0_k, kappa_prior)))
        if lam != 0.0 and params.mu.shape[0] > 1:
            value += lam * float(mutual_angular_regularizer(params.mu, gamma))
        return value
    # "vi": MABN lower bound + vMF entropy
    ent = np.asarray(vmf_entropy(p, params.kappa), dtype=np.float64)
    mabn = np.sum(mabn_expected_log_prior_lower_bound(_mean_directions(params),
                                                      kappa_prior, mu0))
    return float(mabn) + float(np.sum(ent))


def chi_kl(r, s, alpha1, alpha3):
    """KL(Gamma(shape r, rate s) || p) for p(g) proportional to g^(alpha1 - 1)
    exp(-alpha3 g^2) (alpha1 = p, alpha3 = 1/2: the chi distribution of the
    norm of an N(0, I_p) vector), in nats, by quadrature: an oracle
    independent of the closed form of the fit (floats or 1-d arrays)."""
    from scipy import integrate, stats

    log_z = special.gammaln(0.5 * alpha1) - np.log(2.0) - 0.5 * alpha1 * np.log(alpha3)
    out = []
    for rk, sk in zip(*np.broadcast_arrays(np.atleast_1d(r), np.atleast_1d(s)),
                      strict=True):
        q = stats.gamma(a=rk, scale=1.0 / sk)

        def integrand(g, q=q):
            log_q = q.logpdf(g)
            return np.exp(log_q) * (log_q - ((alpha1 - 1.0) * np.log(g)
                                             - alpha3 * g * g - log_z))

        lo, hi = q.ppf(1e-14), q.ppf(1.0 - 1e-14)
        out.append(integrate.quad(integrand, lo, hi, limit=200, epsabs=1e-13,
                                  epsrel=1e-11)[0])
    return np.array(out)


def _magnitude_prior(params, cfg):
    """-sum_k KL(q(g_k) || prior), nats (both methods): the Gamma(alpha1,
    alpha2), or :func:`chi_kl` when the config has ``alpha3 > 0``."""
    alpha1, alpha2 = cfg.alpha1, cfg.alpha2
    alpha3 = float(np.broadcast_to(getattr(cfg, "alpha3", 0.0), 2)[0])
    if alpha3 > 0:
        kl = chi_kl(params.r, params.s, float(np.broadcast_to(alpha1, 2)[0]), alpha3)
    else:
        kl = gamma_kl(params.r, params.s, alpha1, alpha2)
    return -float(np.sum(np.broadcast_to(kl, params.kappa.shape)))


def _prior_term(params, cfg, lam):
    """Prior (+ regularizer) part of the objective for one set of K vectors, nats.

    :func:`_direction_prior` + :func:`_magnitude_prior`.
    """
    return _direction_prior(params, cfg, lam) + _magnitude_prior(params, cfg)


def _check_config(method, kappa_prior, mu0, alpha1, alpha2, pr_weights, pr_gamma, p):
    if method not in ("vi", "pr"):
        raise ValueError(f"method must be 'vi' or 'pr'; got {method!r}.")
    kappa_prior = float(kappa_prior)
    if not np.isfinite(kappa_prior) or kappa_prior < 0:
        raise ValueError(f"kappa_prior must be finite and >= 0; got {kappa_prior!r}.")
    if mu0 is None:
        mu0 = np.zeros(p)
        mu0[0] = 1.0
    mu0 = np.asarray(mu0, dtype=np.float64)
    if mu0.shape != (p,) or abs(np.linalg.norm(mu0) - 1.0) > 1e-6:
        raise ValueError(f"mu0 must be a unit vector of shape ({p},).")
    for v, name in ((alpha1, "alpha1"), (alpha2, "alpha2")):
        if not np.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be finite and > 0; got {v!r}.")
    lam1, lam2 = (float(w) for w in pr_weights)
    if lam1 < 0 or lam2 < 0:
        raise ValueError("pr_weights must be >= 0.")
    if pr_gamma < 0:
        raise ValueError("pr_gamma must be >= 0.")
    if method == "vi":
        lam1 = lam2 = 0.0
    return ObjectiveConfig(method, kappa_prior, mu0, float(alpha1), float(alpha2),
                           float(pr_gamma)), (lam1, lam2)


def _full_objective(X, y, beta, eta, cfg, lams, aux=None, c_init=None, cached=None,
                    expert_X=None):
    """Objective at fixed aux=(phi, xi, c, d), or at optimal ones if aux is None.

    ``cached`` = (which, value): the prior term of set ``which`` (0 beta,
    1 eta) is known. Returns (value, aux_used).
    """
    if aux is None:
        lik, a = likelihood_bound(X, y, beta, eta, c_init=c_init, return_aux=True,
                                  expert_X=expert_X)
        aux = (a["phi"], a["xi"], a["c"], a["d"])
    else:
        phi, xi, c, d = aux
        lik = likelihood_bound(X, y, beta, eta, phi, xi=xi, c=c, d=d,
                               expert_X=expert_X)
    pri = [None, None]
    if cached is not None:
        pri[cached[0]] = cached[1]
    for j, par in enumerate((beta, eta)):
        if pri[j] is None:
            pri[j] = _prior_term(par, cfg, lams[j])
    value = lik + pri[0] + pri[1]
    return float(value), aux


def variational_objective(X, y, beta, eta, *, method="vi", kappa_prior=1.0, mu0=None,
                          alpha1=2.0, alpha2=0.5, pr_weights=(0.0, 0.0), pr_gamma=0.0,
                          aux=None, return_aux=False, expert_X=None):
    """The "vi" or "pr" objective of the BMEM at a given q, in nats (reference).

    The validated NumPy reference that the fit's objective
    (:func:`objective_and_aux` and ``skbinvi.experts._ascent``) is checked
    against in ``tests/test_experts_variational.py``.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR (include a constant column for intercepts).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta, eta : VMFGammaParams or 4-sequence
        q of the expert and gate vectors (mu (K, p) unit rows, kappa, r, s).
    method : {"vi", "pr"}, default="vi"
        See the module docstring (F_vi: Type II MABN; F_pr: independent
        vMF(mu0, kappa_prior) x Gamma priors + lambda Omega).
    kappa_prior : float, default=1.0
        MABN concentration ("vi") or independent vMF concentration ("pr"), >= 0.
    mu0 : array_like of shape (p,) or None
        Unit prior mean direction (MABN node 1 / independent prior); None: e_1.
    alpha1, alpha2 : float, default=(2.0, 0.5)
        Gamma prior shape and rate of every magnitude.
    pr_weights : (float, float), default=(0, 0)
        (lambda1, lambda2) of the "pr" regularizers (ignored for "vi").
    pr_gamma : float, default=0.0
        Variance weight gamma of Omega.
    aux : tuple (phi, xi, c, d) or None
        Auxiliaries to hold fixed; None: the optimal ones.
    return_aux : bool, default=False
        Also return the auxiliaries used.
    expert_X : array_like of shape (n, p) or None
        The experts' design (see :func:`likelihood_bound`); None: X.

    Returns
    -------
    value : float
        F_vi or F_pr (total over samples, nats).
    aux : tuple (phi (n, K), xi (n, K), c (n,), d (n, K)), only if ``return_aux``
    """
    X = _check_X(X)
    y = _check_y(y, X.shape[0])
    cfg, lams = _check_config(method, kappa_prior, mu0, alpha1, alpha2, pr_weights,
                              pr_gamma, X.shape[1])
    value, aux = _full_objective(X, y, _as_params(beta), _as_params(eta), cfg, lams,
                                 aux, expert_X=expert_X)
    return (value, aux) if return_aux else value


def _weighted_gram(X, weights):
    """Q[k] = X^T diag(weights[:, k]) X, shape (K, p, p) (dense or CSR X)."""
    zeros = np.zeros(weights.shape)
    return _fixed_aux_statistics(X, np.zeros(X.shape[0]), zeros, weights)[2]


def fit_variational(X, y, n_components, *, method="vi", kappa_prior=1.0, mu0=None,
                    alpha1=2.0, alpha2=0.5, pr_weights=(1.0, 1.0), pr_gamma=0.0,
                    max_iter=200, tol=1e-6, inner_max_iter=10, init_scale=1.0,
                    kappa_init=10.0, init=None, statistics="auto", random_state=None,
                    callback=None):
    """Fit q of the Bayesian mixture of experts by coordinate ascent ("vi" or "pr").

    A functional interface to the iterations the estimator runs (the
    estimator owns the stopping rule, restarts and verbosity; this function
    is used by the tests and keeps the relative stopping rule below).

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR, p >= 2 (add a constant column for intercepts).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_components : int
        Number of experts K (and gates).
    method : {"vi", "pr"}, default="vi"
        "vi": Type II MABN prior on the directions; "pr": independent
        priors + posterior regularization (user guide, sections on "vi" and
        "pr"). Objectives in the module docstring.
    kappa_prior : float, default=1.0
        MABN diversity strength kappa ("vi") or the independent vMF prior's
        concentration ("pr"), >= 0.
    mu0 : array_like of shape (p,) or None, default=None
        Unit prior mean direction; None: e_1 (the first feature).
    alpha1, alpha2 : float, default=2.0, 0.5
        Gamma prior shape and rate on every magnitude g.
    pr_weights : (float, float), default=(1.0, 1.0)
        (lambda1, lambda2), weights of Omega for the experts and gates
        ("pr" only), in nats per radian.
    pr_gamma : float, default=0.0
        Variance weight gamma of Omega, >= 0.
    max_iter : int, default=200
        Maximum number of outer iterations (auxiliary updates).
    tol : float, default=1e-6
        Stop when the relative increase of the objective over one outer
        iteration is below tol; the inner ascent stops a round early when a
        round gains less than tol times the objective's magnitude.
    inner_max_iter : int, default=10
        Rounds of blockwise gradient steps on q per outer iteration.
    init_scale : float, default=1.0
        Initial E[g] = r / s (r = 5) of the random start.
    kappa_init : float, default=10.0
        Initial variational concentrations of the random start.
    init : tuple (beta, eta) of VMFGammaParams or None, default=None
        Starting q; None: random mean directions.
    statistics : {"auto", True, False}, default="auto"
        Whether the fixed-auxiliary likelihood is evaluated from the (K, p, p)
        sufficient statistics (see :class:`_FixedAuxLikelihood`); "auto" uses
        them when K p^2 <= 2e7 and rows have <= 256 non-zeros on average.
    random_state : int, RandomState instance or None
        Seed of the random initial mean directions.
    callback : callable or None
        Called as ``callback(iteration, beta, eta, objective)`` after each
        iteration.

    Returns
    -------
    result : VariationalFitResult
        Fitted q(beta), q(eta), objective history (nats, totals, starting
        with the initial q), n_iter, converged flag and final auxiliaries.

    Raises
    ------
    ValueError
        For labels other than 0/1, shapes that do not match, n_components < 1,
        an unknown method or invalid prior settings.
    """
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    K = int(n_components)
    if K < 1:
        raise ValueError(f"n_components must be >= 1; got {n_components!r}.")
    if statistics not in ("auto", True, False):
        raise ValueError("statistics must be 'auto', True or False; "
                         f"got {statistics!r}.")
    cfg, lams = _check_config(method, kappa_prior, mu0, alpha1, alpha2, pr_weights,
                              pr_gamma, p)
    rng = check_random_state(random_state)
    if init is None:
        beta = _init_params(K, p, rng, kappa_init, init_scale)
        eta = _init_params(K, p, rng, kappa_init, init_scale)
    else:
        beta, eta = (_as_params(v) for v in init)
        if beta.mu.shape != (K, p) or eta.mu.shape != (K, p):
            raise ValueError(f"init must hold q of {K} vectors of length {p}.")
    use_stats = _use_statistics(X, K, statistics)
    sq = row_norms(X, squared=True)
    consts = prior_constants(cfg, K, p)
    state = VariationalState(beta, eta)
    state.value, state.aux = objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams)
    history = [state.value]
    converged = False
    for it in range(1, int(max_iter) + 1):
        start = state.value
        value = variational_iteration(X, y, sq, state, cfg, consts, lams,
                                      inner_max_iter, use_stats,
                                      tol * max(abs(start), 1.0))
        if value == start:
            converged = True
            break
        history.append(value)
        if callback is not None:
            callback(it, state.beta, state.eta, value)
        if (value - start) / max(abs(start), 1.0) < tol:
            converged = True
            break
    phi, xi, c, d = state.aux
    return VariationalFitResult(state.beta, state.eta, np.asarray(history),
                                len(history) - 1, converged, phi, xi, c, d, cfg.method,
                                state.steps.copy())


@dataclass
class GaussianFitResult:
    """Result of :func:`fit_gaussian_variational` (BMEM-G).

    Attributes
    ----------
    beta_mean, eta_mean : ndarray of shape (K, p)
        Posterior means of the expert and gate vectors.
    beta_cov, eta_cov : ndarray of shape (K, p, p)
        Posterior covariances.
    objective_history : ndarray of shape (n_iter + 1,)
        The ELBO (nats, total over samples) at the initial q and after each
        iteration; non-decreasing.
    n_iter : int
    converged : bool
    phi : ndarray of shape (n, K)
        Final responsibilities.
    """

    beta_mean: np.ndarray
    eta_mean: np.ndarray
    beta_cov: np.ndarray
    eta_cov: np.ndarray
    objective_history: np.ndarray
    n_iter: int
    converged: bool
    phi: np.ndarray

    @property
    def objective(self):
        """Final ELBO (nats)."""
        return float(self.objective_history[-1])


def fit_gaussian_variational(X, y, n_components, *, sigma=1.0, max_iter=200, tol=1e-6,
                             init_scale=1.0, random_state=None, callback=None):
    """Variational Bayes for the BMEM-G baseline (Gaussian priors, no diversity).

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR (add a constant column for intercepts).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_components : int
        Number of experts K.
    sigma : float, default=1.0
        Prior standard deviation: every beta_k, eta_k ~ N(0, sigma^2 I_p).
    max_iter : int, default=200
        Maximum number of iterations.
    tol : float, default=1e-6
        Stop when the relative increase of the ELBO is below tol.
    init_scale : float, default=1.0
        Standard deviation of the random initial means (divided by sqrt(p)).
    random_state : int, RandomState instance or None
        Seed of the initial means.
    callback : callable or None
        ``callback(iteration, beta_mean, eta_mean, elbo)`` after each iteration.

    Returns
    -------
    result : GaussianFitResult

    Raises
    ------
    ValueError
        For labels other than 0/1, mismatched shapes, n_components < 1 or
        sigma <= 0.

    Notes
    -----
    [D] q(beta_k) = N(m_k, S_k), q(eta_k) = N(m'_k, S'_k), q(z_n) =
    Categorical(phi_n), with the same bounds as "vi" (expert [JJ], gate
    [Bou] + [JJ]; :func:`~skbinvi.experts._bounds.likelihood_pieces_from_moments`).
    At fixed auxiliaries the bound is sum_k [b_k^T m_k + tr(Q_k (S_k + m_k m_k^T))]
    + const per set, with b_k, Q_k (negative semi-definite) those of
    :class:`_FixedAuxLikelihood`; adding -KL(q || N(0, sigma^2 I)) and
    maximizing in closed form gives

        S_k = (I / sigma^2 - 2 Q_k)^{-1},   m_k = S_k b_k,

    the familiar Bayesian logistic regression update of [JJ] with
    responsibilities as weights. Each iteration sets the auxiliaries to
    their optima and then q to its optimum, so the ELBO never decreases.
    Cost per iteration O(sum_n nnz_n^2 K + K p^3); memory O(K p^2).
    """
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    K = int(n_components)
    if K < 1:
        raise ValueError(f"n_components must be >= 1; got {n_components!r}.")
    sigma = float(sigma)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be finite and > 0; got {sigma!r}.")
    rng = check_random_state(random_state)
    state = gaussian_init(K, p, sigma, rng, init_scale)
    sq = row_norms(X, squared=True)
    gaussian_objective_and_aux(X, y, state, sigma)
    history = [state.value]
    converged = False
    for it in range(1, int(max_iter) + 1):
        start = state.value
        value = gaussian_iteration(X, y, sq, state, sigma)
        history.append(value)
        if callback is not None:
            callback(it, state.means[0], state.means[1], value)
        if (value - start) / max(abs(start), 1.0) < tol:
            converged = True
            break
    return GaussianFitResult(state.means[0], state.means[1], state.covs[0],
                             state.covs[1], np.asarray(history), len(history) - 1,
                             converged, state.aux[0])


# ---------------------------------------------------------------------------
# Metropolis-Hastings likelihood and Monte Carlo EM (were skbinvi/experts/_mcmc.py)
# ---------------------------------------------------------------------------


class _ReferenceLikelihood:
    """The NumPy reference (copy the projections, :func:`_loglik_fast`), O(n K)
    exp/log per proposal; same protocol as :class:`_FastLikelihood`. Private,
    for tests (patched over ``_FastLikelihood``).
    """

    def __init__(self, Bt, Et, y):
        self.proj = [Bt, Et]
        self.sign = (2.0 * y - 1.0)[:, None]

    def start_pass(self, s):
        pass

    def propose(self, s, k, col):
        new = self.proj[s].copy()
        new[k] = col
        B, E = (new, self.proj[1]) if s == 0 else (self.proj[0], new)
        return _loglik_fast(B.T, E.T, self.sign)

    def accept(self, s, k, col):
        self.proj[s][k] = col

    def next_column(self, s, k):
        pass


def run_monte_carlo_em(X, y, n_components, *, kappa=1.0, mu0=None, alpha1=1.0,
                       alpha2=1.0, n_em_iter=20, sweeps_per_em_iter=50,
                       burn_in=100, n_samples=1000, thin=1,
                       direction_concentration=50.0, magnitude_scale=0.1,
                       random_state=None, init=None):
    """Monte Carlo EM for mu0, alpha1, alpha2, then posterior sampling.

    BMEM-MABN-I with the hyper-parameters of the prior learned by maximizing
    the marginal likelihood p(y | X, mu0, alpha1, alpha2) ([Xie] supplement
    section 3; user guide, "Learning mu_0") with the Monte Carlo EM algorithm
    [WT]: the E-step is a block of Metropolis-within-Gibbs sweeps of
    :func:`run_metropolis_hastings` (warm-started from the last state of the
    previous block), the M-step :func:`fit_mabn_hyperparameters` on all the
    sweeps of the block. kappa stays fixed.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR; n = 0 is allowed (then the posterior is the
        prior, p(y) = 1 for every value of the hyper-parameters, and EM
        performs a random walk around the initial values).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_components : int
        Number of experts K >= 1.
    kappa : float, default=1.0
        MABN concentration (diversity strength), >= 0; not learned.
    mu0 : array_like of shape (p,), optional
        Initial root mean direction (unit); default e_1.
    alpha1, alpha2 : float, default=1.0
        Initial Gamma shape and rate (> 0).
    n_em_iter : int, default=20
        Number of E/M iterations (>= 0; 0 only samples).
    sweeps_per_em_iter : int, default=50
        Sweeps of each E-step, all used by the M-step (>= 1).
    burn_in : int, default=100
        Sweeps discarded before the first E-step and before the final run.
    n_samples : int, default=1000
        Samples kept by the final run with the learned hyper-parameters.
    thin : int, default=1
        Thinning of the final run.
    direction_concentration, magnitude_scale : float
        Proposal parameters, as in :func:`run_metropolis_hastings`.
    random_state : int, RandomState instance or None
        Seed; one generator drives all the runs.
    init : dict, optional
        {"beta": (K, p), "eta": (K, p)} starting vectors; default a draw from
        the prior with the initial hyper-parameters.

    Returns
    -------
    result : MCMCResult
        The final run (samples, acceptance rates, traces; ``mu0``, ``alpha1``,
        ``alpha2`` are the learned values it was drawn with) plus
        ``mu0_history`` of shape (n_em_iter + 1, p) and ``alpha1_history``,
        ``alpha2_history`` of shape (n_em_iter + 1,): the initial values,
        then the values after each M-step.

    Raises
    ------
    ValueError
        For invalid arguments (as :func:`run_metropolis_hastings`, plus
        n_em_iter < 0 or sweeps_per_em_iter < 1), or when an M-step is
        undefined (:func:`fit_mabn_hyperparameters`: all magnitudes of a
        block equal, e.g. no magnitude move accepted).

    Notes
    -----
    Cost: (burn_in + n_em_iter * sweeps_per_em_iter + burn_in + n_samples *
    thin) sweeps (see :func:`run_metropolis_hastings`) plus O(S K p) per
    M-step. With few vectors (2 K magnitudes per sample) the ML-II estimate
    of the Gamma parameters is itself noisy, and the Monte Carlo error of the
    E-step makes the iterates fluctuate around the fixed point instead of
    increasing the marginal likelihood monotonically [WT]; increase
    ``sweeps_per_em_iter`` in the last iterations for a more precise value.

    Sources
    -------
    [WT] G. C. G. Wei, M. A. Tanner, "A Monte Carlo implementation of the EM
    algorithm and the poor man's data augmentation algorithms", Journal of
    the American Statistical Association 85 (1990) 699-704.
    [Minka] T. P. Minka, "Estimating a Gamma distribution", technical note,
    Microsoft Research, 2002 (the score equation of the shape).
    [MJ] K. V. Mardia, P. E. Jupp, "Directional Statistics", Wiley 2000,
    section 10.3 (the vMF mean-direction MLE).
    """
    n_em_iter, sweeps = int(n_em_iter), int(sweeps_per_em_iter)
    if n_em_iter < 0 or sweeps < 1:
        raise ValueError("need n_em_iter >= 0 and sweeps_per_em_iter >= 1.")
    rng = check_random_state(random_state)
    common = dict(prior="mabn", kappa=kappa,
                  direction_concentration=direction_concentration,
                  magnitude_scale=magnitude_scale, random_state=rng)
    mu0_hist, a1_hist, a2_hist = [], [], []
    state = init
    for it in range(n_em_iter + 1):
        last = it == n_em_iter
        res = run_metropolis_hastings(
            X, y, n_components, mu0=mu0, alpha1=alpha1, alpha2=alpha2,
            n_samples=n_samples if last else sweeps,
            burn_in=burn_in if it == 0 or last else 0,
            thin=thin if last else 1, init=state, **common)
        mu0, alpha1, alpha2 = res.mu0, res.alpha1, res.alpha2  # validated values
        mu0_hist.append(mu0)
        a1_hist.append(alpha1)
        a2_hist.append(alpha2)
        if last:
            break
        state = {"beta": res.beta_samples[-1], "eta": res.eta_samples[-1]}
        mu0, alpha1, alpha2 = fit_mabn_hyperparameters(res.beta_samples,
                                                       res.eta_samples)
    res.mu0_history = np.array(mu0_hist)
    res.alpha1_history = np.array(a1_hist)
    res.alpha2_history = np.array(a2_hist)
    return res


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


def gate_auxiliaries_reference(mean_t, second_t, n_rounds=50, tol=1e-10, c_init=None,
                               method="newton_numpy"):
    """:func:`~skbinvi.experts._bounds.optimal_gate_auxiliaries` by another method.

    The package solver runs safeguarded Newton one row at a time in a Numba
    kernel (K >= 2); this was its ``method`` parameter:

    - "newton_numpy": the NumPy reference of that Newton iteration
      (vectorized over rows, the same bracket and steps), which the kernel is
      checked against in
      ``tests/test_experts_bounds.py::test_gate_newton_kernel_matches_numpy``;
    - "coordinate": alternate the closed-form d-step and c-step (coordinate
      descent on the upper bound, i.e. ascent on the ELBO; it converges
      linearly, typically a factor ~0.8 per round), the same minimizer.

    For K = 1 both run ``n_rounds`` coordinate steps, as the package does.
    Returns (c (n,), d (n, K)).
    """
    if method not in ("newton_numpy", "coordinate"):
        raise ValueError("method must be 'newton_numpy' or 'coordinate'; "
                         f"got {method!r}.")
    mean_t, var_t = _gate_moments(mean_t, second_t)
    n, K = mean_t.shape
    c = _gate_start(mean_t, c_init)
    if method == "coordinate" or K == 1:
        return _gate_coordinate(mean_t, var_t, c, n_rounds, tol)
    lo, hi = _gate_bracket(mean_t, var_t)
    c = np.clip(c, lo, hi)
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
