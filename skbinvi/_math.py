"""Numerically stable scalar functions shared by all models (Numba-jitted).

Every function here is tested against its SciPy/NumPy counterpart in
``tests/test_math.py`` over extreme arguments.
"""

import math

from ._numba import njit


@njit
def log_sigmoid(x):
    """log(sigmoid(x)) without overflow. Equivalent to ``-np.logaddexp(0, -x)``."""
    if x >= 0.0:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


@njit
def sigmoid(x):
    """Logistic function. Equivalent to ``scipy.special.expit(x)``."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit
def softplus(x):
    """log(1 + exp(x)) without overflow. Equivalent to ``np.logaddexp(0, x)``."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit
def log1mexp(u):
    """log(1 - exp(-u)) for u > 0; -inf at u = 0.

    Equivalent to ``np.log(-np.expm1(-u))`` for u <= log 2 and
    ``np.log1p(-np.exp(-u))`` above, the accurate branches of Maechler (2012),
    "Accurately computing log(1 - exp(-|a|))". This is f(u) of the noisy-OR
    likelihood, log p(x_i = 1 | z) with u = theta_i0 + sum_k theta_ik z_k
    (METHODS.md section 2).
    """
    if u <= 0.0:
        return -math.inf
    if u < 0.6931471805599453:
        return math.log(-math.expm1(-u))
    return math.log1p(-math.exp(-u))


@njit
def dlog1mexp(u):
    """Derivative of log(1 - exp(-u)): 1 / expm1(u), for u > 0.

    Equivalent to ``1 / np.expm1(u)``; returns +inf at u = 0.
    """
    if u <= 0.0:
        return math.inf
    if u > 700.0:
        return math.exp(-u)
    return 1.0 / math.expm1(u)


@njit
def kl_bernoulli_logits(logit_q, logit_p):
    """KL(Bern(q) || Bern(p)) in nats from the logits of q and p.

    KL = q (l - c) + log sigmoid(-l) - log sigmoid(-c) with q = sigmoid(l).
    Equivalent to ``q*log(q/p) + (1-q)*log((1-q)/(1-p))``, but finite for
    saturated logits.
    """
    q = sigmoid(logit_q)
    return q * (logit_q - logit_p) + log_sigmoid(-logit_q) - log_sigmoid(-logit_p)
