"""Variational fitting of the Bayesian mixture of experts: "vi" and "pr".

METHODS.md section 3 (a) and (c); [Xie] supplement sections 2 and 4.

Model and variational family as in :mod:`skbinvi.experts._bounds`: K experts
beta_k = g_k u_k and K gates eta_k = g'_k u'_k, q(u) = vMF(mu, kappa),
q(g) = Gamma(shape r, rate s), q(z_n) = Categorical(phi_n). Two objectives
(both in nats, totals over the n samples):

* ``method="pr"`` (posterior regularization, [Xie] supplement Eqs. 19-20):

      F_pr = independent_prior_elbo(prior = vMF(mu0, kappa_prior) x Gamma(alpha1, alpha2))
             + lambda1 Omega({E u_k of the experts}) + lambda2 Omega({E u_k of the gates}),

  Omega the mutual angular regularizer with variance weight ``pr_gamma``
  (:mod:`skbinvi.experts._angular`; Omega is in radians, so lambda1, lambda2
  are in nats per radian).

* ``method="vi"`` (Type II MABN prior on the directions of the experts and,
  separately, of the gates; Gamma(alpha1, alpha2) priors on the magnitudes):

      F_vi = L_lik + sum_{set in (beta, eta)} [ sum_i LB_i(E u_1..E u_K)
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
   (:func:`~skbinvi.experts._gradients.ascent_step`, tangent projection then
   retraction), kappa, r, s in log scale. The gradient is preconditioned by
   a positive constant per block (field x set, 8 blocks: the largest entry
   of each block's log-scale / tangent gradient is scaled to 1), which keeps
   it an ascent direction. Backtracking: the step h is halved until the
   fixed-auxiliary objective is >= its value at the current q (= F_t);
   after an accepted step h doubles (capped at ``_MAX_STEP``). Re-optimizing
   the auxiliaries in step 1 can then only increase it further.

Stop when (F_t - F_{t-1}) / max(|F_{t-1}|, 1) < tol, when no step is
accepted (h below ``_MIN_STEP``), or after ``max_iter`` iterations. Cost per
iteration O(nnz(X) K) (dense: O(n K p)) per objective evaluation, plus
O(K^2 p) for Omega / MABN; the number of evaluations per iteration is 1 +
the number of halvings.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016 (main paper; supplement sections 2, 4).
[AM] P.-A. Absil, R. Mahony, R. Sepulchre, "Optimization Algorithms on
Matrix Manifolds", 2008 (retraction-based line search, section 4.2).
[D] our derivations, stated here and tested in
tests/test_experts_variational.py.
"""

from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from ._angular import mutual_angular_regularizer
from ._bounds import (
    VMFGammaParams,
    _check_X,
    _check_y,
    gamma_kl,
    independent_prior_kl,
    likelihood_bound,
    mabn_expected_log_prior_lower_bound,
)
from ._gradients import (
    VMFGammaGradient,
    angular_regularizer_gradients,
    ascent_step,
    combine,
    kl_gradients,
    likelihood_bound_gradients,
    mabn_gradients,
    project_to_tangent,
)
from ._vmf import _bessel_quantities, vmf_entropy

__all__ = ["VariationalFitResult", "fit_variational", "variational_objective"]

# trust-region-like bounds on the step h (max change per step of any
# log kappa, log r, log s, or of any mu entry along the tangent, in the
# preconditioned direction)
_MAX_STEP = 1.0
_MIN_STEP = 1e-12
_INIT_STEP = 0.25
# Gamma shape of the initial q(g) (E g = init_scale)
_INIT_SHAPE = 5.0


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


# ---------------------------------------------------------------------------
# objective pieces
# ---------------------------------------------------------------------------


def _as_params(params):
    mu, kappa, r, s = params
    K = np.asarray(mu).shape[0]
    return VMFGammaParams(np.asarray(mu, dtype=np.float64),
                          np.broadcast_to(np.asarray(kappa, dtype=np.float64), (K,)).copy(),
                          np.broadcast_to(np.asarray(r, dtype=np.float64), (K,)).copy(),
                          np.broadcast_to(np.asarray(s, dtype=np.float64), (K,)).copy())


def _mean_directions(params):
    mu, kappa = params.mu, params.kappa
    a = _bessel_quantities(np.full(kappa.shape, float(mu.shape[1])), kappa)[0]
    return a[:, None] * mu


def _prior_term(params, cfg, lam, need_grad):
    """Prior (+ regularizer) part of the objective for one set of K vectors.

    Returns value (nats) and, if ``need_grad``, a VMFGammaGradient.
    """
    method, kappa_prior, mu0, alpha1, alpha2, gamma = cfg
    p = params.mu.shape[1]
    if method == "pr":
        prior = (mu0, kappa_prior, alpha1, alpha2)
        if need_grad:
            g, kl = kl_gradients(params, prior, return_value=True)
            value = -float(np.sum(kl))
            grad = combine((-1.0, g))
        else:
            value = -float(np.sum(independent_prior_kl(params, prior)))
        if lam != 0.0 and params.mu.shape[0] > 1:
            if need_grad:
                go, omega = angular_regularizer_gradients(params, gamma, return_value=True)
                grad = combine((1.0, grad), (lam, go))
            else:
                omega = mutual_angular_regularizer(params.mu, gamma)
            value += lam * float(omega)
    else:  # "vi": MABN lower bound + vMF entropy - Gamma KL
        ent = np.asarray(vmf_entropy(p, params.kappa), dtype=np.float64)
        gkl = np.broadcast_to(gamma_kl(params.r, params.s, alpha1, alpha2),
                              params.kappa.shape)
        if need_grad:
            gm, mabn = mabn_gradients(params, kappa_prior, mu0, return_value=True)
            # -KL(q || uniform x Gamma prior) = H[q(u)] - log|S| - KL_gamma
            gk = kl_gradients(params, (mu0, 0.0, alpha1, alpha2))
            grad = combine((1.0, gm), (-1.0, gk))
        else:
            mabn = float(np.sum(mabn_expected_log_prior_lower_bound(
                _mean_directions(params), kappa_prior, mu0)))
        value = float(mabn) + float(np.sum(ent)) - float(np.sum(gkl))
    if need_grad:
        return value, grad
    return value


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
    return (method, kappa_prior, mu0, float(alpha1), float(alpha2), float(pr_gamma)), \
        (lam1, lam2)


def _full_objective(X, y, beta, eta, cfg, lams, aux=None, c_init=None, cached=None):
    """Objective at fixed aux=(phi, xi, c, d), or at optimal ones if aux is None.

    ``cached`` = (which, value): the prior term of set ``which`` (0 beta,
    1 eta) is known. Returns (value, aux_used).
    """
    if aux is None:
        lik, a = likelihood_bound(X, y, beta, eta, c_init=c_init, return_aux=True)
        aux = (a["phi"], a["xi"], a["c"], a["d"])
    else:
        phi, xi, c, d = aux
        lik = likelihood_bound(X, y, beta, eta, phi, xi=xi, c=c, d=d)
    pri = [None, None]
    if cached is not None:
        pri[cached[0]] = cached[1]
    for j, par in enumerate((beta, eta)):
        if pri[j] is None:
            pri[j] = _prior_term(par, cfg, lams[j], False)
    value = lik + pri[0] + pri[1]
    return float(value), aux


def variational_objective(X, y, beta, eta, *, method="vi", kappa_prior=1.0, mu0=None,
                          alpha1=2.0, alpha2=0.5, pr_weights=(0.0, 0.0), pr_gamma=0.0,
                          aux=None, return_aux=False):
    """The "vi" or "pr" objective of the BMEM at a given q, in nats.

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
    value, aux = _full_objective(X, y, _as_params(beta), _as_params(eta), cfg, lams, aux)
    return (value, aux) if return_aux else value


# ---------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------


def _block_scaled(params, grad):
    """Per-field positive rescaling of the ascent direction (log scale, tangent)."""
    g_mu = project_to_tangent(params.mu, grad.mu)
    fields = [g_mu, params.kappa * grad.kappa, params.r * grad.r, params.s * grad.s]
    out = []
    for f in fields:
        m = float(np.max(np.abs(f), initial=0.0))
        out.append(f / m if m > 0 and np.isfinite(m) else np.zeros_like(f))
    # back to the (mu, kappa, r, s) gradient convention of ascent_step, whose
    # log-scale update multiplies by the value again
    return VMFGammaGradient(out[0], out[1] / params.kappa, out[2] / params.r,
                            out[3] / params.s)


def _init_params(K, p, rng, kappa_init, init_scale):
    mu = rng.normal(size=(K, p))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    return VMFGammaParams(mu, np.full(K, float(kappa_init)), np.full(K, _INIT_SHAPE),
                          np.full(K, _INIT_SHAPE / float(init_scale)))


def fit_variational(X, y, n_components, *, method="vi", kappa_prior=1.0, mu0=None,
                    alpha1=2.0, alpha2=0.5, pr_weights=(1.0, 1.0), pr_gamma=0.0,
                    max_iter=200, tol=1e-6, init_scale=1.0, kappa_init=10.0,
                    random_state=None, verbose=0, callback=None):
    """Fit q of the Bayesian mixture of experts by coordinate ascent ("vi" or "pr").

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR, p >= 2 (add a constant column for intercepts).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_components : int
        Number of experts K (and gates).
    method : {"vi", "pr"}, default="vi"
        "vi": Type II MABN prior on the directions (variational inference,
        METHODS.md 3 (a)); "pr": independent priors + posterior regularization
        (METHODS.md 3 (c)). Objectives in the module docstring.
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
        Maximum number of iterations.
    tol : float, default=1e-6
        Stop when the relative increase of the objective is below tol.
    init_scale : float, default=1.0
        Initial E[g] = r / s (r = 5).
    kappa_init : float, default=10.0
        Initial variational concentrations.
    random_state : int, RandomState instance or None
        Seed of the random initial mean directions.
    verbose : int, default=0
        Print the objective every iteration if > 0.
    callback : callable or None
        Called as ``callback(iteration, beta, eta, objective)`` after each
        iteration.

    Returns
    -------
    result : VariationalFitResult
        Fitted q(beta), q(eta), objective history (nats, totals), n_iter,
        converged flag and final auxiliaries.

    Notes
    -----
    The objective history is non-decreasing up to rounding: the line search
    only accepts steps that do not decrease the fixed-auxiliary objective,
    and the re-optimized auxiliaries are kept only if they do not decrease it
    (otherwise the previous ones, for which the bound is equally valid, are
    kept). Predict with
    :func:`~skbinvi.experts._bounds.predict_proba_posterior_mean`.
    """
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    K = int(n_components)
    if K < 1:
        raise ValueError(f"n_components must be >= 1; got {n_components!r}.")
    if not np.isfinite(init_scale) or init_scale <= 0:
        raise ValueError("init_scale must be > 0.")
    cfg, lams = _check_config(method, kappa_prior, mu0, alpha1, alpha2, pr_weights,
                              pr_gamma, p)
    rng = check_random_state(random_state)
    beta = _init_params(K, p, rng, kappa_init, init_scale)
    eta = _init_params(K, p, rng, kappa_init, init_scale)

    value, aux = _full_objective(X, y, beta, eta, cfg, lams)
    history = [value]
    # one step size per block (set x field): 0-3 beta (mu, kappa, r, s), 4-7 eta
    steps = np.full(8, _INIT_STEP)
    converged = False
    for it in range(1, int(max_iter) + 1):
        phi, xi, c, d = aux
        start = value
        any_accepted = False
        for b in range(8):
            which, f = divmod(b, 4)
            cur = (beta, eta)[which]
            # fresh gradient per block (a stale one fails the line search more often)
            gb, ge = likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d)
            _, pg = _prior_term(cur, cfg, lams[which], True)
            full = _block_scaled(cur, combine((1.0, (gb, ge)[which]), (1.0, pg)))
            other = 1 - which
            if f == 0:  # the other set's prior term is constant during this set's blocks
                other_val = _prior_term((beta, eta)[other], cfg, lams[other], False)
            direction = VMFGammaGradient(*[full[j] if j == f else np.zeros_like(full[j])
                                           for j in range(4)])
            h = steps[b]
            while h >= _MIN_STEP:
                try:
                    new = ascent_step(cur, direction, h)
                    nb, ne = (new, eta) if which == 0 else (beta, new)
                    cand, _ = _full_objective(X, y, nb, ne, cfg, lams, aux,
                                              cached=(other, other_val))
                except (ValueError, FloatingPointError):
                    cand = -np.inf
                if np.isfinite(cand) and cand >= value:
                    beta, eta, value = nb, ne, cand
                    any_accepted = True
                    steps[b] = min(2.0 * h, _MAX_STEP)
                    break
                h *= 0.5
            else:
                steps[b] = _INIT_STEP * 1e-3
        if not any_accepted:
            converged = True
            break
        new_value, new_aux = _full_objective(X, y, beta, eta, cfg, lams, c_init=c)
        if new_value < value:  # rounding in the auxiliaries' solver: keep the old ones
            new_value, new_aux = value, aux
        rel = (new_value - start) / max(abs(start), 1.0)
        value, aux = new_value, new_aux
        history.append(value)
        if verbose:
            print(f"[fit_variational:{cfg[0]}] iter {it:4d}  objective {value:.6f}")
        if callback is not None:
            callback(it, beta, eta, value)
        if rel < tol:
            converged = True
            break
    phi, xi, c, d = aux
    return VariationalFitResult(beta, eta, np.asarray(history), len(history) - 1,
                                converged, phi, xi, c, d, cfg[0], steps.copy())
