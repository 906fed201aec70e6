"""Synthetic relational data from the latent feature probit model (make_relational)."""

import doctest
import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import ndtr
from scipy.stats import norm

from skbinvi.datasets import _relational_generator, make_relational

# Binomial tolerance of the frequency tests: |mean - p| <= Z_TOL * sd + 1e-12
# with sd = sqrt(p (1 - p) / n). Given Z, the links of a group are independent
# Bernoulli(p) draws, so the count is exactly Binomial(n, p); a 5-sigma band is
# exceeded with probability < 1e-6 per group (and the seeds are fixed).
Z_TOL = 5.0


def _dense_probability(truth):
    """Independent reference: the N x N matrix Phi(w0 + Z diag(w) Z^T)."""
    Z = truth.latent_features.astype(np.float64)
    return ndtr(truth.intercept + (Z * truth.weights) @ Z.T)


def _assert_binomial(y, p, what):
    n = y.size
    sd = np.sqrt(p * (1.0 - p) / n)
    assert abs(y.mean() - p) <= Z_TOL * sd + 1e-12, (what, n, y.mean(), p)


def test_shapes_dtypes_and_truth():
    X, y, truth = make_relational(30, 4, random_state=0)
    n_pairs = 30 * 29 // 2
    assert X.shape == (n_pairs, 2) and X.dtype == np.int64
    assert y.shape == (n_pairs,) and y.dtype == np.int64
    assert set(np.unique(y)) <= {0, 1}
    Z = truth.latent_features
    assert Z.shape == (30, 4) and Z.dtype == np.int8
    assert set(np.unique(Z)) <= {0, 1}
    assert truth.weights.shape == (4,) and truth.weights.dtype == np.float64
    assert truth.intercept == -1.0 and isinstance(truth.intercept, float)
    assert truth.rho == 0.3
    assert truth.link_probability.shape == (n_pairs,)
    assert truth.link_probability.dtype == np.float64
    # default weights: positive, uniform in [weight_scale / 2, 3 weight_scale / 2]
    assert np.all((truth.weights >= 1.0) & (truth.weights <= 3.0))


def test_pairs_are_undirected_i_less_than_j():
    n = 25
    X, y, truth = make_relational(n, 3, random_state=1)
    i, j = X.T
    assert np.all(i < j)
    # every unordered pair exactly once, row-major (sorted by i, then j)
    rows, cols = np.triu_indices(n, k=1)
    assert_array_equal(i, rows)
    assert_array_equal(j, cols)
    assert len({(a, b) for a, b in X.tolist()}) == n * (n - 1) // 2
    # the probabilities are those of a symmetric model: P[i, j] = P[j, i]
    P = _dense_probability(truth)
    assert_allclose(P, P.T)
    assert_allclose(truth.link_probability, P[i, j], rtol=1e-12, atol=0)
    assert_allclose(truth.link_probability, P[j, i], rtol=1e-12, atol=0)
    # a symmetric adjacency matrix with an empty diagonal can be built from y
    A = np.zeros((n, n), dtype=np.int64)
    A[i, j] = y
    A[j, i] = y
    assert_array_equal(A, A.T)
    assert not A.diagonal().any()


def test_link_probability_matches_model_with_given_weights():
    w = np.array([1.5, -0.5, 0.0, 2.0])
    X, y, truth = make_relational(40, 4, weights=w, intercept=0.3, random_state=2)
    assert_array_equal(truth.weights, w)
    assert truth.weights is not w  # a copy
    Z = truth.latent_features
    i, j = X.T
    eta = 0.3 + (Z[i] * Z[j]) @ w
    assert_allclose(truth.link_probability, norm.cdf(eta), rtol=1e-12)


def test_determinism():
    a = make_relational(50, 3, random_state=42)
    b = make_relational(50, 3, random_state=42)
    for u, v in ((a[0], b[0]), (a[1], b[1])):
        assert_array_equal(u, v)
    for key in ("latent_features", "weights", "link_probability"):
        assert_array_equal(a[2][key], b[2][key])
    c = make_relational(50, 3, random_state=np.random.RandomState(42))
    assert_array_equal(a[1], c[1])
    d = make_relational(50, 3, random_state=43)
    assert not np.array_equal(a[2].latent_features, d[2].latent_features)
    # documented draw order: Z first, so given weights leave Z unchanged
    e = make_relational(50, 3, weights=[1.0, 1.0, 1.0], random_state=42)
    assert_array_equal(e[2].latent_features, a[2].latent_features)


def test_link_frequency_per_number_of_shared_features():
    """Equal weights: p depends only on k = number of shared features."""
    n, w, w0 = 700, 0.8, -1.0
    X, y, truth = make_relational(
        n, 3, density=0.5, weights=[w, w, w], intercept=w0, random_state=0
    )
    Z = truth.latent_features
    k = (Z[X[:, 0]] & Z[X[:, 1]]).sum(axis=1)
    seen = 0
    for shared in range(4):
        mask = k == shared
        assert mask.sum() > 2000  # 244,650 pairs; P(k = 3) = 1/64
        p = ndtr(w0 + shared * w)
        assert_allclose(truth.link_probability[mask], p)
        _assert_binomial(y[mask], p, f"k={shared}")
        seen += mask.sum()
    assert seen == y.size
    # sharing features raises the link frequency
    rates = [y[k == s].mean() for s in range(4)]
    assert np.all(np.diff(rates) > 0)


def test_link_frequency_per_shared_feature_set_random_weights():
    """Default random weights: group pairs by the set of shared features."""
    X, y, truth = make_relational(600, 3, density=0.4, random_state=3)
    Z = truth.latent_features
    shared = Z[X[:, 0]] & Z[X[:, 1]]
    code = shared @ (1 << np.arange(3))
    for c in range(8):
        mask = code == c
        bits = (c >> np.arange(3)) & 1
        p = ndtr(truth.intercept + bits @ truth.weights)
        assert mask.sum() > 500
        _assert_binomial(y[mask], p, f"set={bits}")
    # overall: y is a draw from link_probability
    n = y.size
    sd = np.sqrt(np.sum(truth.link_probability * (1 - truth.link_probability)))
    assert abs(y.sum() - truth.link_probability.sum()) <= Z_TOL * sd
    assert n == 600 * 599 // 2


def test_feature_prior_frequency():
    _, _, truth = make_relational(2000, 10, density=0.3, random_state=4)
    _assert_binomial(truth.latent_features.ravel(), 0.3, "rho")


def test_edge_cases():
    X, y, truth = make_relational(2, 1, random_state=0)
    assert_array_equal(X, [[0, 1]])
    assert y.shape == (1,)
    # density 0: nobody has a feature, every pair has probability Phi(w0)
    _, _, truth = make_relational(20, 3, density=0.0, intercept=0.5, random_state=0)
    assert not truth.latent_features.any()
    assert_allclose(truth.link_probability, ndtr(0.5))
    # density 1: everybody shares every feature
    _, _, truth = make_relational(20, 3, density=1.0, random_state=0)
    assert truth.latent_features.all()
    assert_allclose(truth.link_probability, ndtr(-1.0 + truth.weights.sum()))
    # extreme intercepts: no links / all links
    _, y, _ = make_relational(
        30, 2, weights=[0.0, 0.0], intercept=-40.0, random_state=0
    )
    assert not y.any()
    _, y, _ = make_relational(30, 2, weights=[0.0, 0.0], intercept=40.0, random_state=0)
    assert y.all()


def test_memory_light():
    """No (N, N, D) or dense (N, N) float array: peak far below N * N * D bytes."""
    n, d = 800, 40
    make_relational(50, 2, random_state=0)  # warm up imports
    tracemalloc.start()
    try:
        X, y, truth = make_relational(n, d, random_state=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    outputs = X.nbytes + y.nbytes + truth.link_probability.nbytes
    assert peak < outputs + 16 * 1024 * 1024
    assert peak < n * n * d  # 25.6 MB; an (N, N, D) bool array alone is that


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_entities": 1},
        {"n_entities": 0},
        {"n_entities": 2.5},
        {"n_entities": "10"},
        {"n_components": 0},
        {"density": -0.1},
        {"density": 1.5},
        {"density": float("nan")},
        {"intercept": float("nan")},
        {"intercept": float("inf")},
        {"intercept": "a"},
        {"weight_scale": 0.0},
        {"weight_scale": -1.0},
        {"weights": [1.0, 2.0]},  # n_components = 5
        {"weights": [[1.0] * 4]},  # neither (D, D), (R, D) nor (R, D, D)
        {"weights": np.ones((2, 5, 5))},  # n_relations = 1
        {"n_relations": 0},
        {"directed": "yes"},
        {"weights": [1.0, 1.0, float("nan"), 1.0, 1.0]},
        {"weights": ["a", "b", "c", "d", "e"]},
        {"weights": 1.0},
        {"random_state": "seed"},
    ],
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        make_relational(**kwargs)


@pytest.mark.parametrize("full", [False, True])
def test_directed_multi_relational_rows_and_probabilities(full):
    """Every ordered pair once per relation, with Phi(b + z_i^T W_r z_j)."""
    n, d, R = 15, 3, 2
    X, y, truth = make_relational(
        n, d, directed=True, n_relations=R, full_weights=full, random_state=3
    )
    assert X.shape == (R * n * (n - 1), 3) and y.shape == (X.shape[0],)
    assert len({tuple(row) for row in X.tolist()}) == X.shape[0]
    assert np.all(X[:, 0] != X[:, 1])
    Wm = truth.weight_matrices
    assert Wm.shape == (R, d, d)
    Z = truth.latent_features.astype(float)
    dense = ndtr(truth.intercept + np.einsum("id,rde,je->rij", Z, Wm, Z))
    assert_allclose(
        truth.link_probability, dense[X[:, 2], X[:, 0], X[:, 1]], rtol=1e-12
    )
    off = ~np.eye(d, dtype=bool)
    assert np.any(Wm[:, off] != 0) == full
    if full:  # directed: P[i, j] != P[j, i] somewhere
        assert not np.allclose(dense, dense.transpose(0, 2, 1))
    _assert_binomial(y, truth.link_probability.mean(), "overall")


def test_weight_shapes_are_read_as_documented():
    d = 3
    full = np.arange(9.0).reshape(3, 3)
    _, _, t = make_relational(10, d, weights=full, n_relations=3, random_state=0)
    assert_array_equal(t.weight_matrices, np.tile(full, (3, 1, 1)))
    per_relation = np.arange(6.0).reshape(2, 3)
    _, _, t = make_relational(
        10, d, weights=per_relation, n_relations=2, random_state=0
    )
    assert_array_equal(t.weight_matrices[1], np.diag(per_relation[1]))
    # passing weights leaves Z unchanged
    _, _, t2 = make_relational(10, d, n_relations=2, random_state=0)
    assert_array_equal(t.latent_features, t2.latent_features)


def test_docstring_examples():
    result = doctest.testmod(_relational_generator, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
