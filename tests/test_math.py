"""Shared numba special functions against SciPy/NumPy over extreme arguments."""

import numpy as np
import pytest
from numpy.testing import assert_allclose
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
