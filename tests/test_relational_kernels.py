"""Kernels of the latent feature relational model against NumPy/SciPy and enumeration."""

import itertools

import numpy as np
from numpy.testing import assert_allclose
from scipy.special import log_ndtr

from skbinvi.relational import _kernels


def _problem(seed=0, N=7, D=3):
    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(N, k=1)
    x = (rng.random(rows.size) < 0.4).astype(float)
    q = rng.uniform(0.05, 0.95, size=(N, D))
    return rows.astype(np.int64), cols.astype(np.int64), x, q, -0.8, rng.normal(1.0, 1.0, D)


def test_expected_pair_log_likelihood_matches_reference_with_same_samples():
    rows, cols, x, q, w0, w = _problem()
    uniforms = np.random.default_rng(1).random((64, q.shape[1]))
    out = np.empty(rows.size)
    _kernels.expected_pair_log_likelihood(rows, cols, x, q, w0, w, uniforms, out)
    p = q[rows] * q[cols]  # (P, D)
    bits = uniforms[None, :, :] < p[:, None, :]  # (P, S, D)
    eta = w0 + bits @ w
    sign = np.where(x == 1, 1.0, -1.0)[:, None]
    assert_allclose(out, log_ndtr(sign * eta).mean(axis=1), rtol=1e-12)


def test_expected_pair_log_likelihood_agrees_with_enumeration():
    rows, cols, x, q, w0, w = _problem(seed=2)
    D = q.shape[1]
    S = 40000
    uniforms = np.random.default_rng(3).random((S, D))
    out = np.empty(rows.size)
    _kernels.expected_pair_log_likelihood(rows, cols, x, q, w0, w, uniforms, out)
    for k in range(rows.size):
        p = q[rows[k]] * q[cols[k]]
        sign = 1.0 if x[k] == 1 else -1.0
        values, probs = [], []
        for bits in itertools.product([0.0, 1.0], repeat=D):
            b = np.array(bits)
            values.append(log_ndtr(sign * (w0 + b @ w)))
            probs.append(np.prod(np.where(b == 1, p, 1 - p)))
        values, probs = np.array(values), np.array(probs)
        exact = probs @ values
        se = np.sqrt(probs @ (values - exact) ** 2 / S)
        assert abs(out[k] - exact) <= 4 * se + 1e-12


def test_kl_features_matches_numpy():
    _, _, _, q, _, _ = _problem(seed=4)
    q[0, 0], q[1, 1] = 0.0, 1.0  # saturated entries have finite KL
    rho = 0.3
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(q > 0, q * np.log(q / rho), 0.0) + np.where(
            q < 1, (1 - q) * np.log((1 - q) / (1 - rho)), 0.0)
    assert_allclose(_kernels.kl_features(q, rho), kl.sum(), rtol=1e-12)
