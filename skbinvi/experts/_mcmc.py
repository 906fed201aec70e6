"""Metropolis-within-Gibbs sampling for the Bayesian mixture of experts (BMEM).

Model (user guide :ref:`experts`; [Xie] main paper, section on the MABN prior and
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

Sampler ([Xie] supplement section 3; user guide, "Metropolis-Hastings")
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
nodes, so the whole set's prior is recomputed, O(K p)).

Costs
-----
The projections u_k^T x_n (MABN) and a_k^T x_n are cached, so a direction or
Gaussian move costs one sparse-aware product X @ u' (O(nnz(X)), SciPy) and a
magnitude move none (beta_k^T x_n = g_k u_k^T x_n). The new total
log-likelihood of a proposal is not recomputed over the (n, K) array: numba
kernels (section "numba kernels" below) keep per-row sums of the gate
weights and expert probabilities, with the proposed column left out as
prefix + suffix sums of positive terms, so a proposal costs O(n): one
exp per row (the new sigmoid or gate weight), additions, a division and
about one log per few hundred rows; no subtract-and-add, hence no
cancellation, and rows that would underflow are recomputed in log space.
Per set and sweep the suffix sums cost O(n K) additions. The result equals
the NumPy reference :func:`log_likelihood_from_projections` to rounding
(relative differences ~1e-16, checked in the tests), so the chain is the
same as with the reference. Memory: about 6 K n float64 (47 MB for Adult,
n = 32561, K = 30). Per sweep: 4 K proposals (MABN) or 2 K (Gaussian), i.e.
O(K (n + nnz(X) + K p)). Measured on UCI Adult (n = 32561, p = 124, CSR
with ~14 non-zeros per row; one core): about 0.011 s per sweep for K = 5 and
0.055 s for K = 30, against 0.18 s and 5.5 s with the NumPy reference (plus,
for both, a one-off ~1 s for K = 30 to draw the initial state from the
prior).

Hyper-parameters
----------------
``run_monte_carlo_em`` (tests/_reference/experts.py) learns mu0, alpha1,
alpha2 by Monte Carlo EM ([Xie] supplement section 3; [WT]): blocks of
sweeps as the E-step, and
:func:`fit_mabn_hyperparameters` (Gamma MLE of the magnitudes, vMF mean
direction of the root nodes) as the M-step.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016 (main paper, MABN Type I and the MCMC
algorithm; supplement section 3, "Additional Details of the
Metropolis-Hastings Algorithm").
[Wilk] D. Wilkinson, "Metropolis Hastings MCMC when the proposal and target
have differing support", blog post, 2012 (the truncated proposal).
[WT] G. C. G. Wei, M. A. Tanner, "A Monte Carlo implementation of the EM
algorithm and the poor man's data augmentation algorithms", JASA 85 (1990)
699-704.
[Minka] T. P. Minka, "Estimating a Gamma distribution", Microsoft Research
technical note, 2002.
[MJ] K. V. Mardia, P. E. Jupp, "Directional Statistics", Wiley 2000,
section 10.3 (vMF maximum likelihood).
[AS] M. Abramowitz, I. Stegun, "Handbook of Mathematical Functions", 6.3.18
(asymptotic series of the digamma function).
[D] Derivations marked [D] are ours; tests/test_experts_mcmc.py checks them
(the sampler's stationary distribution against exact prior draws and a grid
posterior, that the chain without the truncation correction is wrong, the
fast likelihood against the NumPy reference, and the EM M-step against
exact prior draws).
"""

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy import optimize, special
from sklearn.utils import check_array, check_random_state

from .._math import log_sigmoid, sigmoid
from .._numba import njit
from ._bounds import _check_y
from ._vmf import _sample_vmf_wood, log_normalizer, sample_vmf

__all__ = [
    "MCMCResult",
    "fit_mabn_hyperparameters",
    "gamma_mle",
    "gate_proba_samples",
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


def _per_vector(value, name, K, allow_zero=False):
    """A proposal parameter as a (2, K) float array (scalar broadcast), checked."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full((2, K), float(arr))
    if arr.shape != (2, K):
        raise ValueError(f"{name} must be a scalar or of shape (2, {K}); "
                         f"got {arr.shape}.")
    bad = ~np.isfinite(arr) | ((arr < 0) if allow_zero else (arr <= 0))
    if np.any(bad):
        raise ValueError(f"{name} must be finite and "
                         f"{'>= 0' if allow_zero else '> 0'}.")
    return arr.copy()


def _positive(value, name):
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0; got {value}.")
    return value


# ---------------------------------------------------------------------------
# likelihood
# ---------------------------------------------------------------------------


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
        return float(np.sum(special.log_expit(sign[:, 0] * B[:, 0])))
    terms = E - _logsumexp_rows(E)[:, None] + special.log_expit(sign * B)
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
        of S^{p-1} ([Xie] main paper, MABN Type I).
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
    return _log_mabn_kernel(np.ascontiguousarray(U, dtype=np.float64), float(kappa),
                            np.ascontiguousarray(mu0, dtype=np.float64), float(log_c))


@njit
def _log_mabn_kernel(U, kappa, mu0, log_c):
    """K log C_p(kappa) + kappa sum_i m_i^T u_i with the means of
    :func:`mabn_type1_means` (m_1 = mu0, m_i = -s_i / ||s_i||, mu0 where
    s_i = 0), in one O(K p) pass with no temporaries but s.

    The Metropolis-Hastings sampler evaluates the prior of a set after every
    proposal; in NumPy that cost about 110 us of fixed overhead per call,
    which was half of a fit's time on 2,000 rows. Equal to the NumPy form
    up to rounding (tests/test_experts_mcmc.py).
    """
    K, p = U.shape
    s = np.zeros(p)
    dot = 0.0
    for j in range(p):
        dot += mu0[j] * U[0, j]
    for i in range(1, K):
        nrm2 = 0.0
        for j in range(p):
            s[j] += U[i - 1, j]
            nrm2 += s[j] * s[j]
        acc = 0.0
        if nrm2 == 0.0:
            for j in range(p):
                acc += mu0[j] * U[i, j]
        else:
            for j in range(p):
                acc -= s[j] * U[i, j]
            acc /= math.sqrt(nrm2)
        dot += acc
    return K * log_c + kappa * dot


@njit
def _log_gamma_terms(g, alpha1, alpha2):
    """sum_k (alpha1 - 1) log g_k - alpha2 g_k (g > 0), the g-dependent part
    of :func:`log_gamma_prior`."""
    tot = 0.0
    for k in range(g.shape[0]):
        tot += (alpha1 - 1.0) * math.log(g[k]) - alpha2 * g[k]
    return tot


@njit
def _log_gaussian_kernel(A, sigma):
    """:func:`log_gaussian_prior` without the checks (A C-ordered (K, p))."""
    K, p = A.shape
    ss = 0.0
    for k in range(K):
        for j in range(p):
            ss += A[k, j] * A[k, j]
    return -0.5 * ss / sigma ** 2 - 0.5 * (K * p) * (_LOG_2PI + 2.0 * math.log(sigma))


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
# numba kernels: the log-likelihood after a one-column change, in O(n)
# ---------------------------------------------------------------------------
#
# Layout: the projections are stored transposed, Bt[k, n] = beta_k^T x_n and
# Et[k, n] = eta_k^T x_n (C order, so that a column k of the model is a
# contiguous row of the array). Per row n the caches hold [D]
#
#   M[n]    a shift of the gate logits of row n,
#   W[j, n] = exp(Et[j, n] - M[n]),
#   S[j, n] = sigmoid((2 y_n - 1) Bt[j, n]),
#
# and l_n = log(sum_j W S / sum_j W) (the softmax is invariant to the shift).
# M starts at the row maximum and moves only when needed: the invariant is
# max_j Et[j, n] - M[n] <= _SHIFT and sum_j W[j, n] >= exp(-_SHIFT), so that
# every W <= e^_SHIFT, every sum is in [e^-_SHIFT, K e^_SHIFT] (_SHIFT = 50)
# and nothing overflows; a row that would leave that range when a gate move
# is accepted gets M reset to its maximum and its caches recomputed (O(K)).
# Every W and S entry is a fresh evaluation exp(Et - M), sigmoid(sgn Bt) (an
# accepted column is rewritten, a reset row recomputed), never a rescaled or
# updated one, so no rounding error accumulates along the chain.
#
# During the pass over the K columns of one set (experts or gates), the
# column k being proposed is left out of two sums of positive terms: the
# prefix L[n] = sum_{j<k} (grown by one term after each column) and the
# suffix R[k, n] = sum_{j>k} (computed at the start of the pass; columns
# j > k do not change before their turn). The sum with a new column is then
# L + R[k] + new term: positive additions only, no subtract-and-add, hence no
# cancellation; relative error O(K eps).
#
# Underflow: a term below the smallest normal double (~2.2e-308) may be lost
# or imprecise. Where a row's new sum num = sum_j W S is >= _TINY these
# losses are < K 2.2e-308 / _TINY relative and thus invisible; a row with
# num < _TINY (its log-likelihood is below log(_TINY) + _SHIFT ~ -525 nats,
# e.g. a huge |beta^T x| of the wrong sign at every expert) is recomputed
# exactly in log space by :func:`_row_loglik_exact`.
#
# Sum over rows: sum_n log(r_n), r_n = num_n / den_n in (0, 1], is taken as
# the log of running products of the r_n (flushed into the sum before they
# could underflow, and r_n < _RATIO_MIN are logged directly), i.e. about one
# logarithm per few hundred rows instead of one per row. The relative
# rounding error is that of summing the logs, O(eps) per row. Rows run in
# fixed blocks of _CHUNK rows whose partial sums are added in order: the
# result is deterministic (and would not depend on a thread count).

_CHUNK = 2048
_TINY = 1e-250
_SHIFT = 50.0
_DEN_MIN = math.exp(-_SHIFT)
_RATIO_MIN = 1e-20   # smaller ratios are logged one by one
_PROD_MIN = 1e-280   # a running product below this is flushed (>= 1e-300 after)


# Every kernel below is checked against the NumPy reference
# ``_ReferenceLikelihood`` of tests/_reference/experts.py, patched over
# ``_FastLikelihood`` (plain log-likelihood through
# :func:`log_likelihood_from_projections`) in tests/test_experts_mcmc.py:
# ``test_fast_loglik_trace_matches_reference`` (same chain),
# ``test_fast_loglik_extreme_projections`` and
# ``test_fast_likelihood_kernels_against_reference_every_column``.


@njit
def _sigmoid(t):
    """sigmoid(t), bitwise equal to ``skbinvi._math.sigmoid`` but branch-free
    (a select instead of a jump, faster on rows of mixed signs)."""
    z = math.exp(-abs(t))
    return (1.0 if t >= 0.0 else z) / (1.0 + z)


@njit
def _n_chunks(n):
    return (n + _CHUNK - 1) // _CHUNK


@njit
def _row_loglik_exact(Bt, Et, sgn, i, s, k, value):
    """log p(y_i | x_i), nats, in log space; column k of set s set to ``value``.

    logsumexp_j (Et[j, i] - m + log sigmoid(sgn_i Bt[j, i])) - log sum_j
    exp(Et[j, i] - m), m = max_j Et[j, i]: the reference formula of
    :func:`log_likelihood_from_projections` for one row, O(K) exp/log.
    """
    K = Bt.shape[0]
    m = -np.inf
    for j in range(K):
        e = value if (s == 1 and j == k) else Et[j, i]
        m = max(m, e)
    den = 0.0
    tmax = -np.inf
    for j in range(K):
        e = value if (s == 1 and j == k) else Et[j, i]
        b = value if (s == 0 and j == k) else Bt[j, i]
        den += math.exp(e - m)
        tmax = max(tmax, e - m + log_sigmoid(sgn[i] * b))
    acc = 0.0
    for j in range(K):
        e = value if (s == 1 and j == k) else Et[j, i]
        b = value if (s == 0 and j == k) else Bt[j, i]
        acc += math.exp(e - m + log_sigmoid(sgn[i] * b) - tmax)
    return tmax + math.log(acc) - math.log(den)


@njit
def _add_log(tot, prod, r):
    """Accumulate log(r), r in (0, 1], as tot + log(prod) (see the notes above)."""
    if r < _RATIO_MIN:
        return tot + math.log(r), prod
    prod *= r
    if prod < _PROD_MIN:
        return tot + math.log(prod), 1.0
    return tot, prod


@njit
def _reset_row(i, k, Et, S, W, M, Lnum, Lden, Rnum, Rden):
    """M[i] = max_j Et[j, i]; fresh W[:, i]; L[i] (j < k) and R[j >= k, i]. O(K).

    Same summation order as :func:`_start_pass` and :func:`_next_column`.
    """
    K = Et.shape[0]
    m = Et[0, i]
    for j in range(1, K):
        m = max(m, Et[j, i])
    M[i] = m
    for j in range(K):
        W[j, i] = math.exp(Et[j, i] - m)
    ln = 0.0
    ld = 0.0
    for j in range(k):
        ln += W[j, i] * S[j, i]
        ld += W[j, i]
    Lnum[i] = ln
    Lden[i] = ld
    Rnum[K - 1, i] = 0.0
    Rden[K - 1, i] = 0.0
    for j in range(K - 2, k - 1, -1):
        Rnum[j, i] = Rnum[j + 1, i] + W[j + 1, i] * S[j + 1, i]
        Rden[j, i] = Rden[j + 1, i] + W[j + 1, i]


@njit
def _init_caches(Bt, Et, sgn, S, W, M):
    """Fill S = sigmoid(sgn Bt), M = row maxima of Et, W = exp(Et - M). O(n K)."""
    K, n = Bt.shape
    for i in range(n):
        M[i] = Et[0, i]
    for j in range(1, K):
        for i in range(n):
            M[i] = max(M[i], Et[j, i])
    for j in range(K):
        for i in range(n):
            W[j, i] = math.exp(Et[j, i] - M[i])
            S[j, i] = _sigmoid(sgn[i] * Bt[j, i])


@njit
def _start_pass(W, S, Rnum, Rden, Lnum, Lden, den):
    """Suffix sums R[j] = sum_{j' > j} of W S and W; L = 0; den = sum_j W.

    Called before the pass over the columns of one set. O(n K) additions.
    """
    K, n = W.shape
    for i in range(n):
        Rnum[K - 1, i] = 0.0
        Rden[K - 1, i] = 0.0
        Lnum[i] = 0.0
        Lden[i] = 0.0
    for j in range(K - 2, -1, -1):
        for i in range(n):
            Rnum[j, i] = Rnum[j + 1, i] + W[j + 1, i] * S[j + 1, i]
            Rden[j, i] = Rden[j + 1, i] + W[j + 1, i]
    for i in range(n):
        den[i] = Rden[0, i] + W[0, i]


@njit
def _next_column(W, S, k, Lnum, Lden):
    """Grow the prefix sums by column k (after its moves): L += W[k] S[k], W[k]."""
    for i in range(W.shape[1]):
        Lnum[i] += W[k, i] * S[k, i]
        Lden[i] += W[k, i]


@njit
def _expert_proposal_loglik(col, k, sgn, W, S, Lnum, Rnum, den, Bt, Et, s_new):
    """Total log-likelihood, nats, with Bt[k] replaced by ``col``. O(n).

    Per row one sigmoid s' (written to ``s_new`` for the accept step) and
    r_n = (L + R[k] + W[k] s') / den (den = sum_j W, fixed during the pass).
    """
    n = col.shape[0]
    total = 0.0
    for c in range(_n_chunks(n)):
        tot, prod = 0.0, 1.0
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            sv = _sigmoid(sgn[i] * col[i])
            s_new[i] = sv
            num = (Lnum[i] + Rnum[k, i]) + W[k, i] * sv
            if num >= _TINY:
                tot, prod = _add_log(tot, prod, num / den[i])
            else:
                tot += _row_loglik_exact(Bt, Et, sgn, i, 0, k, col[i])
        total += tot + math.log(prod)
    return total


@njit
def _gate_proposal_loglik(col, k, sgn, W, S, M, Lnum, Lden, Rnum, Rden, Bt, Et,
                          w_new):
    """Total log-likelihood, nats, with Et[k] replaced by ``col``. O(n).

    Per row w' = exp(e' - M) (written to ``w_new`` for the accept step) and
    r_n = (L + R[k] + w' S[k]) / (L + R[k] + w') of the num and den sums.
    Where e' - M > _SHIFT the row is evaluated with the shift e' instead
    (the other terms times exp(M - e'), w' = 1), so nothing overflows.
    """
    n = col.shape[0]
    total = 0.0
    for c in range(_n_chunks(n)):
        tot, prod = 0.0, 1.0
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            e = col[i]
            d = e - M[i]
            if d > _SHIFT:
                scale = math.exp(-d)
                wk = 1.0
            else:
                scale = 1.0
                wk = math.exp(d)
            w_new[i] = wk
            num = (Lnum[i] + Rnum[k, i]) * scale + wk * S[k, i]
            den = (Lden[i] + Rden[k, i]) * scale + wk
            if num >= _TINY:
                tot, prod = _add_log(tot, prod, num / den)
            else:
                tot += _row_loglik_exact(Bt, Et, sgn, i, 1, k, e)
        total += tot + math.log(prod)
    return total


@njit
def _gate_accept(col, k, W, S, M, Et, Lnum, Lden, Rnum, Rden, w_new):
    """Write the accepted gate column k into Et and update the caches.

    W[k] = w' from :func:`_gate_proposal_loglik`; a row whose new values
    break the shift invariant (e' - M > _SHIFT, or sum_j W < exp(-_SHIFT))
    is reset by :func:`_reset_row`. O(n), plus O(K) per (rare) reset row.
    """
    n = Et.shape[1]
    for i in range(n):
        e = col[i]
        Et[k, i] = e
        if e - M[i] > _SHIFT or (Lden[i] + Rden[k, i]) + w_new[i] < _DEN_MIN:
            _reset_row(i, k, Et, S, W, M, Lnum, Lden, Rnum, Rden)
        else:
            W[k, i] = w_new[i]


class _FastLikelihood:
    """Running log-likelihood with O(n) proposals (the numba kernels above).

    Owns the transposed projections ``Bt``, ``Et`` (K, n) and the caches
    (2 + 4 arrays of shape (K, n) and a few of shape (n,), float64: about
    6 K n 8 bytes, 47 MB for Adult with K = 30). Protocol, per set s of a
    sweep: :meth:`start_pass`, then for k = 0..K-1 any number of
    :meth:`propose` / :meth:`accept` on column k followed by
    :meth:`next_column`.
    """

    def __init__(self, Bt, Et, y):
        self.Bt, self.Et = Bt, Et
        K, n = Bt.shape
        self.sgn = 2.0 * y - 1.0
        self.S, self.W = np.empty((K, n)), np.empty((K, n))
        self.Rnum, self.Rden = np.empty((K, n)), np.empty((K, n))
        self.M, self.den = np.empty(n), np.empty(n)
        self.Lnum, self.Lden = np.zeros(n), np.zeros(n)
        self.scratch = np.empty(n)
        _init_caches(Bt, Et, self.sgn, self.S, self.W, self.M)

    def start_pass(self, s):
        _start_pass(self.W, self.S, self.Rnum, self.Rden, self.Lnum, self.Lden,
                    self.den)

    def propose(self, s, k, col):
        """Total log-likelihood with ``col`` as column k of set s (0: experts)."""
        if s == 0:
            return _expert_proposal_loglik(col, k, self.sgn, self.W, self.S,
                                           self.Lnum, self.Rnum, self.den,
                                           self.Bt, self.Et, self.scratch)
        return _gate_proposal_loglik(col, k, self.sgn, self.W, self.S, self.M,
                                     self.Lnum, self.Lden, self.Rnum, self.Rden,
                                     self.Bt, self.Et, self.scratch)

    def accept(self, s, k, col):
        """Make ``col`` column k of set s; must follow ``propose(s, k, col)``
        (except for the gate of K = 1, whose proposals are not evaluated)."""
        if s == 0:
            self.Bt[k] = col
            self.S[k] = self.scratch
        elif self.Et.shape[0] == 1:  # a single gate is 1 (never proposed)
            self.Et[0] = col
            self.M[:] = col
            self.W[0] = 1.0
        else:
            _gate_accept(col, k, self.W, self.S, self.M, self.Et, self.Lnum,
                         self.Lden, self.Rnum, self.Rden, self.scratch)

    def next_column(self, s, k):
        _next_column(self.W, self.S, k, self.Lnum, self.Lden)


# ---------------------------------------------------------------------------
# the sampler
# ---------------------------------------------------------------------------


def _projections(X, A):
    """A X^T as a C-ordered float64 array of shape (K, n): row k = X a_k."""
    n, K = X.shape[0], A.shape[0]
    return np.ascontiguousarray(np.asarray(X @ A.T, dtype=np.float64).reshape(n, K).T)


class _DirectionProposer:
    """Draws u' ~ vMF(u, kappa_hat) from batches of vMF(e_p, kappa_hat) draws.

    Batches come from Wood's rejection sampler [Wood] around e_p
    (:func:`~skbinvi.experts._vmf._sample_vmf_wood`, O(p) per draw: around
    e_p it needs no rotation), and each draw x is mapped by
    the Householder reflection H with H e_p = u (h = e_p - u,
    H = I - 2 h h^T / h^T h). H is orthogonal and vMF(x | mu, k) depends on
    x only through mu^T x, so H x ~ vMF(H e_p, k) = vMF(u, k) [D]. Batching
    avoids the fixed cost of a call per proposal. A batch holds at most
    ``limit`` draws, the proposals the run can still ask for: with one
    proposer per vector and a block of 25 sweeps, batches of 2,048 threw away
    99% of their draws, and ``scipy.stats.vonmises_fisher``, used before,
    rotates every batch with a p x p matrix from a QR factorization (at
    p = 785, 580 ms per batch of 2,048 against 60 ms for these draws).
    """

    def __init__(self, p, kappa_hat, rng, limit=_PROPOSAL_BATCH):
        self.p = p
        self.kappa_hat = kappa_hat
        self.rng = rng
        self.left = int(limit)  # proposals the run can still ask for
        self.e = np.zeros(p)
        self.e[-1] = 1.0
        self.buffer = np.empty((0, p))
        self.pos = 0

    def __call__(self, u):
        if self.pos >= self.buffer.shape[0]:
            size = max(1, min(_PROPOSAL_BATCH, self.left))
            self.left -= size
            self.buffer = (_sample_vmf_wood(self.e, self.kappa_hat, size, self.rng)
                           if self.kappa_hat > 0.0 else sample_vmf(self.e, 0.0, size,
                                                                  self.rng))
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
    """Output of :func:`run_metropolis_hastings` and :func:`run_monte_carlo_em`.

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
    vector_acceptance_rates : ndarray of shape (2, K, n_moves) or None
        The same per vector (row 0 experts, row 1 gates); moves (direction,
        magnitude) for MABN, (gaussian,) for the Gaussian prior. Used to
        adapt per-vector proposal scales during burn-in.
    log_posterior : ndarray of shape (n_sweeps,)
        Unnormalized log posterior (log-likelihood + log priors, nats) after
        every sweep, n_sweeps = burn_in + n_samples * thin.
    log_likelihood : ndarray of shape (n_sweeps,)
        The log-likelihood part of ``log_posterior``.
    prior : str
        "mabn" or "gaussian".
    mu0 : ndarray of shape (p,) or None
        Root mean direction the kept samples were drawn with (MABN; the
        learned one for :func:`run_monte_carlo_em`); None for "gaussian".
    alpha1, alpha2 : float or None
        Gamma shape and rate the kept samples were drawn with (MABN).
    mu0_history : ndarray of shape (n_em_iter + 1, p) or None
        :func:`run_monte_carlo_em` only: mu0 before the first and after every
        M-step (row 0 is the initial value).
    alpha1_history, alpha2_history : ndarray of shape (n_em_iter + 1,) or None
        The same for alpha1 and alpha2.
    """

    beta_samples: np.ndarray
    eta_samples: np.ndarray
    acceptance_rates: dict = field(default_factory=dict)
    vector_acceptance_rates: np.ndarray = None
    log_posterior: np.ndarray = None
    log_likelihood: np.ndarray = None
    prior: str = "mabn"
    mu0: np.ndarray = None
    alpha1: float = None
    alpha2: float = None
    mu0_history: np.ndarray = None
    alpha1_history: np.ndarray = None
    alpha2_history: np.ndarray = None


def run_metropolis_hastings(X, y, n_components, *, prior="mabn", kappa=1.0,
                            mu0=None, alpha1=1.0, alpha2=1.0, sigma=1.0,
                            n_samples=1000, burn_in=1000, thin=1,
                            direction_concentration=50.0, magnitude_scale=0.1,
                            gaussian_scale=0.1, random_state=None, init=None):
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
    direction_concentration : float or array_like of shape (2, K), default=50.0
        kappa_hat of the vMF random-walk proposal of the directions (>= 0);
        an array gives one value per vector (row 0 experts, row 1 gates).
    magnitude_scale : float or array_like of shape (2, K), default=0.1
        sigma_g of the truncated normal proposal of the magnitudes (> 0),
        shared or per vector.
    gaussian_scale : float or array_like of shape (2, K), default=0.1
        Step of the Gaussian random walk (prior="gaussian"), > 0, shared or
        per vector.
    random_state : int, RandomState instance or None
        Seed (scikit-learn convention; ``sklearn.utils.check_random_state``).
    init : dict, optional
        {"beta": (K, p), "eta": (K, p)} Cartesian starting vectors (non-zero
        rows for MABN). Default: a draw from the prior.
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

    Cost per proposal: O(n) exp/log plus O(n) additions in numba kernels
    (the likelihood caches of the module docstring), plus X @ u' (O(nnz X))
    for a direction/Gaussian move, plus O(K p) for the prior of the set;
    O(n K) additions per set and sweep, O(K) more per row whose gate maximum
    moves when a gate move is accepted. Memory: about 6 K n float64 caches.
    [Xie] supplement section 3 also learns mu0, alpha1, alpha2 by EM with
    this sampler in the E-step: ``run_monte_carlo_em`` of
    tests/_reference/experts.py.

    Raises
    ------
    ValueError
        For an unknown prior, inconsistent shapes, labels outside {0, 1},
        K < 1, p < 2 (MABN), a non-positive or non-finite scale, kappa < 0,
        n_samples < 0, burn_in < 0, thin < 1, or zero init rows (MABN).
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
        kappa_hat = _per_vector(direction_concentration, "direction_concentration", K,
                                allow_zero=True)
        s_g = _per_vector(magnitude_scale, "magnitude_scale", K)
        alpha1 = _positive(alpha1, "alpha1")
        alpha2 = _positive(alpha2, "alpha2")
        mu0 = _unit_mu0(mu0, p)
        log_c = float(log_normalizer(p, kappa))
    else:
        sigma = _positive(sigma, "sigma")
        step = _per_vector(gaussian_scale, "gaussian_scale", K)

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
        # cached direction projections, transposed: P[s][k, n] = u_k^T x_n
        P = [_projections(X, u) for u in U]
        proj = [P[s] * G[s][:, None] for s in range(2)]  # a_k^T x_n, (K, n)

        gamma_const = alpha1 * np.log(alpha2) - special.gammaln(alpha1)

        def log_prior_set(s):
            return (_log_mabn_kernel(U[s], kappa, mu0, log_c) + K * gamma_const
                    + _log_gamma_terms(G[s], alpha1, alpha2))

        if np.all(kappa_hat == kappa_hat[0, 0]):  # one shared proposer
            shared = _DirectionProposer(p, float(kappa_hat[0, 0]), rng,
                                        2 * K * n_sweeps)
            proposers = [[shared] * K, [shared] * K]
        else:
            proposers = [[_DirectionProposer(p, float(kappa_hat[s, k]), rng, n_sweeps)
                          for k in range(K)] for s in range(2)]
        counts = {f"{who}_{kind}": [0, 0] for who in ("expert", "gate")
                  for kind in ("direction", "magnitude")}
    else:
        A = vecs
        proj = [_projections(X, a) for a in A]

        def log_prior_set(s):
            return _log_gaussian_kernel(A[s], sigma)

        counts = {f"{who}_gaussian": [0, 0] for who in ("expert", "gate")}
    n_moves = 2 if prior == "mabn" else 1
    vec_counts = np.zeros((2, K, n_moves, 2))  # (accepted, proposed)

    loglik = log_likelihood_from_projections(proj[0].T, proj[1].T, y)
    logprior = [log_prior_set(0), log_prior_set(1)]
    names = ("expert", "gate")

    if n == 0:
        lik = None
    else:
        lik = _FastLikelihood(proj[0], proj[1], y)

    def loglik_with(s, k, column):
        if lik is None:
            return 0.0
        if K == 1 and s == 1:  # the gate of a single expert is 1
            return loglik
        return lik.propose(s, k, column)

    def set_column(s, k, column):
        """The accepted column: the projections (owned by ``lik``) and caches."""
        if lik is not None:
            lik.accept(s, k, column)

    def accept(log_alpha, kind, s, k, move):
        """Metropolis-Hastings accept/reject; counts proposals and acceptances."""
        counts[kind][1] += 1
        vec_counts[s, k, move, 1] += 1
        if np.log(rng.uniform()) < log_alpha:
            counts[kind][0] += 1
            vec_counts[s, k, move, 0] += 1
            return True
        return False

    beta_out = np.empty((n_samples, K, p))
    eta_out = np.empty((n_samples, K, p))
    trace = np.empty(n_sweeps)
    trace_ll = np.empty(n_sweeps)
    kept = 0

    for sweep in range(n_sweeps):
        for s in range(2):
            if lik is not None:
                lik.start_pass(s)
            for k in range(K):
                if prior == "mabn":
                    # -- direction move (symmetric vMF proposal: no correction)
                    u_old = U[s][k].copy()
                    u_new = proposers[s][k](u_old)
                    p_col = np.asarray(X @ u_new, dtype=np.float64).ravel()
                    U[s][k] = u_new
                    lp_new = log_prior_set(s)
                    col = G[s][k] * p_col
                    ll_new = loglik_with(s, k, col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    if accept(log_alpha, f"{names[s]}_direction", s, k, 0):
                        loglik, logprior[s] = ll_new, lp_new
                        P[s][k] = p_col
                        set_column(s, k, col)
                    else:
                        U[s][k] = u_old
                    # -- magnitude move (positive-truncated normal proposal)
                    g_old = G[s][k]
                    g_new = -1.0
                    while g_new <= 0.0:
                        g_new = g_old + s_g[s, k] * rng.normal()
                    G[s][k] = g_new
                    lp_new = log_prior_set(s)
                    col = g_new * P[s][k]
                    ll_new = loglik_with(s, k, col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    log_alpha += truncated_normal_log_hastings_ratio(g_old, g_new,
                                                                     s_g[s, k])
                    if accept(log_alpha, f"{names[s]}_magnitude", s, k, 1):
                        loglik, logprior[s] = ll_new, lp_new
                        set_column(s, k, col)
                    else:
                        G[s][k] = g_old
                else:
                    a_old = A[s][k].copy()
                    a_new = a_old + step[s, k] * rng.normal(size=p)
                    A[s][k] = a_new
                    lp_new = log_prior_set(s)
                    col = np.asarray(X @ a_new, dtype=np.float64).ravel()
                    ll_new = loglik_with(s, k, col)
                    log_alpha = ll_new + lp_new - loglik - logprior[s]
                    if accept(log_alpha, f"{names[s]}_gaussian", s, k, 0):
                        loglik, logprior[s] = ll_new, lp_new
                        set_column(s, k, col)
                    else:
                        A[s][k] = a_old
                if lik is not None:
                    lik.next_column(s, k)
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
    with np.errstate(invalid="ignore", divide="ignore"):
        vec_rates = vec_counts[..., 0] / vec_counts[..., 1]
    hyper = (dict(mu0=mu0.copy(), alpha1=alpha1, alpha2=alpha2)
             if prior == "mabn" else {})
    return MCMCResult(beta_samples=beta_out, eta_samples=eta_out,
                      acceptance_rates=rates, vector_acceptance_rates=vec_rates,
                      log_posterior=trace,
                      log_likelihood=trace_ll, prior=prior, **hyper)


# ---------------------------------------------------------------------------
# Monte Carlo EM for the hyper-parameters mu0, alpha1, alpha2
# ---------------------------------------------------------------------------


def _log_minus_digamma(a):
    """log(a) - digamma(a) (> 0, decreasing), accurate also for large a.

    For a > 1e4 the asymptotic series 1/(2a) + 1/(12 a^2) - 1/(120 a^4) +
    1/(252 a^6) ([AS] 6.3.18; next term O(a^-8), below 1e-32 relative),
    which avoids the cancellation of log(a) - digamma(a) ~ 1/(2a).
    """
    if a > 1e4:
        a2 = a * a
        return 1.0 / (2.0 * a) + 1.0 / (12.0 * a2) - 1.0 / (120.0 * a2 * a2) \
            + 1.0 / (252.0 * a2 * a2 * a2)
    return float(np.log(a) - special.digamma(a))


def gamma_mle(g):
    """Maximum-likelihood Gamma(shape, rate) of positive values.

    Parameters
    ----------
    g : array_like of shape (m,)
        Positive finite values (magnitudes), not all equal.

    Returns
    -------
    shape : float
        a solving log(a) - digamma(a) = log(mean g) - mean(log g).
    rate : float
        a / mean(g).

    Raises
    ------
    ValueError
        If a value is not finite and > 0, or if all values are equal (the
        likelihood then grows without bound as the shape goes to infinity).

    Notes
    -----
    The score equations of sum_i log Gamma(g_i | a, b) are b = a / mean(g)
    and log(a) - digamma(a) = s := log(mean g) - mean(log g) >= 0 ([Minka]).
    log(a) - digamma(a) decreases from +inf to 0 and lies between 1/(2a) and
    1/a, so the root is in [1/(2 s), 1/s]; it is found by Brent's method
    (``scipy.optimize.brentq``) on a slightly wider, checked bracket.
    """
    g = np.asarray(g, dtype=np.float64).ravel()
    if g.size == 0 or not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise ValueError("gamma_mle needs finite values > 0.")
    mean = float(np.mean(g))
    s = float(np.log(mean) - np.mean(np.log(g)))
    if not s > 0.0:
        raise ValueError("all values are equal: the Gamma MLE does not exist.")

    def score(a):
        return _log_minus_digamma(a) - s

    lo, hi = 0.45 / s, 1.05 / s
    while score(lo) < 0.0:  # never with the bound above; guards rounding
        lo *= 0.5
    while score(hi) > 0.0:
        hi *= 2.0
    shape = float(optimize.brentq(score, lo, hi, xtol=1e-300, rtol=1e-14,
                                  maxiter=200))
    return shape, shape / mean


def fit_mabn_hyperparameters(beta_samples, eta_samples):
    """M-step: the mu0, alpha1, alpha2 that maximize the mean log prior of samples.

    Parameters
    ----------
    beta_samples : array_like of shape (S, K, p) or (K, p)
        Expert vectors (Cartesian, non-zero rows) of S samples.
    eta_samples : array_like of the same shape
        Gate vectors of the same samples.

    Returns
    -------
    mu0 : ndarray of shape (p,)
        Unit vector: the normalized sum of the root directions u_1 of both
        sets over all samples (the vMF maximum-likelihood mean direction
        [MJ, section 10.3]).
    alpha1 : float
        Gamma shape, :func:`gamma_mle` of the 2 S K magnitudes ||a_k||.
    alpha2 : float
        Gamma rate (per unit magnitude).

    Raises
    ------
    ValueError
        For mismatched shapes, p < 2, a zero or non-finite vector, magnitudes
        that are all equal, or root directions that sum to zero.

    Notes
    -----
    [D] The log prior of one sample of the Type I MABN x Gamma prior is,
    over both sets, sum_k log Gamma(g_k | alpha1, alpha2) + 2 K log C_p(kappa)
    + kappa (mu0^T (u_1^beta + u_1^eta) + sum_{i>=2} m_i^T u_i), where only
    the root factors depend on mu0 (the m_i depend on the other directions
    only; mu0 also replaces m_i where s_i = 0 exactly, a measure-zero event
    ignored here). Its mean over the samples is maximized by the Gamma MLE
    of the pooled magnitudes and, for kappa > 0, by the mu0 above (for
    kappa = 0 every mu0 is a maximizer). kappa itself is not learned (it is
    the diversity strength, tuned by cross-validation).
    """
    Bs = np.asarray(beta_samples, dtype=np.float64)
    Es = np.asarray(eta_samples, dtype=np.float64)
    if Bs.ndim == 2:
        Bs, Es = Bs[None], Es[None]
    if Bs.ndim != 3 or Bs.shape != Es.shape or Bs.shape[2] < 2 or Bs.size == 0:
        raise ValueError(f"beta_samples and eta_samples must have the same shape "
                         f"(S, K, p), p >= 2; got {Bs.shape} and {Es.shape}.")
    if not (np.all(np.isfinite(Bs)) and np.all(np.isfinite(Es))):
        raise ValueError("the samples must be finite.")
    g = np.concatenate([np.linalg.norm(Bs, axis=2).ravel(),
                        np.linalg.norm(Es, axis=2).ravel()])
    if np.any(g <= 0):
        raise ValueError("the MABN prior needs non-zero vectors.")
    alpha1, alpha2 = gamma_mle(g)
    roots = np.concatenate([Bs[:, 0], Es[:, 0]])
    r = np.sum(roots / np.linalg.norm(roots, axis=1)[:, None], axis=0)
    norm = float(np.linalg.norm(r))
    if not norm > 0.0:
        raise ValueError("the root directions sum to zero: mu0 is undefined.")
    return r / norm, alpha1, alpha2


# ---------------------------------------------------------------------------
# prediction
# ---------------------------------------------------------------------------


_PREDICT_BLOCK = 1 << 21  # projections per block of rows (16 MiB)


@njit(error_model="numpy")
def _mixture_mean(P, S, K, out):
    """out[i] = (1/S) sum_s sum_k softmax_k(e_s)_k sigmoid(b_sk), where row i
    of P holds (b_s1..b_sK, e_s1..e_sK) for s = 1..S. O(S K) per row."""
    for i in range(P.shape[0]):
        acc = 0.0
        for s in range(S):
            base = 2 * K * s
            m = P[i, base + K]
            for k in range(1, K):
                if P[i, base + K + k] > m:
                    m = P[i, base + K + k]
            den = 0.0
            num = 0.0
            for k in range(K):
                w = math.exp(P[i, base + K + k] - m)
                den += w
                num += w * sigmoid(P[i, base + k])
            acc += num / den
        out[i] = acc / S


@njit
def _softmax_mean(P, S, K, out):
    """out[i, k] = (1/S) sum_s softmax(e_s)_k, where row i of P holds
    (e_s1..e_sK) for s = 1..S. O(S K) per row."""
    for i in range(P.shape[0]):
        for k in range(K):
            out[i, k] = 0.0
        for s in range(S):
            base = K * s
            m = P[i, base]
            for k in range(1, K):
                m = max(m, P[i, base + k])
            den = 0.0
            for k in range(K):
                den += math.exp(P[i, base + k] - m)
            for k in range(K):
                out[i, k] += math.exp(P[i, base + k] - m) / den
        for k in range(K):
            out[i, k] /= S


def gate_proba_samples(X, eta_samples):
    """Gate probabilities softmax_k(eta_k^T x) averaged over samples.

    Parameters
    ----------
    X : {array_like, sparse matrix} of shape (n, p)
        Inputs, dense or CSR.
    eta_samples : array_like of shape (S, K, p) or (K, p)
        Gate vectors of S posterior samples (or one set).

    Returns
    -------
    gates : ndarray of shape (n, K)
        (1/S) sum_s softmax(eta^(s)T x); rows sum to one. O(S n K p) in one
        product per block of rows of at most 16 MiB of projections.

    Raises
    ------
    ValueError
        If X holds NaN or infinity, or eta_samples does not have shape
        (S, K, p) or (K, p) with p the number of columns of X.
    """
    X = _check_X(X)
    n, p = X.shape
    Es = np.asarray(eta_samples, dtype=np.float64)
    if Es.ndim == 2:
        Es = Es[None]
    if Es.ndim != 3 or Es.shape[2] != p or Es.shape[0] < 1:
        raise ValueError(f"eta_samples must have shape (S, K, {p}); got {Es.shape}.")
    S, K = Es.shape[:2]
    V = Es.reshape(S * K, p).T
    rows = max(1, _PREDICT_BLOCK // (S * K))
    out = np.empty((n, K))
    for start in range(0, n, rows):
        P = np.asarray(X[start:start + rows] @ V, dtype=np.float64)
        _softmax_mean(np.ascontiguousarray(P), S, K, out[start:start + rows])
    return out


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
        (user guide, "The model"). O(S n K p) in one product per block of
        rows; memory O(S K) per row of a block of at most 16 MiB.

    Raises
    ------
    ValueError
        If X holds NaN or infinity, or beta_samples and eta_samples do not
        have one shape (S, K, p) or (K, p) with p the number of columns of X.
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
    S, K = Bs.shape[:2]
    # every sample's expert and gate vectors side by side: one product per
    # block of rows instead of two per sample (the per-sample loop paid a
    # fixed NumPy cost 2 S times per call: 100,000 x 5 rows, S = 200,
    # K = 3 took 7 to 11 s)
    V = np.concatenate([Bs, Es], axis=1).reshape(S * 2 * K, p).T
    rows = max(1, _PREDICT_BLOCK // (2 * S * K))
    p1 = np.empty(n)
    for start in range(0, n, rows):
        P = np.asarray(X[start:start + rows] @ V, dtype=np.float64)
        _mixture_mean(np.ascontiguousarray(P), S, K, p1[start:start + rows])
    return np.column_stack([1.0 - p1, p1])


# ---------------------------------------------------------------------------
# burn-in adaptation of the proposals
# ---------------------------------------------------------------------------

#: sweeps per adaptation block of the burn-in (and per block of the estimator)
ADAPT_BLOCK = 25
#: acceptance rate the burn-in adaptation aims at
TARGET_ACCEPTANCE = 0.3


def _adapt_factor(rate):
    """Multiplicative step-size change from acceptance rates (> 1: bigger moves)."""
    rate = np.nan_to_num(np.asarray(rate, dtype=np.float64), nan=TARGET_ACCEPTANCE)
    return np.exp(2.0 * np.clip(rate - TARGET_ACCEPTANCE, -0.5, 0.5))


def adapt_proposals(direction_concentration, scale, vector_rates, prior="mabn"):
    """New per-vector proposal scales from the acceptance rates of the last block.

    Parameters
    ----------
    direction_concentration : ndarray of shape (2, K)
        kappa_hat of the vMF direction proposals (row 0 experts, row 1 gates).
    scale : ndarray of shape (2, K)
        Magnitude proposal scales (MABN) or Gaussian random-walk steps.
    vector_rates : ndarray of shape (2, K, n_moves)
        ``MCMCResult.vector_acceptance_rates`` of the block.
    prior : {"mabn", "gaussian"}

    Returns
    -------
    direction_concentration, scale : ndarray of shape (2, K)
        With delta = clip(rate - 0.3, -0.5, 0.5): kappa_hat exp(-4 delta)
        (kept in [1, 1e8]; direction moves) and scale exp(2 delta) (kept in
        [1e-6, 1e3]; magnitude or Gaussian moves): smaller moves when too few
        are accepted. One scale per vector, because an expert the gate does
        not use has an unconstrained direction whose proposals are almost
        always accepted (user guide, "Starting point and adaptation").
        Used during burn-in only, so the kept chain is time-homogeneous.
    """
    kappa_hat = np.asarray(direction_concentration, dtype=np.float64)
    if prior == "mabn":
        kappa_hat = np.clip(kappa_hat * _adapt_factor(vector_rates[..., 0]) ** -2,
                            1.0, 1e8)
    scale = np.clip(np.asarray(scale, dtype=np.float64)
                    * _adapt_factor(vector_rates[..., -1]), 1e-6, 1e3)
    return kappa_hat, scale


def log_joint(X, y, beta, eta, *, prior="mabn", kappa=1.0, mu0=None, alpha1=1.0,
              alpha2=1.0, sigma=1.0):
    """log p(y | X, beta, eta) + log p(beta) + log p(eta), nats (the chain's target).

    Parameters
    ----------
    X, y, beta, eta
        As in :func:`log_likelihood` (non-zero rows for the MABN prior).
    prior : {"mabn", "gaussian"}
        Type I MABN directions x Gamma(alpha1, alpha2) magnitudes, in the
        (magnitude, direction) coordinates the sampler uses, or N(0, sigma^2 I).
    kappa, mu0, alpha1, alpha2, sigma
        Prior parameters, as in :func:`run_metropolis_hastings`.

    Returns
    -------
    value : float
        The unnormalized log posterior that ``MCMCResult.log_posterior``
        traces, at one state.
    """
    value = log_likelihood(X, y, beta, eta)
    for A in (np.asarray(beta, dtype=np.float64), np.asarray(eta, dtype=np.float64)):
        if prior == "gaussian":
            value += log_gaussian_prior(A, sigma)
        else:
            g = np.linalg.norm(A, axis=1)
            value += (log_mabn_type1_prior(A / g[:, None], kappa, mu0)
                      + float(np.sum(log_gamma_prior(g, alpha1, alpha2))))
    return float(value)
