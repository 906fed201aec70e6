"""Shared numba special functions against SciPy/NumPy over extreme arguments."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, log_expit

from skbinvi import _math

GRID = np.concatenate([-np.logspace(-8, 3, 200), [0.0], np.logspace(-8, 3, 200)])
POSITIVE = np.logspace(-12, 3, 400)


@pytest.mark.parametrize(
    "func, reference, grid",
    [
        (_math.sigmoid, expit, GRID),
        (_math.log_sigmoid, log_expit, GRID),
        (_math.softplus, lambda x: np.logaddexp(0.0, x), GRID),
        # Maechler (2012): log(-expm1(-u)) loses precision for u > log 2
        (_math.log1mexp, lambda u: np.where(u <= np.log(2), np.log(-np.expm1(-u)),
                                            np.log1p(-np.exp(-u))), POSITIVE),
        (_math.dlog1mexp, lambda u: 1.0 / np.expm1(u), POSITIVE),
    ],
)
def test_against_reference(func, reference, grid):
    got = np.array([func(x) for x in grid])
    with np.errstate(over="ignore"):
        expected = reference(grid)
    assert np.all(np.isfinite(got) | np.isinf(expected))
    assert_allclose(got, expected, rtol=1e-12, atol=1e-300)


def test_log1mexp_boundaries():
    assert _math.log1mexp(0.0) == -np.inf
    assert _math.dlog1mexp(0.0) == np.inf
    # f'(u) really is the derivative of f(u)
    u = np.array([1e-4, 0.3, 0.69, 0.7, 2.0, 30.0])
    eps = 1e-7 * u
    numeric = (np.array([_math.log1mexp(v) for v in u + eps])
               - np.array([_math.log1mexp(v) for v in u - eps])) / (2 * eps)
    assert_allclose([_math.dlog1mexp(v) for v in u], numeric, rtol=1e-6)


PROBIT_GRID = np.concatenate([-np.logspace(-8, np.log10(40), 600), [0.0],
                              np.logspace(-8, np.log10(40), 600)])


def test_log_ndtr_matches_scipy_up_to_40():
    from scipy.special import log_ndtr

    got = np.array([_math.log_ndtr(t) for t in PROBIT_GRID])
    expected = log_ndtr(PROBIT_GRID)
    assert np.all(np.isfinite(got))
    # relative accuracy, and absolute where log Phi underflows to 0 (t > 8.3)
    assert_allclose(got, expected, rtol=1e-12, atol=1e-300)
    # continuity at the branch points of the implementation
    for edge in (-20.0, 0.0):
        below, above = _math.log_ndtr(edge - 1e-9), _math.log_ndtr(edge + 1e-9)
        assert abs(above - below) < 1e-8 * max(1.0, abs(below))


def test_log_ndtr_table_is_accurate_to_the_last_digits():
    """The piecewise polynomials of log_ndtr on [-12, 9) against mpmath at 60
    digits: random points, every interval's edges and the points just below
    them (where the index of the interval rounds), and the range's ends."""
    mpmath = pytest.importorskip("mpmath")
    lo, hi, width = _math._LNDTR_LO, _math._LNDTR_HI, _math._LNDTR_WIDTH
    edges = lo + width * np.arange(round((hi - lo) / width) + 1)
    t = np.concatenate([
        np.random.default_rng(0).uniform(lo - 1.0, hi + 1.0, 400),
        edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf),
    ])
    with mpmath.workdps(60):
        expected = np.array([float(mpmath.log(mpmath.ncdf(mpmath.mpf(v)))) for v in t])
    got = np.array([_math.log_ndtr(v) for v in t])
    assert_allclose(got, expected, rtol=1e-13, atol=0.0)
    assert np.isnan(_math.log_ndtr(np.nan))
    assert _math.log_ndtr(-np.inf) == -np.inf
    assert _math.log_ndtr(np.inf) == 0.0


def test_inverse_mills_ratio_matches_scipy_and_truncated_normal_means():
    from scipy.special import log_ndtr
    from scipy.stats import norm, truncnorm

    got = np.array([_math.inverse_mills_ratio(t) for t in PROBIT_GRID])
    expected = np.exp(norm.logpdf(PROBIT_GRID) - log_ndtr(PROBIT_GRID))
    assert_allclose(got, expected, rtol=1e-10, atol=1e-300)
    # tends to -t as t -> -inf
    assert _math.inverse_mills_ratio(-40.0) == pytest.approx(40.0 * (1 + 1 / 1600),
                                                           rel=1e-5)
    # the means of unit normals truncated to [0, inf) and (-inf, 0)
    for m in (-8.0, -1.5, 0.0, 0.7, 5.0):
        upper = truncnorm.mean(-m, np.inf, loc=m)
        lower = truncnorm.mean(-np.inf, -m, loc=m)
        assert m + _math.inverse_mills_ratio(m) == pytest.approx(upper, rel=1e-9)
        assert m - _math.inverse_mills_ratio(-m) == pytest.approx(lower, rel=1e-9)


def test_trigamma_matches_scipy_polygamma():
    """trigamma (recurrence, then A&S 6.4.12) against scipy.special.polygamma(1, x)
    from 1e-10 to 1e12; NaN off its domain."""
    from scipy.special import polygamma

    x = np.concatenate([np.geomspace(1e-10, 1e12, 2000), np.linspace(0.05, 30.0, 3000)])
    got = np.array([_math.trigamma(v) for v in x])
    assert_allclose(got, polygamma(1, x), rtol=4e-15)
    for bad in (0.0, -1.0, np.nan):
        assert np.isnan(_math.trigamma(bad))


def test_scipy_special_binding_calls_scipy_or_reports_absence():
    """skbinvi._numba.scipy_special: a SciPy Cython export called from jitted
    code gives SciPy's value; a name SciPy does not export gives None (the
    callers then use their NumPy path)."""
    import numba
    from scipy.special import gammaln

    from skbinvi._numba import scipy_special

    assert scipy_special("no_such_function", numba.float64, numba.float64) is None
    c_gammaln = scipy_special("gammaln", numba.float64, numba.float64)
    if c_gammaln is None:
        pytest.skip("this SciPy does not export gammaln")

    @numba.njit
    def call(x):
        return c_gammaln(x, 0)

    for x in (1e-300, 0.5, 3.0, 171.5, 1e10):
        assert call(x) == gammaln(x)


def test_softplus_sigmoid_matches_numpy():
    """The vectorized softplus/sigmoid over the whole double range, to a few ulps."""
    rng = np.random.default_rng(0)
    x = np.concatenate([
        -np.logspace(-320, 3.2, 20001), np.logspace(-320, 3.2, 20001),
        [0.0, -0.0, -708.0, -709.0, -745.0, -745.2, -746.0, -800.0, 800.0],
        rng.normal(scale=10.0, size=5000), rng.normal(scale=300.0, size=5000),
    ])
    # block boundaries: lengths that are not multiples of the block
    for n in (1, 3, _math.SOFTPLUS_BLOCK - 1, _math.SOFTPLUS_BLOCK + 1, x.size):
        value, slope = np.empty(n), np.empty(n)
        _math.softplus_sigmoid(x[:n], value, slope, np.empty((3, _math.SOFTPLUS_BLOCK)))
        expected = np.logaddexp(0.0, x[:n])
        with np.errstate(over="ignore"):
            e = np.exp(np.minimum(x[:n], 0.0))  # exact expit, also below -709
            expected_slope = np.where(x[:n] >= 0, 1.0 / (1.0 + np.exp(-x[:n])),
                                      e / (1.0 + e))
        tiny = np.finfo(float).tiny
        for got, ref, ulps in ((value, expected, 3), (slope, expected_slope, 2)):
            normal = np.abs(ref) >= tiny
            assert np.all(np.abs(got - ref)[normal]
                          <= ulps * np.spacing(np.abs(ref[normal])))
            # subnormal results: to within the smallest subnormal
            assert np.all(np.abs(got - ref)[~normal] <= 5e-324)
    special = np.array([np.inf, -np.inf, np.nan])
    value, slope = np.empty(3), np.empty(3)
    _math.softplus_sigmoid(special, value, slope, np.empty((3, 8)))
    assert_allclose(value, [np.inf, 0.0, np.nan])
    assert_allclose(slope, [1.0, 0.0, np.nan])


def test_log1mexp_array_matches_numpy_and_the_scalar_functions():
    """The vectorized log(1 - e^-u) and 1 / expm1(u) over (0, inf], to a few ulps.

    Also catches a log1mexp computed as log(1 - e^-u) above ln 2 (tens of
    ulps near u = 4, all precision lost beyond u = 37).
    """
    rng = np.random.default_rng(0)
    u = np.concatenate([
        np.logspace(-323, 3.2, 40001),
        [5e-324, 1e-310, np.log(2.0), np.nextafter(np.log(2.0), 0), 1e-8, 700.0,
         708.0, 709.0, 710.0, 745.0, 746.0, 800.0, 1e300],
        rng.exponential(1.0, size=5000), rng.exponential(30.0, size=5000),
    ])
    work = np.empty((_math.LOG1MEXP_WORK_ROWS, _math.SOFTPLUS_BLOCK))
    for n in (1, 3, _math.SOFTPLUS_BLOCK - 1, _math.SOFTPLUS_BLOCK + 1, u.size):
        value, deriv = np.empty(n), np.empty(n)
        _math.log1mexp_array(u[:n], value, deriv, work)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # Maechler's accurate branches
            expected = np.where(u[:n] < np.log(2.0), np.log(-np.expm1(-u[:n])),
                                np.log1p(-np.exp(-u[:n])))
            # 1 / expm1(u) = e^-u / (1 - e^-u): e^-u where expm1 overflows
            expected_deriv = np.where(u[:n] > 700.0, np.exp(-u[:n]),
                                      1.0 / np.expm1(u[:n]))
        tiny = np.finfo(float).tiny
        for got, ref in ((value, expected), (deriv, expected_deriv)):
            # 1 / expm1(u) overflows for u below 1 / DBL_MAX
            infinite = np.isinf(ref)
            assert_array_equal(got[infinite], ref[infinite])
            err = np.abs(got[~infinite] - ref[~infinite])
            ref = np.abs(ref[~infinite])
            normal = ref >= tiny
            assert np.all(err[normal] <= 3 * np.spacing(ref[normal]))
            assert np.all(err[~normal] <= 5e-324)
        # the scalar kernels the array form replaces
        scalar = np.array([_math.log1mexp(t) for t in u[:n]])
        assert_allclose(value, scalar, rtol=4e-16, atol=0)
    special = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan])
    value, deriv = np.empty(6), np.empty(6)
    _math.log1mexp_array(special, value, deriv, np.empty((_math.LOG1MEXP_WORK_ROWS, 4)))
    assert_array_equal(value, [-np.inf, -np.inf, -np.inf, -np.inf, 0.0, np.nan])
    assert_array_equal(deriv, [np.inf, np.inf, np.inf, np.inf, 0.0, np.nan])


def test_log_and_exp_arrays_match_numpy():
    """The vectorized log (whole positive range) and exp (a <= 0), to 2 and 1 ulps."""
    rng = np.random.default_rng(0)
    y = np.concatenate([
        np.logspace(-323.5, 308, 40001), [5e-324, 1e-310, 2.2250738585072014e-308,
                                          np.sqrt(0.5), np.sqrt(2.0), 1.0, 2.0],
        np.nextafter(1.0, [0.0, 2.0]), rng.uniform(0.5, 2.0, size=5000),
        rng.uniform(1 - 1e-6, 1 + 1e-6, size=5000),
    ])
    a = -np.concatenate([np.logspace(-320, 3.2, 20001),
                         [0.0, 708.0, 745.0, 746.0, 800.0],
                         rng.exponential(10.0, size=5000)])
    work = np.empty((2, _math.SOFTPLUS_BLOCK))
    for n in (1, 3, _math.SOFTPLUS_BLOCK + 1, y.size):
        out = np.empty(n)
        _math.log_array(y[:n], out, work)
        ref = np.log(y[:n])
        assert np.all(np.abs(out - ref) <= 2 * np.spacing(np.abs(ref)))
    for n in (1, 3, _math.SOFTPLUS_BLOCK + 1, a.size):
        out = np.empty(n)
        _math.exp_array(a[:n], out, work)
        ref = np.exp(a[:n])
        tiny = np.finfo(float).tiny
        normal = ref >= tiny
        assert np.all(np.abs(out - ref)[normal] <= np.spacing(ref[normal]))
        assert np.all(np.abs(out - ref)[~normal] <= 5e-324)
    out = np.empty(6)
    with np.errstate(divide="ignore", invalid="ignore"):
        special = np.array([0.0, -0.0, np.inf, -1.0, -np.inf, np.nan])
        _math.log_array(special, out, work)
        assert_array_equal(out, np.log(special))
    _math.exp_array(np.array([-np.inf, -0.0, np.nan]), out[:3], work)
    assert_array_equal(out[:3], [0.0, 1.0, np.nan])
