"""Numerically stable functions shared by all models (Numba-jitted).

Scalar functions, and array kernels written so that the compiler vectorizes
them (SIMD): :func:`softplus_sigmoid`, :func:`log1mexp_array`,
:func:`log_array` and :func:`exp_array` (exp and log as in fdlibm, with no
call to the C math library, which the compiler cannot vectorize). Every
function here is tested against its SciPy/NumPy counterpart in
``tests/test_math.py`` over extreme arguments. Each array function walks
its input a block of entries at a time itself, and calls only the two
helpers that several of them share (:func:`_exp_block`, :func:`_frexp_block`)
and the scalar :func:`_log_reduced`: these are ordinary jitted functions,
each compiled once with its own flags and inlined by LLVM into the
functions that call them (Numba's own ``inline="always"`` re-typed and
re-lowered them in every caller: slower to compile, and ``log_array`` ran
2.5 times slower that way). Every jitted function that a kernel calls is
compiled again, with its own callees, into that kernel's machine code, so
few and flat helpers keep the first compilation short; for the same
reason they clamp with conditional expressions rather than ``min`` and
``max``, whose implementations Numba compiles once per set of compiler
flags.
"""

import math
import types

import numpy as np
from llvmlite import ir
from numba import types as nbtypes
from numba.extending import intrinsic

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


@intrinsic
def _bits(typingctx, x):
    """The bits of a float64 as an int64 (NumPy's ``.view(np.int64)`` of one
    entry): an LLVM bitcast, which vectorizes, and compiles in no time where
    an array ``.view`` costs a tenth of a second in every kernel."""
    if x != nbtypes.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return nbtypes.int64(nbtypes.float64), codegen


@intrinsic
def _from_bits(typingctx, b):
    """The float64 of the bits of an int64 (the inverse of :func:`_bits`)."""
    if b != nbtypes.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return nbtypes.float64(nbtypes.int64), codegen


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


def _exp_rows(a, out, work):
    """``out = exp(a)`` for ``a <= 0``, vectorized, ``work.shape[1]`` entries at a time.

    fdlibm's e_exp.c without its branches: exp(a) = exp(r) 2**k with
    k = round(a / ln 2), |r| <= ln(2) / 2 (Cody-Waite reduction), exp(r) by
    its rational approximation (< 1 ulp), and 2**k as a product of two
    powers of two built from their bits, so that subnormal results round
    once. ``work`` is C-contiguous float64 scratch of shape (2, B). The
    Python function behind :func:`_exp_block` and :func:`exp_array`.
    """
    n = a.shape[0]
    block = work.shape[1]
    scale1 = work[0]
    scale2 = work[1]
    for start in range(0, n, block):
        stop = start + block if start + block < n else n
        # the block as views indexed from 0 (the loops then vectorize)
        a_b = a[start:stop]
        out_b = out[start:stop]
        for t in range(stop - start):
            x = -746.0 if a_b[t] < -746.0 else a_b[t]  # exp(-746) rounds to 0
            k = (x * _LOG2E + _ROUND) - _ROUND
            hi = x - k * _LN2_HI
            lo = k * _LN2_LO
            r = hi - lo
            r2 = r * r
            c = r - r2 * (_P1 + r2 * (_P2 + r2 * (_P3 + r2 * (_P4 + r2 * _P5))))
            out_b[t] = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
            # 2**k as 2**k1 * 2**(k - k1): both factors normal down to
            # k = -1076, so the product rounds once, to the right subnormal
            # if need be
            k1 = (0.5 * k + _ROUND) - _ROUND
            scale1[t] = k1 + _EXPONENT_BIAS
            scale2[t] = (k - k1) + _EXPONENT_BIAS
        for t in range(stop - start):
            scale1[t] = _from_bits((_bits(scale1[t]) - _TWO52_BITS) << 52)
            scale2[t] = _from_bits((_bits(scale2[t]) - _TWO52_BITS) << 52)
        for t in range(stop - start):
            out_b[t] = out_b[t] * scale1[t] * scale2[t]


#: :func:`_exp_rows` with FMA contraction, as :func:`softplus_sigmoid` and
#: :func:`log1mexp_array` have always computed their exponentials.
_exp_block = njit(error_model="numpy", fastmath={"contract"})(_exp_rows)


@njit(error_model="numpy", fastmath={"contract"})
def _log_reduced(f, j):
    """j ln 2 + log(1 + f) for -1/2 <= f <= 1, as in fdlibm's e_log.c.

    log(1 + f) = f - hfsq + s (hfsq + R) with s = f / (2 + f) (|s| <= 1/3),
    hfsq = f**2 / 2 and R = 2 atanh(s) / s - 2 by its series in z = s**2 to
    z**17 (truncation < 1e-17 relative); ln 2 split in two (exact j ln2_hi).
    """
    s = f / (2.0 + f)
    z = s * s
    R = 2.0 / 35.0
    R = 2.0 / 33.0 + z * R
    R = 2.0 / 31.0 + z * R
    R = 2.0 / 29.0 + z * R
    R = 2.0 / 27.0 + z * R
    R = 2.0 / 25.0 + z * R
    R = 2.0 / 23.0 + z * R
    R = 2.0 / 21.0 + z * R
    R = 2.0 / 19.0 + z * R
    R = 2.0 / 17.0 + z * R
    R = 2.0 / 15.0 + z * R
    R = 2.0 / 13.0 + z * R
    R = 2.0 / 11.0 + z * R
    R = 2.0 / 9.0 + z * R
    R = 2.0 / 7.0 + z * R
    R = 2.0 / 5.0 + z * R
    R = 2.0 / 3.0 + z * R
    R = z * R
    hfsq = 0.5 * f * f
    return j * _LN2_HI - ((hfsq - (s * (hfsq + R) + j * _LN2_LO)) - f)


@njit(error_model="numpy", fastmath={"contract"})
def softplus_sigmoid(x, value, slope, work):
    """``value = softplus(x)`` and ``slope = sigmoid(x)`` elementwise, vectorized.

    Equivalent to ``np.logaddexp(0, x)`` and ``scipy.special.expit(x)``, to
    within 3 and 2 units in the last place (subnormal results to within the
    smallest subnormal); NaN stays NaN, softplus(inf) = inf. One exp(-|x|)
    serves both functions, computed as in fdlibm (Cody-Waite reduction by
    ln 2, then its rational approximation) and log1p(e) as in fdlibm's
    e_log.c (a series in s = e / (2 + e)), with no call to the C math
    library, so that the compiler turns the loops into SIMD instructions:
    about 5x faster than ``math.exp`` and ``math.log1p`` per element. This
    is the softplus parametrization of the noisy-OR weights and leak
    (theta = softplus(raw), d theta / d raw = sigmoid(raw)), refreshed after
    every Adam step.

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
    e_all = work[0]
    for start in range(0, n, block):
        stop = start + block if start + block < n else n
        x_b = x[start:stop]
        value_b = value[start:stop]
        slope_b = slope[start:stop]
        for t in range(stop - start):
            value_b[t] = -abs(x_b[t])
        _exp_block(value_b, e_all, work[1:])  # exp(-|x|)
        # log1p(e), e in [0, 1]
        for t in range(stop - start):
            e = e_all[t]
            lp = _log_reduced(e, 0.0)
            xt = x_b[t]
            sp = (0.0 if xt < 0.0 else xt) + lp
            sg = (1.0 if xt >= 0.0 else e) / (1.0 + e)
            # NaN stays NaN (the clamp above would have lost it)
            value_b[t] = sp if xt == xt else xt
            slope_b[t] = sg if xt == xt else xt


_LN2 = 0.6931471805599453
_SQRT2 = 1.4142135623730951
_TWO54 = 18014398509481984.0
_SMALLEST_NORMAL = 2.2250738585072014e-308
_MANTISSA_MASK = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
#: Scratch rows of log1mexp_array (``work`` has shape (LOG1MEXP_WORK_ROWS, B)).
LOG1MEXP_WORK_ROWS = 6


@njit(error_model="numpy", fastmath={"contract"})
def _frexp_block(y, jf):
    """In place, y = m 2**j: ``y[t] = m`` in [sqrt(1/2), sqrt(2)), ``jf[t] = j``.

    For finite y > 0 (subnormal included: scaled by 2**54 first), from the
    bits; ``jf`` is float64 of the length of ``y``.
    """
    n = y.shape[0]
    for t in range(n):
        small = y[t] < _SMALLEST_NORMAL
        y[t] = y[t] * _TWO54 if small else y[t]
        jf[t] = -54.0 if small else 0.0
    for t in range(n):
        b = _bits(y[t])
        jf[t] += np.float64((b >> 52) - 1023)
        y[t] = _from_bits((b & _MANTISSA_MASK) | _ONE_BITS)
    for t in range(n):
        big = y[t] > _SQRT2
        y[t] = 0.5 * y[t] if big else y[t]
        jf[t] = jf[t] + 1.0 if big else jf[t]


@njit(error_model="numpy", fastmath={"contract"})
def log_array(y, out, work):
    """``out = log(y)`` elementwise, vectorized.

    Equivalent to ``np.log(y)`` to within 2 units in the last place
    (subnormal y included; log 0 = -inf, log inf = inf, NaN for y < 0 and
    NaN), with no call to the C math library: the exponent from the bits
    and the logarithm of the mantissa m in [sqrt(1/2), sqrt(2)) as in
    fdlibm's e_log.c, so that the compiler turns the loops into SIMD
    instructions.

    Parameters
    ----------
    y : float64 array of shape (n,)
    out : float64 array of shape (n,)
        Output (may not alias ``y``).
    work : C-contiguous float64 array of shape (2, B)
        Scratch; the entries are processed B at a time.

    Checked against NumPy in
    tests/test_math.py::test_log_and_exp_arrays_match_numpy.
    """
    n = y.shape[0]
    block = work.shape[1]
    mantissa = work[0]
    jf = work[1]
    for start in range(0, n, block):
        stop = start + block if start + block < n else n
        y_b = y[start:stop]
        out_b = out[start:stop]
        for t in range(stop - start):
            mantissa[t] = y_b[t]
        _frexp_block(mantissa[:stop - start], jf)
        for t in range(stop - start):
            m = mantissa[t]
            j = jf[t]
            lv = _log_reduced(m - 1.0, j)
            yt = y_b[t]
            # as np.log: log 0 = -inf, log inf = inf, NaN below 0 and for NaN
            out_b[t] = lv if 0.0 < yt < math.inf else (
                -math.inf if yt == 0.0 else (yt if yt == math.inf else math.nan))


def _renamed(function, name, doc):
    """A copy of a Python function under another name (and Numba cache entry)."""
    copy = types.FunctionType(function.__code__, function.__globals__, name,
                              function.__defaults__, function.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = doc
    return copy


# exp_array is _exp_rows without FMA contraction, as exp_array has always
# been compiled (its results are unchanged to the bit). A renamed copy:
# Numba's cache keys an entry by the function's name and signature, not by
# its flags.
exp_array = njit(error_model="numpy")(_renamed(_exp_rows, "exp_array", """\
``out = exp(a)`` elementwise for ``a <= 0``, vectorized.

The exponential of :func:`softplus_sigmoid` on its own: equivalent to
``np.exp(a)`` for a in [-inf, 0] to within 1 unit in the last place
(subnormal results to within the smallest subnormal). ``a`` and ``out``
are float64 arrays of shape (n,) that may not alias, ``work`` float64
scratch of shape (2, B) (B entries at a time). Positive arguments are
outside the domain (wrong results, no error): the callers pass -theta,
theta >= 0. Tested with :func:`log_array`.
"""))


@njit(error_model="numpy", fastmath={"contract"})
def log1mexp_array(u, value, deriv, work):
    """``value = log(1 - exp(-u))`` and ``deriv = 1 / expm1(u)``, vectorized.

    The array form of :func:`log1mexp` and :func:`dlog1mexp` (the noisy-OR
    likelihood of an active feature, log p(x_i = 1 | z) with
    u = theta_i0 + sum_k theta_ik z_k, and its derivative), to within 3
    units in the last place of ``np.log(-np.expm1(-u))`` and
    ``1 / np.expm1(u)`` over u in (0, inf] (subnormal u included); u = 0
    gives -inf and +inf, u < 0 likewise (as the scalar functions), NaN stays
    NaN. No call to the C math library: exp(-u) as in fdlibm (see
    :func:`softplus_sigmoid`), 1 - exp(-u) by the Taylor series of expm1
    below ln 2 (the accurate branch of Maechler (2012), "Accurately
    computing log(1 - exp(-|a|))"), and the logarithm from the exponent
    bits and 2 atanh of the mantissa, so that the compiler turns the loops
    into SIMD instructions.

    Parameters
    ----------
    u : float64 array of shape (n,)
    value, deriv : float64 arrays of shape (n,)
        Outputs (may not alias ``u``).
    work : C-contiguous float64 array of shape (LOG1MEXP_WORK_ROWS, B)
        Scratch; the entries are processed B at a time (B = ``SOFTPLUS_BLOCK``
        = 1024 keeps it in the L1 or L2 cache).

    Checked against NumPy over the whole double range in
    tests/test_math.py::test_log1mexp_array_matches_numpy.
    """
    n = u.shape[0]
    block = work.shape[1]
    e = work[0]
    y = work[1]
    jf = work[2]
    fl = work[3]
    for start in range(0, n, block):
        stop = start + block if start + block < n else n
        m = stop - start
        u_b = u[start:stop]
        value_b = value[start:stop]
        deriv_b = deriv[start:stop]
        for t in range(m):
            y[t] = -u_b[t]
        _exp_block(y[:m], e, work[4:])  # exp(-u)
        # Maechler (2012): log(1 - e^-u) = log(-expm1(-u)) below ln 2 and
        # log1p(-e^-u) above. Below, y = -expm1(-u) by the Taylor series of
        # expm1(x) / x to x**17 (truncation < 2e-20 relative for |x| <= ln 2),
        # and log y from its bits (subnormal y scaled by 2**54); above,
        # log(1 + f) with f = -e^-u directly.
        for t in range(m):
            x = -u_b[t]
            c = 1.5619206968586225e-16
            c = 2.8114572543455206e-15 + x * c
            c = 4.779477332387385e-14 + x * c
            c = 7.647163731819816e-13 + x * c
            c = 1.1470745597729725e-11 + x * c
            c = 1.6059043836821613e-10 + x * c
            c = 2.08767569878681e-09 + x * c
            c = 2.505210838544172e-08 + x * c
            c = 2.755731922398589e-07 + x * c
            c = 2.7557319223985893e-06 + x * c
            c = 2.48015873015873e-05 + x * c
            c = 0.0001984126984126984 + x * c
            c = 0.001388888888888889 + x * c
            c = 0.008333333333333333 + x * c
            c = 0.041666666666666664 + x * c
            c = 0.16666666666666666 + x * c
            c = 0.5 + x * c
            c = 1.0 + x * c
            large = u_b[t] >= _LN2
            et = e[t]
            yt = 1.0 - et if large else (-x) * c
            # d/du log(1 - e^-u) = e^-u / (1 - e^-u) = 1 / expm1(u)
            deriv_b[t] = et / yt
            y[t] = 1.0 if large else yt
            fl[t] = -et
        _frexp_block(y[:m], jf)
        # log(1 + f) + j ln 2: below ln 2, 1 + f = m in [sqrt(1/2), sqrt(2))
        # (f exact); above, f = -e^-u and j = 0
        for t in range(m):
            mt = y[t]
            j = jf[t]
            f = fl[t] if u_b[t] >= _LN2 else mt - 1.0
            lv = _log_reduced(f, j)
            # u <= 0: -inf and +inf as log1mexp and dlog1mexp; NaN stays NaN
            ut = u_b[t]
            value_b[t] = lv if ut > 0.0 else (-math.inf if ut <= 0.0 else ut)
            deriv_b[t] = deriv_b[t] if ut > 0.0 else (math.inf if ut <= 0.0 else ut)


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


# log_ndtr by piecewise polynomials: on [_LNDTR_LO, _LNDTR_HI), one row of
# _LNDTR_DEGREE + 1 monomial coefficients (highest first) of log Phi per
# interval of width _LNDTR_WIDTH, in x in [-1, 1] across the interval: the
# Chebyshev interpolant of SciPy's log_ndtr at the Chebyshev points of the
# interval. Its error is below 1e-13 relative (checked against mpmath in
# tests/test_math.py), also above t = 3 where log Phi is tiny: there log Phi
# ~ -phi(t) / t changes by a factor of at most 1.8 across an interval, so
# the polynomial keeps its relative accuracy. One formula for every t of
# the range, no branch: the loops of the relational kernels over many
# arguments pipeline it.
_LNDTR_LO, _LNDTR_HI = -12.0, 9.0
_LNDTR_WIDTH = 0.0625
_LNDTR_DEGREE = 9


def _log_ndtr_table():
    """The (n_intervals, _LNDTR_DEGREE + 1) coefficient table of :func:`log_ndtr`."""
    from numpy.polynomial import chebyshev
    from scipy.special import log_ndtr as reference

    n = round((_LNDTR_HI - _LNDTR_LO) / _LNDTR_WIDTH)
    m = _LNDTR_DEGREE + 1
    nodes = np.cos(np.pi * (np.arange(m) + 0.5) / m)  # Chebyshev points of [-1, 1]
    centers = _LNDTR_LO + (np.arange(n) + 0.5) * _LNDTR_WIDTH
    values = reference(centers[:, None] + 0.5 * _LNDTR_WIDTH * nodes)
    # Chebyshev coefficients of the interpolants, then their monomial form
    cheb = values @ chebyshev.chebvander(nodes, _LNDTR_DEGREE) * (2.0 / m)
    cheb[:, 0] /= 2.0
    to_monomial = np.stack([np.pad(chebyshev.cheb2poly(np.eye(m)[j]), (0, m))[:m]
                            for j in range(m)])
    return np.ascontiguousarray((cheb @ to_monomial)[:, ::-1])


_LNDTR_TABLE = _log_ndtr_table()


@njit
def _log_ndtr_outside(t):
    """:func:`log_ndtr` outside the range of its table (a function of its
    own, so that the table's few instructions inline into the loops that
    call log_ndtr)."""
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
def log_ndtr(t):
    """log Phi(t), the log of the standard normal CDF, accurate for every t.

    Equivalent to ``scipy.special.log_ndtr(t)`` (to within 1e-13 relative).
    On [-12, 9), a polynomial of degree 9 on each interval of width 1/16,
    interpolated at the Chebyshev points of the interval from
    ``scipy.special.log_ndtr`` when the package is imported: no call to the
    C math library and no branch, which matters
    to the probit link of the latent feature relational model (user guide,
    latent feature relational model), evaluated millions of times per
    iteration. Elsewhere: above 9, log Phi(t) = log1p(-Phi(-t)) with Phi(-t)
    = erfc(t / sqrt 2) / 2 by ``math.erfc``; for -20 < t < -12,
    log(erfc(-t / sqrt 2) / 2); below -20 the asymptotic series log Phi(t) =
    -t^2/2 - log(-t) - log sqrt(2 pi) + log(1 - 1/t^2 + 3/t^4 - 15/t^6 +
    ...) with ten terms (truncation error below 1e-14 relative at t = -20).
    NaN gives NaN.
    """
    if _LNDTR_LO <= t < _LNDTR_HI:
        u = (t - _LNDTR_LO) * (1.0 / _LNDTR_WIDTH)
        k = int(u)
        # t just below _LNDTR_HI can round to u = n_intervals
        k = k if k < _LNDTR_TABLE.shape[0] else _LNDTR_TABLE.shape[0] - 1
        x = 2.0 * (u - k) - 1.0
        p = _LNDTR_TABLE[k, 0]
        for j in range(1, _LNDTR_DEGREE + 1):
            p = p * x + _LNDTR_TABLE[k, j]
        return p
    return _log_ndtr_outside(t)


@njit
def log_normal_pdf(t):
    """log phi(t) of the standard normal density.

    Equivalent to ``scipy.stats.norm.logpdf``.
    """
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
