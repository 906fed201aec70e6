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
    (user guide, noisy-OR model).
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


_LOG_SQRT_2PI = 0.9189385332046727  # log(sqrt(2 pi))
_SQRT1_2 = 0.7071067811865476  # 1 / sqrt(2)


@njit
def log_ndtr(t):
    """log Phi(t), the log of the standard normal CDF, accurate for every t.

    Equivalent to ``scipy.special.log_ndtr(t)``. For t > -20, Phi(t) =
    erfc(-t / sqrt 2) / 2 is computed by ``math.erfc`` (relative accuracy
    near machine precision down to ~1e-88); above t = 0 as log1p(-Phi(-t)).
    Below -20 the asymptotic series log Phi(t) = -t^2/2 - log(-t) -
    log sqrt(2 pi) + log(1 - 1/t^2 + 3/t^4 - 15/t^6 + ...) is used, with ten
    terms (truncation error below 1e-14 relative at t = -20). Used by the
    probit link of the latent feature relational model (user guide, latent
    feature relational model).
    """
    if t > 0.0:
        return math.log1p(-0.5 * math.erfc(t * _SQRT1_2))
    if t > -20.0:
        return math.log(0.5 * math.erfc(-t * _SQRT1_2))
    inv2 = 1.0 / (t * t)
    term = 1.0
    series = 1.0
    for k in range(1, 11):
        term *= -(2.0 * k - 1.0) * inv2
        series += term
    return -0.5 * t * t - math.log(-t) - _LOG_SQRT_2PI + math.log(series)


@njit
def log_normal_pdf(t):
    """log phi(t) of the standard normal density. Equivalent to ``scipy.stats.norm.logpdf``."""
    return -0.5 * t * t - _LOG_SQRT_2PI


@njit
def inverse_mills_ratio(t):
    """phi(t) / Phi(t), the inverse Mills ratio, without overflow or 0/0.

    The mean of a unit-variance normal with location m truncated to [0, inf)
    is ``m + inverse_mills_ratio(m)``, and truncated to (-inf, 0) it is
    ``m - inverse_mills_ratio(-m)`` (user guide, latent feature relational
    model, the "cavi" updates). Computed as exp(log phi(t) - log Phi(t)); tends to -t as
    t -> -inf and to 0 as t -> +inf.
    """
    return math.exp(log_normal_pdf(t) - log_ndtr(t))


# Bernoulli-number coefficients of the asymptotic series of the trigamma
# function, psi'(x) ~ 1/x + 1/(2 x^2) + sum_k B_2k / x^(2k+1) (Abramowitz &
# Stegun 6.4.12), k = 1..7
_TRIGAMMA_SERIES = (1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0,
                    -691.0 / 2730.0, 7.0 / 6.0)


@njit
def trigamma(x):
    """psi'(x) = d^2 log Gamma(x) / dx^2 for x > 0; NaN for x <= 0 or NaN.

    The recurrence psi'(x) = psi'(x + 1) + 1 / x^2 up to x >= 10, then the
    asymptotic series of Abramowitz & Stegun 6.4.12 to the x^-15 term
    (truncation error below 1e-17 relative there). Equivalent to
    ``scipy.special.polygamma(1, x)`` (which has no Cython export to call
    from jitted code).
    """
    if not x > 0.0:
        return math.nan
    acc = 0.0
    while x < 10.0:
        acc += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    series = 0.0
    for k in range(len(_TRIGAMMA_SERIES) - 1, -1, -1):
        series = series * inv2 + _TRIGAMMA_SERIES[k]
    return acc + inv + 0.5 * inv2 + series * inv2 * inv
