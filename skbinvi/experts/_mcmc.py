"""Metropolis-within-Gibbs sampling for the Bayesian mixture of experts (BMEM).

Model (METHODS.md section 3; [Xie] main paper, section on the MABN prior and
Metropolis-Hastings, and supplement section 3). K experts, inputs x_n in R^p
(rows of X, dense or CSR), labels y_n in {0, 1}:

    p(z_n = k | x_n)          = softmax_k(eta_k^T x_n),
    p(y_n = 1 | x_n, z_n = k) = sigmoid(beta_k^T x_n),

so that, with z_n summed out,

    p(y_n | x_n) = sum_k softmax_k(eta^T x_n) sigmoid((2 y_n - 1) beta_k^T x_n).

Priors
------
``prior="mabn"`` (BMEM-MABN-I): every vector a in {beta_1..beta_K} and
{eta_1..eta_K} is a = g u with g ~ Gamma(shape alpha1, rate alpha2) and u on
the unit sphere S^{p-1}; the directions of one set follow the Type I mutual
angular Bayesian network

    u_1 ~ vMF(mu0, kappa),  u_i ~ vMF(-s_i / ||s_i||, kappa),  s_i = sum_{j<i} u_j

(mu0 is used instead when s_i = 0 exactly). Each factor is an exact vMF density
with the constant normalizer C_p(kappa), so the prior is normalized
(:func:`log_mabn_type1_prior`). The sampler works in the coordinates (g, u),
and the posterior density is taken with respect to dg x (surface measure of
S^{p-1}) for every vector; no Jacobian enters because the proposals and the
prior are both expressed in these coordinates.

``prior="gaussian"`` (BMEM-G, the baseline): every vector a ~ N(0, sigma^2 I_p)
independently, sampled in Cartesian coordinates.

Sampler ([Xie] supplement section 3; METHODS.md section 3 (b))
-------------------------------------------------------------
One sweep updates beta_1, ..., beta_K, then eta_1, ..., eta_K. For the MABN
prior each vector gets a direction move, then a magnitude move:

* direction: u' ~ vMF(u, kappa_hat). The proposal is symmetric,
  vMF(u' | u, kappa_hat) = C_p(kappa_hat) exp(kappa_hat u^T u')
  = vMF(u | u', kappa_hat), so no Hastings correction is needed and none is
  applied.
* magnitude: g' ~ N(g, sigma_g^2) redrawn until g' > 0 ([Wilk]); the
  acceptance ratio carries Phi(g / sigma_g) / Phi(g' / sigma_g)
  (:func:`truncated_normal_log_hastings_ratio`).

For the Gaussian prior, one random-walk move a' = a + gaussian_scale * N(0, I)
(symmetric) per vector. Every acceptance test uses the full log posterior
difference: the log-likelihood of all the data plus the log prior of both
sets (for the MABN prior a change of u_k changes the means of the later
nodes, so the whole set's prior is recomputed, O(K p)). The (n, K) arrays of
the direction projections u_k^T x_n are cached: a direction move costs one
sparse-aware product X @ u' (O(nnz(X))) plus O(n K), a magnitude move
O(n K) (beta_k^T x_n = g_k u_k^T x_n).

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016 (main paper, MABN Type I and the MCMC
algorithm; supplement section 3, "Additional Details of the
Metropolis-Hastings Algorithm").
[Wilk] D. Wilkinson, "Metropolis Hastings MCMC when the proposal and target
have differing support", blog post, 2012 (the truncated proposal).
[D] Derivations marked [D] are ours; tests/test_experts_mcmc.py checks them
(the sampler's stationary distribution against exact prior draws and a grid
posterior, and that the chain without the truncation correction is wrong).
"""

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.utils import check_array, check_random_state

from ._bounds import _check_y
from ._vmf import log_normalizer, sample_vmf

__all__ = [
    "MCMCResult",
    "log_gamma_prior",
    "log_gaussian_prior",
    "log_likelihood",
    "log_likelihood_from_projections",
    "log_mabn_type1_prior",
    "mabn_type1_means",
    "predict_proba_samples",
    "run_metropolis_hastings",
    "sample_mabn_type1_prior",
    "truncated_normal_log_hastings_ratio",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
_PROPOSAL_BATCH = 2048


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------


def _check_X(X):
    """X as float64 ndarray or CSR of shape (n, p); n = 0 rows allowed."""
    X = check_array(X, accept_sparse="csr", dtype=np.float64,
                    ensure_min_samples=0)
    if sp.issparse(X):
        X = X.tocsr()
    return X


def _check_vectors(a, name, p=None):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must have shape (K, p); got {a.shape}.")
    if p is not None and a.shape[1] != p:
        raise ValueError(f"{name} has {a.shape[1]} columns but X has {p} features.")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite.")
    return a


def _check_unit_rows(U, name="U"):
    U = _check_vectors(U, name)
    if U.shape[1] < 2:
        raise ValueError(f"{name} needs p >= 2 columns; got {U.shape[1]}.")
    norms = np.linalg.norm(U, axis=1)
    if np.any(np.abs(norms - 1.0) > 1e-6):
        raise ValueError(f"the rows of {name} must be unit vectors; got norms {norms}.")
    return U / norms[:, None]


def _unit_mu0(mu0, p):
    if mu0 is None:
        mu0 = np.zeros(p)
        mu0[0] = 1.0
        return mu0
    mu0 = np.asarray(mu0, dtype=np.float64)
    if mu0.shape != (p,):
        raise ValueError(f"mu0 must have shape ({p},); got {mu0.shape}.")
    norm = np.linalg.norm(mu0)
    if not np.isfinite(norm) or abs(norm - 1.0) > 1e-6:
        raise ValueError(f"mu0 must be a unit vector; got norm {norm}.")
    return mu0 / norm


def _positive(value, name):
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0; got {value}.")
    return value


# ---------------------------------------------------------------------------
# likelihood
# ---------------------------------------------------------------------------


def _log_sigmoid(t):
    """log sigmoid(t) = -log(1 + exp(-t)), stable for any t."""
    return -np.logaddexp(0.0, -t)


def log_likelihood_from_projections(B, E, y):
    """Total log p(y | X, beta, eta) from the projections, in nats.

    Parameters
    ----------
    B : ndarray of shape (n, K)
        B[n, k] = beta_k^T x_n.
    E : ndarray of shape (n, K)
        E[n, k] = eta_k^T x_n.
    y : ndarray of shape (n,)
        Labels in {0, 1} (float).

    Returns
    -------
    loglik : float
        sum_n logsumexp_k (log softmax_k(E[n]) + log sigmoid((2 y_n - 1) B[n, k])),
        O(n K). 0.0 for n = 0.
    """
    if B.shape[0] == 0:
        return 0.0
    sign = (2.0 * y - 1.0)[:, None]
    return _loglik_fast(B, E, sign)


def _logsumexp_rows(a):
    """logsumexp over axis 1 of a finite (n, K) array (max-shifted)."""
    m = a.max(axis=1)
    return m + np.log(np.exp(a - m[:, None]).sum(axis=1))


def _loglik_fast(B, E, sign):
    """:func:`log_likelihood_from_projections` without checks; sign (n, 1)."""
    if B.shape[1] == 1:  # the gate is 1: sum of log sigmoid
        return float(np.sum(_log_sigmoid(sign[:, 0] * B[:, 0])))
    terms = E - _logsumexp_rows(E)[:, None] + _log_sigmoid(sign * B)
    return float(np.sum(_logsumexp_rows(terms)))


def log_likelihood(X, y, beta, eta):
    """Log-likelihood of the mixture of experts with the gate summed out.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR (n = 0 allowed: returns 0).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    beta : array_like of shape (K, p)
        Expert vectors (Cartesian).
    eta : array_like of shape (K, p)
        Gate vectors (Cartesian).

    Returns
    -------
    loglik : float
        sum_n log sum_k softmax_k(eta^T x_n) sigmoid((2 y_n - 1) beta_k^T x_n)
        in nats ([Xie] main paper, the BMEM likelihood), computed with
        logsumexp and log sigmoid (no overflow for large |beta^T x|).
        O(n K p) dense, O(nnz(X) K) sparse.
    """
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    beta = _check_vectors(beta, "beta", p)
    eta = _check_vectors(eta, "eta", p)
    if beta.shape != eta.shape:
        raise ValueError(f"beta and eta must have the same shape; got "
                         f"{beta.shape} and {eta.shape}.")
    B = np.asarray(X @ beta.T)
    E = np.asarray(X @ eta.T)
    return log_likelihood_from_projections(B, E, y)


# ---------------------------------------------------------------------------
# priors
# ---------------------------------------------------------------------------


def mabn_type1_means(U, mu0):
    """Mean directions of the Type I MABN factors: mu0, then -s_i / ||s_i||.

    Parameters
    ----------
    U : ndarray of shape (K, p)
        Unit directions u_1..u_K (rows, in node order).
    mu0 : ndarray of shape (p,)
        Unit mean direction of the root.

    Returns
    -------
    M : ndarray of shape (K, p)
        M[0] = mu0, M[i] = -s_i / ||s_i|| with s_i = sum_{j<i} u_j, and mu0
        where s_i = 0 exactly (a measure-zero event; any fixed unit vector
        keeps the density normalized).
    """
    K, p = U.shape
    M = np.empty((K, p))
    M[0] = mu0
    if K > 1:
        S = np.cumsum(U[:-1], axis=0)
        norms = np.linalg.norm(S, axis=1)
        zero = norms == 0.0
        safe = np.where(zero, 1.0, norms)
        M[1:] = -S / safe[:, None]
        M[1:][zero] = mu0
    return M


def log_mabn_type1_prior(U, kappa, mu0=None):
    """log p(u_1, ..., u_K) of the Type I MABN prior, in nats.

    Parameters
    ----------
    U : array_like of shape (K, p)
        Unit directions (rows), p >= 2.
    kappa : float
        Concentration >= 0 (0: independent uniform directions).
    mu0 : array_like of shape (p,), optional
        Root mean direction (unit); default e_1.

    Returns
    -------
    logp : float
        K log C_p(kappa) + kappa (mu0^T u_1 + sum_{i>=2} m_i^T u_i),
        m_i = -s_i / ||s_i||, with respect to the product of surface measures
        of S^{p-1} ([Xie] main paper, MABN Type I; METHODS.md section 3).
        Normalized [D]: integrating out u_K, ..., u_1 in turn, each factor
        is a normalized vMF density in its own variable given its parents.
        O(K p).
    """
    U = _check_unit_rows(U)
    kappa = float(kappa)
    if not np.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa must be finite and >= 0; got {kappa}.")
    mu0 = _unit_mu0(mu0, U.shape[1])
    return _log_mabn_unchecked(U, kappa, mu0, float(log_normalizer(U.shape[1], kappa)))


def _log_mabn_unchecked(U, kappa, mu0, log_c):
    M = mabn_type1_means(U, mu0)
    return U.shape[0] * log_c + kappa * float(np.einsum("kp,kp->", M, U))


def log_gamma_prior(g, alpha1, alpha2):
    """Sum of log Gamma(g_k | shape alpha1, rate alpha2) densities, in nats.

    Parameters
    ----------
    g : float or array_like of shape (K,)
        Magnitudes.
    alpha1 : float
        Shape > 0.
    alpha2 : float
        Rate > 0.

    Returns
    -------
    logp : float
        sum_k [alpha1 log alpha2 - log Gamma(alpha1) + (alpha1 - 1) log g_k
        - alpha2 g_k]; -inf if any g_k <= 0.
    """
    g = np.atleast_1d(np.asarray(g, dtype=np.float64))
    alpha1 = _positive(alpha1, "alpha1")
    alpha2 = _positive(alpha2, "alpha2")
    if np.any(g <= 0):
        return -np.inf
    return float(np.sum(alpha1 * np.log(alpha2) - special.gammaln(alpha1)
                        + (alpha1 - 1.0) * np.log(g) - alpha2 * g))


def log_gaussian_prior(A, sigma):
    """Sum of log N(a_k | 0, sigma^2 I_p) over the rows of A, in nats.

    Parameters
    ----------
    A : array_like of shape (K, p)
        Cartesian vectors.
    sigma : float
        Prior standard deviation > 0.

    Returns
    -------
    logp : float
        -||A||_F^2 / (2 sigma^2) - (K p / 2) log(2 pi sigma^2).
    """
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    sigma = _positive(sigma, "sigma")
    return float(-0.5 * np.sum(A * A) / sigma ** 2
                 - 0.5 * A.size * (_LOG_2PI + 2.0 * np.log(sigma)))


def truncated_normal_log_hastings_ratio(g, g_new, scale):
    """log q(g | g') - log q(g' | g) for the positive-truncated normal proposal.

    Parameters
    ----------
    g : float
        Current magnitude, > 0.
    g_new : float
        Proposed magnitude, > 0.
    scale : float
        Standard deviation s of the untruncated normal proposal.

    Returns
    -------
    log_ratio : float
        log Phi(g / s) - log Phi(g' / s).

    Notes
    -----
    [D] Redrawing g' ~ N(g, s^2) until g' > 0 ([Xie] supplement section 3,
    [Wilk]) samples the normal truncated to (0, inf):
    q(g' | g) = phi((g' - g) / s) / (s Phi(g / s)) for g' > 0, since
    P(N(g, s^2) > 0) = Phi(g / s). phi is even, so
    q(g | g') / q(g' | g) = [phi((g - g') / s) / Phi(g' / s)]
    / [phi((g' - g) / s) / Phi(g / s)] = Phi(g / s) / Phi(g' / s).
    Evaluated with ``scipy.special.log_ndtr`` (no underflow for g << -s).
    """
    return float(special.log_ndtr(g / scale) - special.log_ndtr(g_new / scale))


def sample_mabn_type1_prior(K, p, kappa, mu0=None, size=1, random_state=None):
    """Exact draws of the directions from the Type I MABN prior.

    Parameters
    ----------
    K : int
        Number of nodes (vectors), >= 1.
    p : int
        Dimension, >= 2.
    kappa : float
        Concentration >= 0.
    mu0 : array_like of shape (p,), optional
        Root mean direction; default e_1.
    size : int, default=1
        Number of independent draws of the whole set.
    random_state : int, RandomState instance or None
        Seed or generator.

    Returns
    -------
    U : ndarray of shape (size, K, p)
        Ancestral draws: u_1 ~ vMF(mu0, kappa), u_i ~ vMF(-s_i/||s_i||, kappa)
        with :func:`~skbinvi.experts._vmf.sample_vmf`.
    """
    rng = check_random_state(random_state)
    mu0 = _unit_mu0(mu0, p)
    out = np.empty((size, K, p))
    for t in range(size):
        for i in range(K):
            mean = mabn_type1_means(out[t, :i + 1], mu0)[i] if i else mu0
            out[t, i] = sample_vmf(mean, kappa, 1, rng)[0]
    return out


# ---------------------------------------------------------------------------
# the sampler
# ---------------------------------------------------------------------------


class _DirectionProposer:
    """Draws u' ~ vMF(u, kappa_hat) from batches of vMF(e_p, kappa_hat) draws.

    Batches come from :func:`~skbinvi.experts._vmf.sample_vmf`
    (``scipy.stats.vonmises_fisher``) around e_p, and each draw x is mapped by
    the Householder reflection H with H e_p = u (h = e_p - u,
    H = I - 2 h h^T / h^T h). H is orthogonal and vMF(x | mu, k) depends on
    x only through mu^T x, so H x ~ vMF(H e_p, k) = vMF(u, k) [D]. Batching
    avoids one SciPy distribution object per proposal (~100 us each).
    """

    def __init__(self, p, kappa_hat, rng):
        self.p = p
        self.kappa_hat = kappa_hat
        self.rng = rng
        self.e = np.zeros(p)
        self.e[-1] = 1.0
        self.buffer = np.empty((0, p))
        self.pos = 0

    def __call__(self, u):
        if self.pos >= self.buffer.shape[0]:
            self.buffer = sample_vmf(self.e, self.kappa_hat, _PROPOSAL_BATCH, self.rng)
            self.pos = 0
        x = self.buffer[self.pos]
        self.pos += 1
        h = self.e - u
        hh = float(h @ h)
        if hh > 1e-30:
            x = x - (2.0 * float(x @ h) / hh) * h
        return x / np.linalg.norm(x)


@dataclass
class MCMCResult:
    """Output of :func:`run_metropolis_hastings`.

    Attributes
    ----------
    beta_samples : ndarray of shape (n_kept, K, p)
        Kept expert vectors (Cartesian), n_kept = n_samples.
    eta_samples : ndarray of shape (n_kept, K, p)
        Kept gate vectors (Cartesian).
    acceptance_rates : dict of str to float
        Fraction of accepted proposals over all sweeps (burn-in included):
        keys "expert_direction", "expert_magnitude", "gate_direction",
        "gate_magnitude" (MABN) or "expert_gaussian", "gate_gaussian".
    log_posterior : ndarray of shape (n_sweeps,)
        Unnormalized log posterior (log-likelihood + log priors, nats) after
        every sweep, n_sweeps = burn_in + n_samples * thin.
    log_likelihood : ndarray of shape (n_sweeps,)
        The log-likelihood part of ``log_posterior``.
    prior : str
        "mabn" or "gaussian".
    """

    beta_samples: np.ndarray
    eta_samples: np.ndarray
    acceptance_rates: dict = field(default_factory=dict)
    log_posterior: np.ndarray = None
    log_likelihood: np.ndarray = None
    prior: str = "mabn"


def run_metropolis_hastings(X, y, n_components, *, prior="mabn", kappa=1.0,
                            mu0=None, alpha1=1.0, alpha2=1.0, sigma=1.0,
                            n_samples=1000, burn_in=1000, thin=1,
                            direction_concentration=50.0, magnitude_scale=0.1,
                            gaussian_scale=0.1, random_state=None, init=None,
                            _truncation_correction=True):
    """Metropolis-within-Gibbs sampling of the BMEM posterior.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR. n = 0 rows is allowed: the likelihood is then 1
        and the chain samples the prior (used by the tests).
    y : array_like of shape (n,)
        Labels in {0, 1}.
    n_components : int
        Number of experts K >= 1.
    prior : {"mabn", "gaussian"}, default="mabn"
        Type I MABN directions x Gamma magnitudes, or N(0, sigma^2 I) vectors
        (BMEM-G).
    kappa : float, default=1.0
        MABN concentration (diversity strength), >= 0.
    mu0 : array_like of shape (p,), optional
        Root mean direction of both MABN sets (unit); default e_1.
    alpha1, alpha2 : float, default=1.0
        Shape and rate of the Gamma prior on the magnitudes.
    sigma : float, default=1.0
        Standard deviation of the Gaussian prior.
    n_samples : int, default=1000
        Number of kept samples.
    burn_in : int, default=1000
        Sweeps discarded first.
    thin : int, default=1
        Keep every ``thin``-th sweep after burn-in.
    direction_concentration : float, default=50.0
        kappa_hat of the vMF random-walk proposal of the directions (>= 0).
    magnitude_scale : float, default=0.1
        sigma_g of the truncated normal proposal of the magnitudes (> 0).
    gaussian_scale : float, default=0.1
        Step of the Gaussian random walk (prior="gaussian"), > 0.
    random_state : int, RandomState instance or None
        Seed (scikit-learn convention; ``sklearn.utils.check_random_state``).
    init : dict, optional
        {"beta": (K, p), "eta": (K, p)} Cartesian starting vectors (non-zero
        rows for MABN). Default: a draw from the prior.
    _truncation_correction : bool, default=True
        Private, for tests only: False drops the factor
        Phi(g / s) / Phi(g' / s), which makes the chain wrong.

    Returns
    -------
    result : MCMCResult
        Samples, acceptance rates and log-posterior trace.

    Notes
    -----
    A sweep updates beta_1..beta_K then eta_1..eta_K, one vector at a time.
    MABN: direction move u' ~ vMF(u, kappa_hat), accepted with probability
    min(1, exp(Delta log posterior)) (the vMF proposal is symmetric); then
    magnitude move g' ~ N(g, s^2) | g' > 0, accepted with probability
    min(1, exp(Delta log posterior + log Phi(g/s) - log Phi(g'/s)))
    (:func:`truncated_normal_log_hastings_ratio`). Gaussian: a' = a +
    gaussian_scale * N(0, I), symmetric. Delta log posterior is the change of
    the full log-likelihood (all n samples) plus log prior of the updated set.
    Per proposal O(n K) plus X @ u' (O(nnz X)) for a direction/Gaussian move.
    [Xie] supplement section 3 also learns mu0, alpha1, alpha2 by EM with
    this sampler in the E-step; that outer loop is not implemented here.
    """
    if prior not in ("mabn", "gaussian"):
        raise ValueError(f"prior must be 'mabn' or 'gaussian'; got {prior!r}.")
    X = _check_X(X)
    n, p = X.shape
    y = _check_y(y, n)
    K = int(n_components)
    if K < 1:
        raise ValueError(f"n_components must be >= 1; got {n_components}.")
    if p < 2 and prior == "mabn":
        raise ValueError("the MABN prior needs p >= 2 features.")
    n_samples, burn_in, thin = int(n_samples), int(burn_in), int(thin)
    if n_samples < 0 or burn_in < 0 or thin < 1:
        raise ValueError("need n_samples >= 0, burn_in >= 0 and thin >= 1.")
    rng = check_random_state(random_state)
    n_sweeps = burn_in + n_samples * thin

    if prior == "mabn":
        kappa = float(kappa)
        if not np.isfinite(kappa) or kappa < 0:
            raise ValueError(f"kappa must be finite and >= 0; got {kappa}.")
        kappa_hat = float(direction_concentration)
        if not np.isfinite(kappa_hat) or kappa_hat < 0:
            raise ValueError("direction_concentration must be finite and >= 0.")
        s_g = _positive(magnitude_scale, "magnitude_scale")
        alpha1 = _positive(alpha1, "alpha1")
        alpha2 = _positive(alpha2, "alpha2")
        mu0 = _unit_mu0(mu0, p)
        log_c = float(log_normalizer(p, kappa))
    else:
        sigma = _positive(sigma, "sigma")
        step = _positive(gaussian_scale, "gaussian_scale")

    # ---- initial state: vectors[0] = beta (K, p), vectors[1] = eta (K, p)
    if init is None:
        if prior == "mabn":
            vecs = [sample_mabn_type1_prior(K, p, kappa, mu0, 1, rng)[0]
                    * rng.gamma(alpha1, 1.0 / alpha2, size=K)[:, None]
                    for _ in range(2)]
        else:
            vecs = [sigma * rng.normal(size=(K, p)) for _ in range(2)]
    else:
        vecs = [_check_vectors(init["beta"], "init['beta']", p).copy(),
                _check_vectors(init["eta"], "init['eta']", p).copy()]
        for v in vecs:
            if v.shape[0] != K:
                raise ValueError(f"init vectors must have {K} rows.")

    if prior == "mabn":
        G = [np.linalg.norm(v, axis=1) for v in vecs]
        if any(np.any(g <= 0) for g in G):
            raise ValueError("init vectors must be non-zero for the MABN prior.")
        U = [v / g[:, None] for v, g in zip(vecs, G, strict=True)]
        # cached direction projections P[s][:, k] = u_k^T x_n
        P = [np.asarray(X @ u.T).reshape(n, K) for u in U]
        proj = [P[s] * G[s][None, :] for s in range(2)]  # a_k^T x_n

        gamma_const = alpha1 * np.log(alpha2) - special.gammaln(alpha1)

        def log_prior_set(s):
            g = G[s]
            return (_log_mabn_unchecked(U[s], kappa, mu0, log_c)
                    + K * gamma_const
                    + float(np.sum((alpha1 - 1.0) * np.log(g) - alpha2 * g)))

        propose_dir = _DirectionProposer(p, kappa_hat, rng)
        counts = {f"{who}_{kind}": [0, 0] for who in ("expert", "gate")
                  for kind in ("direction", "magnitude")}
    else:
        A = vecs
        proj = [np.asarray(X @ a.T).reshape(n, K) for a in A]

        def log_prior_set(s):
            return log_gaussian_prior(A[s], sigma)

        counts = {f"{who}_gaussian": [0, 0] for who in ("expert", "gate")}

    loglik = log_likelihood_from_projections(proj[0], proj[1], y)
    logprior = [log_prior_set(0), log_prior_set(1)]
    names = ("expert", "gate")

    sign = (2.0 * y - 1.0)[:, None]

    def loglik_with(s, k, column):
        B, E = proj
        if n == 0:
            return 0.0
        if K == 1 and s == 1:  # the gate of a single expert is 1
            return loglik
        if s == 0:
            B = B.copy()
            B[:, k] = column
        else:
            E = E.copy()
            E[:, k] = column
        return _loglik_fast(B, E, sign)

    def accept(log_alpha, kind):
        """Metropolis-Hastings accept/reject; counts proposals and acceptances."""
        counts[kind][1] += 1
        if np.log(rng.uniform()) < log_alpha:
            counts[kind][0] += 1
            return True
        return False

    beta_out = np.empty((n_samples, K, p))
    eta_out = np.empty((n_samples, K, p))
    trace = np.empty(n_sweeps)
    trace_ll = np.empty(n_sweeps)
    kept = 0

    for sweep in range(n_sweeps):
        for s in range(2):
            for k in range(K):
                if prior == "mabn":
                    # -- direction move (symmetric vMF proposal: no correction)
                    u_old = U[s][k].copy()
                    u_new = propose_dir(u_old)
                    p_col = np.asarray(X @ u_new).ravel() if n else np.empty(0)
                    U[s][k] = u_new
                    lp_new = log_prior_set(s)
                    ll_new = loglik_with(s, k, G[s][k] * p_col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    if accept(log_alpha, f"{names[s]}_direction"):
                        loglik, logprior[s] = ll_new, lp_new
                        P[s][:, k] = p_col
                        proj[s][:, k] = G[s][k] * p_col
                    else:
                        U[s][k] = u_old
                    # -- magnitude move (positive-truncated normal proposal)
                    g_old = G[s][k]
                    g_new = -1.0
                    while g_new <= 0.0:
                        g_new = g_old + s_g * rng.normal()
                    G[s][k] = g_new
                    lp_new = log_prior_set(s)
                    col = g_new * P[s][:, k]
                    ll_new = loglik_with(s, k, col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    if _truncation_correction:
                        log_alpha += truncated_normal_log_hastings_ratio(
                            g_old, g_new, s_g)
                    if accept(log_alpha, f"{names[s]}_magnitude"):
                        loglik, logprior[s] = ll_new, lp_new
                        proj[s][:, k] = col
                    else:
                        G[s][k] = g_old
                else:
                    a_old = A[s][k].copy()
                    a_new = a_old + step * rng.normal(size=p)
                    A[s][k] = a_new
                    lp_new = log_prior_set(s)
                    col = np.asarray(X @ a_new).ravel() if n else np.empty(0)
                    ll_new = loglik_with(s, k, col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    if accept(log_alpha, f"{names[s]}_gaussian"):
                        loglik, logprior[s] = ll_new, lp_new
                        proj[s][:, k] = col
                    else:
                        A[s][k] = a_old
        trace_ll[sweep] = loglik
        trace[sweep] = loglik + logprior[0] + logprior[1]
        if sweep >= burn_in and (sweep - burn_in + 1) % thin == 0:
            if prior == "mabn":
                beta_out[kept] = U[0] * G[0][:, None]
                eta_out[kept] = U[1] * G[1][:, None]
            else:
                beta_out[kept] = A[0]
                eta_out[kept] = A[1]
            kept += 1

    rates = {key: (c[0] / c[1] if c[1] else float("nan")) for key, c in counts.items()}
    return MCMCResult(beta_samples=beta_out, eta_samples=eta_out,
                      acceptance_rates=rates, log_posterior=trace,
                      log_likelihood=trace_ll, prior=prior)


# ---------------------------------------------------------------------------
# prediction
# ---------------------------------------------------------------------------


def predict_proba_samples(X, beta_samples, eta_samples):
    """Posterior predictive class probabilities averaged over samples.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    beta_samples : array_like of shape (S, K, p) or (K, p)
        Expert vectors of S posterior samples.
    eta_samples : array_like of shape (S, K, p) or (K, p)
        Gate vectors of the same samples.

    Returns
    -------
    proba : ndarray of shape (n, 2)
        Columns p(y = 0 | x), p(y = 1 | x) with
        p(y = 1 | x) = (1/S) sum_s sum_k softmax_k(eta^(s)T x) sigmoid(beta_k^(s)T x)
        (METHODS.md section 3, prediction). O(S n K p), one sample at a time.
    """
    X = _check_X(X)
    n, p = X.shape
    Bs = np.asarray(beta_samples, dtype=np.float64)
    Es = np.asarray(eta_samples, dtype=np.float64)
    if Bs.ndim == 2:
        Bs, Es = Bs[None], Es[None]
    if Bs.ndim != 3 or Bs.shape != Es.shape or Bs.shape[2] != p or Bs.shape[0] < 1:
        raise ValueError(f"beta_samples and eta_samples must have the same shape "
                         f"(S, K, {p}); got {Bs.shape} and {Es.shape}.")
    p1 = np.zeros(n)
    for b, e in zip(Bs, Es, strict=True):
        B = np.asarray(X @ b.T)
        E = np.asarray(X @ e.T)
        gate = special.softmax(E, axis=1)
        p1 += np.sum(gate * special.expit(B), axis=1)
    p1 /= Bs.shape[0]
    return np.column_stack([1.0 - p1, p1])
