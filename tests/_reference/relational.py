"""Reference implementations for the tests of :mod:`skbinvi.relational`."""

import numpy as np
from scipy.special import log_ndtr
from scipy.stats import norm

from skbinvi.relational import _kernels
from skbinvi.relational._kernels import _hashed_samples


def sample_features(q, seed, n_draws):
    """The (S, N, D) samples of :func:`expected_pair_log_likelihood` (for tests)."""
    N, D = q.shape
    z = np.empty((n_draws, N, D), dtype=np.uint8)
    _hashed_samples(q, seed, z)
    return z.astype(np.float64)


def augmented_bound(snd, rcv, rel, x, q, b, W, diag, mu, rho):
    """The data-augmented lower bound on the ELBO (nats, summed over pairs).

    The objective of ``inference="cavi"`` (Ji and Sudderth's supplement,
    A.2; the module comment of ``skbinvi.relational._kernels``):
    ``sum_p T_p(mu_p) - sum_id KL(Bern(q_id) || Bern(rho))``, with ``mu`` (P,)
    the locations of q(y) and, for s = 2 x - 1, a = s mu, lam = phi(a) /
    Phi(a), m and V the mean and variance of eta under q,
    ``T(mu) = -log sqrt(2 pi) - (E[y^2] - 2 E[y] m + m^2 + V) / 2 + H[q(y)]``.
    Below the true ELBO (Jensen), which the tests check by enumeration.
    """
    P = snd.shape[0]
    mean, var = np.empty(P), np.empty(P)
    _kernels.pair_mean_and_variance(snd, rcv, rel, q, b, W, diag, mean, var)
    s = np.where(x > 0.5, 1.0, -1.0)
    a = s * mu
    lam = np.exp(norm.logpdf(a) - log_ndtr(a))
    mean_y = mu + s * lam
    second_y = 1.0 - a * lam - lam * lam + mean_y * mean_y
    entropy = 0.5 * np.log(2.0 * np.pi * np.e) + log_ndtr(a) - 0.5 * a * lam
    terms = (-0.5 * np.log(2.0 * np.pi)
             - 0.5 * (second_y - 2.0 * mean_y * mean + mean**2 + var) + entropy)
    return float(terms.sum() - _kernels.kl_features(q, rho))
