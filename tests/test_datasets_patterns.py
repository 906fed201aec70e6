"""make_noisy_or_patterns: noisy-OR data with known image-like causes.

Also pins make_noisy_or's output, whose sampler it shares.
"""

import doctest
import hashlib

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from skbinvi.datasets import _samples_generator, make_noisy_or, make_noisy_or_patterns
from skbinvi.datasets._samples_generator import _default_patterns


def _digest(X, truth):
    h = hashlib.sha256()
    dense = X.toarray() if sp.issparse(X) else X
    h.update(np.ascontiguousarray(dense, dtype="<f8").tobytes())
    for key in ("components", "leak", "prior"):
        h.update(np.ascontiguousarray(truth[key], dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(truth.latent, dtype="i1").tobytes())
    return h.hexdigest()


# SHA-256 of make_noisy_or's outputs (X, components, leak, prior, latent),
# recorded with the implementation *before* its sampler was factored out into
# _sample_noisy_or: the refactoring must keep every bit and the random stream.
_MAKE_NOISY_OR_DIGESTS = [
    (
        dict(n_samples=200, n_features=30, n_components=4, random_state=0),
        "dcd92b584d015c823279d623b730f5155da51062eed921435faf91208ede5866",
    ),
    (
        dict(n_samples=300, n_features=40, n_components=4, density=0.2,
             sparse=True, random_state=1),
        "eba6730ef40c481a6a45a97de6b46c5e7749b8789d939d723e7fb9317c85cfdd",
    ),
    (
        dict(n_samples=500, n_features=64, n_components=8, prior=0.3,
             weight=1.5, leak=0.05, random_state=42),
        "62f0b798556dd2ee5ab4e6d208df7a602e77711de4e8b32782f1eaf445260f48",
    ),
    (
        dict(n_samples=50, n_features=10, n_components=3, leak=0.0, random_state=7),
        "c77eb0fa6a1c1ab7c8d66fb089e7a4bcf42cd61cfde02ebae5008df53b2ace43",
    ),
]


@pytest.mark.parametrize("params, digest", _MAKE_NOISY_OR_DIGESTS)
def test_make_noisy_or_is_bit_identical_to_recorded_output(params, digest):
    X, truth = make_noisy_or(**params)
    assert sp.issparse(X) == params.get("sparse", False)
    assert X.dtype == np.float64 and truth.latent.dtype == np.int8
    assert _digest(X, truth) == digest


def test_default_patterns_are_distinct_with_small_overlaps():
    names, masks = _default_patterns()
    assert masks.shape == (8, 8, 8) and masks.dtype == bool
    assert len(set(names)) == 8
    flat = masks.reshape(8, -1).astype(int)
    # all distinct, none empty
    assert len({m.tobytes() for m in flat}) == 8
    assert np.all(flat.sum(axis=1) >= 6)
    overlap = flat @ flat.T
    np.fill_diagonal(overlap, 0)
    assert overlap.max() <= 2
    # each pattern has at least 6 pixels no other pattern covers
    private = (flat == 1) & (flat.sum(axis=0) == 1)
    assert private.sum(axis=1).min() >= 6
    # the picture in the docstring is the one used
    doc = _samples_generator.make_noisy_or_patterns.__doc__
    for name in names:
        assert name in doc


def test_shapes_types_and_ground_truth():
    X, truth = make_noisy_or_patterns(300, weight=1.5, leak=0.02, random_state=0)
    assert isinstance(X, np.ndarray) and X.dtype == np.float64
    assert X.shape == (300, 64)
    assert set(np.unique(X)) <= {0.0, 1.0}
    names, masks = _default_patterns()
    assert truth.image_shape == (8, 8)
    assert truth.pattern_names == names
    assert_array_equal(truth.patterns, masks)
    assert truth.components.shape == (8, 64) and truth.components.dtype == np.float64
    assert_array_equal(truth.components, 1.5 * masks.reshape(8, 64))
    assert_allclose(truth.leak, np.full(64, -np.log(1 - 0.02)))
    assert_array_equal(truth.prior, np.full(8, 0.2))
    assert truth.latent.shape == (300, 8) and truth.latent.dtype == np.int8
    assert set(np.unique(truth.latent)) <= {0, 1}

    Xs, truth_s = make_noisy_or_patterns(300, weight=1.5, leak=0.02, sparse=True,
                                         random_state=0)
    assert isinstance(Xs, sp.csr_matrix) and Xs.dtype == np.float64
    assert Xs.has_sorted_indices and np.all(Xs.data == 1.0)
    assert_array_equal(Xs.toarray(), X)
    assert_array_equal(truth_s.latent, truth.latent)


def test_deterministic_for_fixed_random_state():
    X1, t1 = make_noisy_or_patterns(200, random_state=3)
    X2, t2 = make_noisy_or_patterns(200, random_state=np.random.RandomState(3))
    assert_array_equal(X1, X2)
    assert_array_equal(t1.latent, t2.latent)
    X3, _ = make_noisy_or_patterns(200, random_state=4)
    assert not np.array_equal(X1, X3)


def test_without_noise_images_are_the_or_of_active_patterns():
    """leak = 0 and a huge weight: x_n is exactly the union of its patterns."""
    X, truth = make_noisy_or_patterns(500, weight=50.0, leak=0.0, random_state=1)
    union = (truth.latent @ truth.patterns.reshape(8, -1)) > 0
    assert_array_equal(X, union.astype(np.float64))


def test_frequencies_given_z_match_noisy_or_probabilities():
    r"""Empirical P(x_i = 1 | z) against 1 - exp(-theta_i0 - sum_k theta_ik z_k).

    With a common weight w, the model's probability for cell (n, i) depends
    only on m = number of active causes whose pattern covers pixel i:
    p_m = 1 - exp(-theta_0 - m w). Cells are pooled (a) by m and (b) by (pixel,
    m). Tolerance: 4.5 binomial standard errors sqrt(p (1 - p) / count) for
    every pooled frequency and 5 for every (pixel, m) group with at least 100
    cells (two-sided normal tail 7e-6 and 6e-7 per comparison).
    """
    weight, leak = 1.0, 0.05
    X, truth = make_noisy_or_patterns(
        20000, prior=0.3, weight=weight, leak=leak, random_state=0
    )
    masks = truth.patterns.reshape(8, -1).astype(np.int64)
    m = truth.latent.astype(np.int64) @ masks  # (n_samples, 64): covering causes
    theta_0 = -np.log1p(-leak)
    assert_allclose(truth.leak, theta_0)
    # the model's probabilities, from the ground truth returned
    p_model = 1.0 - np.exp(-truth.leak - truth.latent @ truth.components)
    assert_allclose(p_model, 1.0 - np.exp(-theta_0 - weight * m))

    seen_m = np.unique(m)
    assert {0, 1, 2} <= set(seen_m.tolist())
    for value in seen_m:
        cells = m == value
        count = cells.sum()
        p = 1.0 - np.exp(-theta_0 - weight * value)
        se = np.sqrt(p * (1 - p) / count)
        assert abs(X[cells].mean() - p) < 4.5 * se, (value, count)

    n_checked = 0
    for i in range(64):
        for value in np.unique(m[:, i]):
            rows = m[:, i] == value
            count = rows.sum()
            if count < 100:
                continue
            p = 1.0 - np.exp(-theta_0 - weight * value)
            se = np.sqrt(p * (1 - p) / count)
            assert abs(X[rows, i].mean() - p) < 5 * se, (i, value, count)
            n_checked += 1
    assert n_checked >= 64 + 56  # every pixel with m = 0, pattern pixels with m = 1

    # causes: independent Bernoulli(mu_k)
    se = np.sqrt(0.3 * 0.7 / 20000)
    assert np.abs(truth.latent.mean(axis=0) - 0.3).max() < 4.5 * se


def test_per_cause_prior_and_custom_patterns():
    """A 6 x 6 grid with 3 user patterns and one prior per cause."""
    patterns = np.zeros((3, 6, 6), dtype=int)
    patterns[0, 0, :] = 1
    patterns[1, :, 0] = 1
    patterns[2, 2:4, 2:4] = 1
    prior = [0.1, 0.5, 0.9]
    X, truth = make_noisy_or_patterns(
        8000, patterns=patterns, prior=prior, weight=3.0, random_state=0,
        sparse=True,
    )
    assert X.shape == (8000, 36)
    assert truth.image_shape == (6, 6)
    assert truth.pattern_names == ["pattern 0", "pattern 1", "pattern 2"]
    assert truth.patterns.dtype == bool
    assert_array_equal(truth.components, 3.0 * patterns.reshape(3, 36))
    assert_array_equal(truth.prior, prior)
    se = np.sqrt(0.25 / 8000)
    assert np.abs(truth.latent.mean(axis=0) - prior).max() < 4.5 * se
    # a pixel covered by no pattern is on only through the leak (0.01)
    free = ~patterns.reshape(3, 36).any(axis=0)
    freq = X.toarray()[:, free].mean()
    assert abs(freq - 0.01) < 4.5 * np.sqrt(0.01 * 0.99 / (8000 * free.sum()))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=2.5), "n_samples"),
        (dict(weight=0.0), "weight"),
        (dict(weight=-1.0), "weight"),
        (dict(leak=1.0), "leak"),
        (dict(leak=-0.1), "leak"),
        (dict(prior=1.5), "prior"),
        (dict(prior=[0.5] * 7), "prior"),
        (dict(prior=[0.5] * 7 + [1.2]), "prior"),
        (dict(sparse="yes"), "sparse"),
        (dict(random_state="seed"), "random_state"),
        (dict(patterns=np.ones((8, 8))), "patterns"),
        (dict(patterns=np.full((2, 3, 3), 2)), "patterns"),
        (dict(patterns=np.zeros((2, 3, 3))), "empty"),
        (dict(patterns=np.zeros((0, 3, 3))), "patterns"),
        (dict(patterns=[[["a"]]]), "patterns"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_noisy_or_patterns(**kwargs)


def test_docstring_examples():
    result = doctest.testmod(_samples_generator,
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
