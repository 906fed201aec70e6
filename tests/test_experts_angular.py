"""The mutual angular regularizer (skbinvi/experts/_angular.py): value against
its definition, gradient against finite differences, invariances, extreme
configurations (orthogonal, parallel, K = 1) and the diversity it promotes."""

import numpy as np
import pytest
from _reference import experts as REF
from numpy.testing import assert_allclose
from scipy.stats import ortho_group

from skbinvi.experts._angular import PARALLEL_TOL, mutual_angles


def _naive_omega(A, gamma):
    """Eq. 12 literally: arccos |cos| over ordered pairs i != j, population variance."""
    U = A / np.linalg.norm(A, axis=1, keepdims=True)
    theta = np.arccos(np.clip(np.abs(U @ U.T), 0.0, 1.0))
    off = theta[~np.eye(len(A), dtype=bool)]
    return off.mean() - gamma * off.var()


def _random_rows(K, p, rng):
    """Generic rows with norms spread over two decades."""
    return rng.normal(size=(K, p)) * 10 ** rng.uniform(-1, 1, size=(K, 1))


def _numeric_gradient(A, gamma, rel_step=1e-6):
    grad = np.zeros_like(A)
    for i, j in np.ndindex(A.shape):
        h = rel_step * np.linalg.norm(A[i])
        E = np.zeros_like(A)
        E[i, j] = h
        grad[i, j] = (REF.mutual_angular_regularizer(A + E, gamma)
                      - REF.mutual_angular_regularizer(A - E, gamma)) / (2 * h)
    return grad


@pytest.mark.parametrize("K, p", [(2, 2), (2, 5), (3, 3), (5, 4), (8, 10), (6, 2)])
@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_gradient_matches_finite_differences(K, p, gamma):
    rng = np.random.default_rng(100 * K + p)
    A = _random_rows(K, p, rng)
    grad = REF.mutual_angular_gradient(A, gamma)
    numeric = _numeric_gradient(A, gamma)
    # each row's gradient scales like 1 / ||a_i||; compare row-relative
    scale = 1.0 / np.linalg.norm(A, axis=1, keepdims=True)
    assert np.max(np.abs(grad - numeric) / scale) < 1e-7
    # scale invariance: the gradient is orthogonal to each row
    assert_allclose(np.sum(grad * A, axis=1), 0.0, atol=1e-14)


def test_value_matches_definition_and_pair_conventions():
    rng = np.random.default_rng(0)
    for K, p in [(2, 3), (4, 4), (7, 12), (10, 3)]:
        A = _random_rows(K, p, rng)
        theta = mutual_angles(A)
        pairs = theta[np.triu_indices(K, 1)]
        for gamma in (0.0, 0.5, 3.0):
            omega = REF.mutual_angular_regularizer(A, gamma)
            # unordered pairs, population variance (1/M) ...
            assert omega == pytest.approx(pairs.mean() - gamma * pairs.var(ddof=0),
                                          rel=1e-13, abs=1e-15)
            # ... equals the ordered-pair form over i != j of the paper
            assert omega == pytest.approx(_naive_omega(A, gamma), rel=1e-12, abs=1e-14)
        value, grad = REF.mutual_angular_value_and_gradient(A, 0.7)
        assert value == REF.mutual_angular_regularizer(A, 0.7)
        assert_allclose(grad, REF.mutual_angular_gradient(A, 0.7), rtol=0, atol=0)
        # angles: symmetric, zero diagonal, in [0, pi/2]
        assert_allclose(theta, theta.T, atol=0)
        assert np.all(np.diag(theta) == 0)
        assert np.all((theta >= 0) & (theta <= np.pi / 2))
        # bounds: -gamma pi^2/16 <= Omega <= pi/2
        for gamma in (0.0, 1.0, 10.0):
            value = REF.mutual_angular_regularizer(A, gamma)
            assert -gamma * np.pi**2 / 16 <= value <= np.pi / 2


def test_invariances():
    rng = np.random.default_rng(1)
    K, p = 6, 5
    A = _random_rows(K, p, rng)
    gamma = 1.0
    omega = REF.mutual_angular_regularizer(A, gamma)
    grad = REF.mutual_angular_gradient(A, gamma)
    scale = 10 ** rng.uniform(-3, 3, size=(K, 1))
    signs = np.array([[1.0], [-1.0], [1.0], [-1.0], [-1.0], [1.0]])
    Q = ortho_group.rvs(p, random_state=2)
    # positive scaling of rows: Omega unchanged, gradient rows scale by 1/c
    assert REF.mutual_angular_regularizer(scale * A, gamma) == pytest.approx(omega,
                                                                             rel=1e-13)
    assert_allclose(REF.mutual_angular_gradient(scale * A, gamma), grad / scale,
                    rtol=1e-10, atol=1e-14)
    # sign flips (|cos|): Omega unchanged, gradient rows flip with their row
    assert REF.mutual_angular_regularizer(signs * A, gamma) == pytest.approx(omega,
                                                                             rel=1e-13)
    assert_allclose(REF.mutual_angular_gradient(signs * A, gamma), signs * grad,
                    rtol=1e-10, atol=1e-14)
    # a common rotation
    assert REF.mutual_angular_regularizer(A @ Q, gamma) == pytest.approx(omega,
                                                                          rel=1e-13)
    assert_allclose(REF.mutual_angular_gradient(A @ Q, gamma), grad @ Q,
                    rtol=1e-10, atol=1e-14)
    # permutation of the rows
    perm = rng.permutation(K)
    omega_perm = REF.mutual_angular_regularizer(A[perm], gamma)
    assert omega_perm == pytest.approx(omega, rel=1e-13)


@pytest.mark.parametrize("gamma", [0.0, 1.0, 10.0])
def test_orthogonal_rows_reach_the_maximum(gamma):
    # variance 0, every angle pi/2, whatever gamma
    Q = ortho_group.rvs(6, random_state=3)
    scales = np.array([[0.1], [1.0], [5.0], [2.0]])
    assert REF.mutual_angular_regularizer(scales * Q[:4], gamma) == pytest.approx(
        np.pi / 2, abs=1e-12)
    assert REF.mutual_angular_regularizer(-3.0 * np.eye(3), gamma) == np.pi / 2
    # exactly orthogonal (cos = 0 exactly, the kink of |cos|): subgradient 0
    assert_allclose(REF.mutual_angular_gradient(np.eye(3), gamma), 0.0, atol=0)
    assert_allclose(REF.mutual_angular_gradient(np.eye(4)[:2] * 7.0, gamma), 0.0,
                    atol=0)


def test_nearly_parallel_rows_score_low():
    rng = np.random.default_rng(4)
    K, p = 5, 8
    base = rng.normal(size=p)
    noise = rng.normal(size=(K, p))
    values = [REF.mutual_angular_regularizer(base + eps * noise, 0.0)
              for eps in (1e-6, 1e-3, 1e-2, 1e-1, 1.0)]
    assert values[0] < 1e-5
    assert np.all(np.diff(values) > 0)  # more spread, more diversity
    random_value = REF.mutual_angular_regularizer(rng.normal(size=(K, p)), 0.0)
    assert values[2] < random_value < np.pi / 2


def test_angles_stable_near_parallel():
    # two rows at a tiny angle: arccos(|cos|) would give 0 (cos rounds to 1)
    for angle in (1e-4, 1e-7, 1e-9):
        A = np.array([[2.0, 0.0, 0.0],
                      [3.0 * np.cos(angle), 3.0 * np.sin(angle), 0.0]])
        theta = mutual_angles(A)[0, 1]
        assert theta == pytest.approx(angle, rel=1e-6)
        grad = REF.mutual_angular_gradient(A, 0.0)
        # a bounded gradient of norm 1/||a_i|| (one pair, M = 1), pushing apart
        assert_allclose(np.linalg.norm(grad, axis=1), [1 / 2.0, 1 / 3.0], rtol=1e-6)
        assert grad[0, 1] < 0 < grad[1, 1]
    # identical or opposite rows: angle ~0, finite (zero) gradient
    for B in ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]],
              [[1.0, 2.0, 3.0], [-2.0, -4.0, -6.0]]):
        theta = mutual_angles(B)[0, 1]
        assert 0.0 <= theta <= PARALLEL_TOL
        grad = REF.mutual_angular_gradient(B, 1.0)
        assert np.all(np.isfinite(grad))
        assert_allclose(grad, 0.0, atol=0)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_gradient_ascent_increases_diversity(gamma):
    rng = np.random.default_rng(5)
    K, p = 6, 10
    A = rng.normal(size=p) + 0.05 * rng.normal(size=(K, p))  # nearly parallel
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    values = [REF.mutual_angular_regularizer(A, gamma)]
    for _ in range(6):  # projected gradient ascent on the sphere
        A = A + 0.5 * REF.mutual_angular_gradient(A, gamma)
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        values.append(REF.mutual_angular_regularizer(A, gamma))
    assert np.all(np.diff(values) > 0)
    assert values[-1] > values[0] + 0.5
    mean_angle = mutual_angles(A)[np.triu_indices(K, 1)].mean()
    assert values[0] < 0.1 and mean_angle > 0.8  # rad


def test_single_row_and_input_errors():
    assert REF.mutual_angular_regularizer(np.array([[1.0, 2.0]]), 1.0) == 0.0
    assert_allclose(REF.mutual_angular_gradient(np.array([[1.0, 2.0, 3.0]]), 1.0),
                    np.zeros((1, 3)), atol=0)
    value, grad = REF.mutual_angular_value_and_gradient([[3.0, 4.0]], 0.0)
    assert value == 0.0 and grad.shape == (1, 2)
    assert_allclose(mutual_angles([[3.0, 4.0]]), [[0.0]])
    with pytest.raises(ValueError, match="zero"):
        REF.mutual_angular_regularizer([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], 1.0)
    with pytest.raises(ValueError, match="zero"):
        REF.mutual_angular_gradient([[0.0, 0.0]], 1.0)
    with pytest.raises(ValueError):
        REF.mutual_angular_regularizer(np.ones(3), 1.0)  # 1-D
    with pytest.raises(ValueError):
        REF.mutual_angular_regularizer(np.empty((0, 3)), 1.0)
    with pytest.raises(ValueError):
        REF.mutual_angular_regularizer([[1.0, np.nan], [1.0, 0.0]], 1.0)
    with pytest.raises(ValueError, match="gamma"):
        REF.mutual_angular_regularizer(np.eye(2), -1.0)


@pytest.mark.parametrize("gamma", [0.0, 0.7])
def test_compiled_omega_equals_numpy_reference(gamma):
    """The compiled Omega of the inner ascent (_ascent._omega_kernel) against
    value_and_grad_unchecked, on random unit rows plus a nearly parallel and
    an antipodal pair. (Not an exactly orthogonal pair: theta = pi/2 is a kink
    where the gradient's side is the sign of a cosine of order 1e-17, which
    the two summation orders round differently.)"""
    from skbinvi.experts._angular import value_and_grad_unchecked
    from skbinvi.experts._ascent import _omega_kernel

    rng = np.random.RandomState(3)
    A = rng.normal(size=(6, 5))
    A[1] = A[0] + 1e-9 * rng.normal(size=5)
    A[2] = -A[0]
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    ref_value, ref_grad = value_and_grad_unchecked(A, np.linalg.norm(A, axis=1), gamma,
                                                   True)
    grad = np.empty_like(A)
    value = _omega_kernel(A, gamma, grad)
    assert value == pytest.approx(ref_value, rel=1e-12)
    assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)
    assert _omega_kernel(A, gamma, np.empty((0, A.shape[1]))) == value
