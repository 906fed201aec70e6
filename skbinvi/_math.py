"""Numerically stable functions shared by all models (Numba-jitted).

Scalar functions, and :func:`softplus_sigmoid`, an array kernel written so
that the compiler vectorizes it (SIMD). Every function here is tested against
its SciPy/NumPy counterpart in ``tests/test_math.py`` over extreme arguments.
"""

import math

import numpy as np

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


# Constants of softplus_sigmoid: Cody-Waite split of ln 2, log2(e), the
# coefficients P1-P5 of exp (all from fdlibm's e_exp.c),
# 1.5 * 2**52 (adding then subtracting it rounds a double to an integer),
# 2**52 + 1023 (the low bits of k + this double hold the exponent field of
# 2**k) and the bits of 2**52.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LOG2E = 1.44269504088896338700e00
_P1 = 1.66666666666666019037e-01
_P2 = -2.77777777770155933842e-03
_P3 = 6.61375632143793436117e-05
_P4 = -1.65339022054652515390e-06
_P5 = 4.13813679705723846039e-08
_ROUND = 6755399441055744.0
_EXPONENT_BIAS = 4503599627371519.0
_TWO52_BITS = 0x4330000000000000
#: Scratch columns of softplus_sigmoid (a block of this many entries at a time).
SOFTPLUS_BLOCK = 1024


@njit(error_model="numpy", fastmath={"contract"})
def _softplus_sigmoid_block(x, value, slope, work):
    """:func:`softplus_sigmoid` on at most ``work.shape[1]`` entries."""
    n = x.shape[0]
    poly = work[0]
    scale1 = work[1]
    scale2 = work[2]
    # exp(-|x|) = exp(r) 2**k with k = round(-|x| / ln 2), |r| <= ln(2) / 2,
    # and exp(r) by the rational approximation of fdlibm's e_exp.c (< 1 ulp)
    for t in range(n):
        a = max(-abs(x[t]), -746.0)  # exp(-746) rounds to 0
        k = (a * _LOG2E + _ROUND) - _ROUND
        hi = a - k * _LN2_HI
        lo = k * _LN2_LO
        r = hi - lo
        r2 = r * r
        c = r - r2 * (_P1 + r2 * (_P2 + r2 * (_P3 + r2 * (_P4 + r2 * _P5))))
        poly[t] = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
        # 2**k as 2**k1 * 2**(k - k1): both factors normal down to k = -1076,
        # so the product rounds once, to the right subnormal if need be
        k1 = (0.5 * k + _ROUND) - _ROUND
        scale1[t] = k1 + _EXPONENT_BIAS
        scale2[t] = (k - k1) + _EXPONENT_BIAS
    bits1 = scale1.view(np.int64)
    bits2 = scale2.view(np.int64)
    for t in range(n):
        bits1[t] = (bits1[t] - _TWO52_BITS) << 52
        bits2[t] = (bits2[t] - _TWO52_BITS) << 52
    # log1p(e) = 2 atanh(s) with s = e / (2 + e) in [0, 1/3]: odd series to
    # s**33 (truncation < 2e-18 relative)
    for t in range(n):
        e = poly[t] * scale1[t] * scale2[t]
        s = e / (2.0 + e)
        s2 = s * s
        c = 1.0 / 33.0
        c = 1.0 / 31.0 + s2 * c
        c = 1.0 / 29.0 + s2 * c
        c = 1.0 / 27.0 + s2 * c
        c = 1.0 / 25.0 + s2 * c
        c = 1.0 / 23.0 + s2 * c
        c = 1.0 / 21.0 + s2 * c
        c = 1.0 / 19.0 + s2 * c
        c = 1.0 / 17.0 + s2 * c
        c = 1.0 / 15.0 + s2 * c
        c = 1.0 / 13.0 + s2 * c
        c = 1.0 / 11.0 + s2 * c
        c = 1.0 / 9.0 + s2 * c
        c = 1.0 / 7.0 + s2 * c
        c = 1.0 / 5.0 + s2 * c
        c = 1.0 / 3.0 + s2 * c
        c = 1.0 + s2 * c
        xt = x[t]
        sp = max(xt, 0.0) + 2.0 * s * c
        sg = (1.0 if xt >= 0.0 else e) / (1.0 + e)
        # NaN stays NaN (the clamp above would have lost it)
        value[t] = sp if xt == xt else xt
        slope[t] = sg if xt == xt else xt


@njit(error_model="numpy")
def softplus_sigmoid(x, value, slope, work):
    """``value = softplus(x)`` and ``slope = sigmoid(x)`` elementwise, vectorized.

    Equivalent to ``np.logaddexp(0, x)`` and ``scipy.special.expit(x)``, to
    within 3 and 2 units in the last place (subnormal results to within the
    smallest subnormal); NaN stays NaN, softplus(inf) = inf. One exp(-|x|)
    serves both functions, computed as in fdlibm (Cody-Waite reduction by
    ln 2, then its rational approximation) and log1p(e) = 2 atanh(e / (2 + e)) as a
    polynomial, with no call to the C math library, so that the compiler
    turns the loops into SIMD instructions: about 3x faster than
    ``math.exp`` and ``math.log1p`` per element. This is the softplus
    parametrization of the noisy-OR weights and leak (theta = softplus(raw),
    d theta / d raw = sigmoid(raw)), refreshed after every Adam step.

    Parameters
    ----------
    x : float64 array of shape (n,)
    value, slope : float64 arrays of shape (n,)
        Outputs (may not alias ``x``).
    work : C-contiguous float64 array of shape (3, B)
        Scratch; the entries are processed B at a time (``SOFTPLUS_BLOCK``
        = 1024: 24 KiB of scratch, in the L1 or L2 cache).

    Checked against NumPy and SciPy over the whole double range in
    tests/test_math.py::test_softplus_sigmoid_matches_numpy.
    """
    n = x.shape[0]
    block = work.shape[1]
    for start in range(0, n, block):
        stop = min(start + block, n)
        _softplus_sigmoid_block(x[start:stop], value[start:stop],
                                slope[start:stop], work)


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
