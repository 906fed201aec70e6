"""make_noisy_or: exact sampling from the noisy-OR model, O(nnz)."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_array_equal

from skbinvi.datasets import make_noisy_or
from skbinvi.datasets._samples_generator import _bernoulli_process


def test_marginals_match_the_model():
    """Empirical p(x_i = 0) against the model's exp(-theta_0 - theta z) average."""
    X, truth = make_noisy_or(20000, 50, 5, leak=0.05, random_state=0)
    u = truth.leak + truth.latent @ truth.components
    expected = np.exp(-u).mean(axis=0)
    # binomial standard error of a frequency over 20000 rows is <= 0.0036
    assert np.abs((1 - X).mean(axis=0) - expected).max() < 0.015
    assert np.abs(truth.latent.mean(axis=0) - truth.prior).max() < 0.015


def test_shapes_sparse_and_reproducible():
    X, truth = make_noisy_or(300, 40, 4, density=0.2, sparse=True, random_state=1)
    assert sp.issparse(X) and X.shape == (300, 40)
    assert set(np.unique(X.data)) == {1.0}
    assert truth.components.shape == (4, 40)
    assert np.all((truth.components > 0).sum(axis=1) == 8)
    X2, _ = make_noisy_or(300, 40, 4, density=0.2, sparse=True, random_state=1)
    assert_array_equal(X.toarray(), X2.toarray())
    dense, _ = make_noisy_or(300, 40, 4, density=0.2, random_state=1)
    assert_array_equal(dense, X.toarray())


def test_bernoulli_process_is_exact():
    rng = np.random.RandomState(0)
    n, p = 1000, 0.03
    counts = np.zeros(n)
    n_rep = 2000
    for _ in range(n_rep):
        idx = _bernoulli_process(n, p, rng)
        assert np.all(np.diff(idx) > 0) and (idx.size == 0 or idx[-1] < n)
        counts[idx] += 1
    # every trial succeeds with probability p (standard error 0.0038)
    assert abs(counts.mean() / n_rep - p) < 0.002
    assert np.abs(counts / n_rep - p).max() < 0.03
    assert _bernoulli_process(10, 0.0, rng).size == 0


def test_bernoulli_process_with_a_tiny_probability():
    """Below p of about 1e-18 numpy's geometric overflows int64 (make_noisy_or
    with leak=1e-17 failed with "negative axis 0 index"); the count is drawn
    first there, exactly."""
    rng = np.random.RandomState(0)
    n, p = 10**13, 3e-13  # 3 successes expected
    sizes = []
    for _ in range(400):
        idx = _bernoulli_process(n, p, rng)
        assert np.all(np.diff(idx) > 0) and np.all((idx >= 0) & (idx < n))
        sizes.append(idx.size)
    assert abs(np.mean(sizes) - n * p) < 4 * np.sqrt(n * p / 400)
    X, truth = make_noisy_or(1000, 100, 2, leak=1e-17, random_state=0)
    assert X.shape == (1000, 100) and set(np.unique(X)) <= {0.0, 1.0}


def test_truth_prior_is_a_copy():
    prior = np.array([0.2, 0.3])
    _, truth = make_noisy_or(50, 10, 2, prior=prior, random_state=0)
    truth.prior[:] = 0.9
    assert_array_equal(prior, [0.2, 0.3])


def test_wide_data_is_cheap():
    """5000 x 1e6 with a leak is generated without an N x D population."""
    X, _ = make_noisy_or(5000, 1_000_000, 10, density=1e-5, leak=2e-5,
                         sparse=True, random_state=0)
    assert 0.5 * 5000 * 1e6 * 2e-5 < X.nnz < 2.0 * (5000 * 1e6 * 2e-5 + 5000 * 10)


def test_bad_parameters():
    with pytest.raises(ValueError, match="density"):
        make_noisy_or(10, 5, 2, density=0.0)
    with pytest.raises(ValueError, match="leak"):
        make_noisy_or(10, 5, 2, leak=1.0)


def test_one_prior_per_cause():
    """An array prior sets mu_k per cause; the latent frequencies follow it, and
    a float prior gives the same draws as the equal array."""
    prior = np.array([0.5, 0.2, 0.05, 0.0])
    X, truth = make_noisy_or(20000, 30, 4, prior=prior, random_state=0)
    assert_array_equal(truth.prior, prior)
    # binomial standard error <= 0.0036 over 20000 rows
    assert np.abs(truth.latent.mean(axis=0) - prior).max() < 0.015
    assert truth.latent[:, 3].sum() == 0
    X1, _ = make_noisy_or(500, 30, 4, prior=0.2, random_state=3)
    X2, _ = make_noisy_or(500, 30, 4, prior=np.full(4, 0.2), random_state=3)
    assert_array_equal(X1, X2)


@pytest.mark.parametrize("prior, match", [(np.full(3, 0.2), "shape"),
                                          ([0.2, 0.2, 0.2, 1.5], r"\[0, 1\]")])
def test_bad_prior_arrays_are_rejected(prior, match):
    with pytest.raises(ValueError, match=match):
        make_noisy_or(10, 5, 4, prior=prior)
