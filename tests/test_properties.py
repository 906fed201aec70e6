"""Property-based tests of the input handling of every estimator and method.

Hypothesis throws random shapes, dtypes, sparsity, NaN/inf, extreme scales and
random parameters at ``fit`` and at every other public method (``partial_fit``,
``transform``, ``score``, ``elbo``, the predictions). The only accepted outcomes
are finite output (labels from ``classes_`` for ``predict``) or a
``ValueError``/``TypeError`` whose message is not empty: never another exception
(ZeroDivisionError, LinAlgError, IndexError, a Numba error) and never a NaN.
Warnings (ConvergenceWarning, unused latent features) are allowed.

The draws are weighted towards valid inputs, so that most examples get past the
input checks and exercise the fits; the invalid ones (empty arrays, NaN/inf,
negative values, bad labels) are still drawn in every run. The fixed
regression cases of the same kind (ids of 10**9 and 2**62, 2,000,000 mostly
empty columns) are in tests/test_relational.py and
tests/test_experts_estimator.py.
"""

import warnings
from unittest import mock

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skbinvi import (
    DiversityMixtureOfExperts,
    LatentFeatureRelational,
    NoisyORFactorizer,
)
from skbinvi.experts import _estimator as experts_estimator

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    database=None,
)

SCALES = [1.0, 1.0, 0.0, 1e-300, 1e-8, 3.0, 1e8, 1e150]
# mostly no special value
SPECIALS = [None, None, None, None, np.nan, np.inf, -np.inf, -1.0]


@st.composite
def matrices(draw, max_rows=30, max_cols=12):
    """A random matrix: shape, dtype, density, scale, a special value, sparse or not."""
    # empty shapes are drawn, but rarely
    n = draw(st.sampled_from([2] * 3 + list(range(1, max_rows + 1)) + [0]))
    p = draw(st.sampled_from([2] * 3 + list(range(1, max_cols + 1)) + [0]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.RandomState(seed)
    density = draw(st.sampled_from([0.3, 1.0, 0.05, 0.0]))
    scale = draw(st.sampled_from(SCALES))
    values = rng.random_sample((n, p)) * (rng.random_sample((n, p)) < density) * scale
    if draw(st.booleans()):
        values = np.round(values)
    special = draw(st.sampled_from(SPECIALS))
    if special is not None and n and p:
        values[rng.randint(n), rng.randint(p)] = special
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int64, np.float16]))
    with np.errstate(invalid="ignore", over="ignore"):
        if np.issubdtype(dtype, np.integer):
            if not np.all(np.isfinite(values)) or np.abs(values).max(initial=0) > 1e15:
                dtype = np.float64
        values = values.astype(dtype)
    if draw(st.booleans()) and values.size and values.dtype != np.float16:
        values = sp.csr_matrix(values)
    return values


def _labels(draw, n):
    kind = draw(st.sampled_from(["binary", "binary", "binary", "str", "multiclass",
                                 "single", "float"]))
    rng = np.random.RandomState(draw(st.integers(0, 2**16)))
    if kind == "binary":
        return rng.randint(2, size=n)
    if kind == "multiclass":
        return rng.randint(3, size=n)
    if kind == "single":
        return np.zeros(n, dtype=int)
    if kind == "float":
        return rng.normal(size=n)
    return np.array(["a", "b"])[rng.randint(2, size=n)]


def _check_output(estimator, name, value):
    """Finite numbers, or, for ``predict``, labels the estimator knows."""
    if name == "predict":
        assert np.isin(np.asarray(value), estimator.classes_).all(), value
        return
    if sp.issparse(value):
        value = value.data
    value = np.asarray(value, dtype=np.float64)
    assert np.all(np.isfinite(value)), (name, value)


def _call(estimator, name, args):
    """One method call: its output, or None after a clear ValueError/TypeError."""
    try:
        return getattr(estimator, name)(*args)
    except (ValueError, TypeError) as exc:
        assert str(exc), (name, type(exc))
        return None


def _exercise(estimator, X, y, methods):
    """fit, then the other methods: finite output or a clear error."""
    fit_args = (X,) if y is None else (X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning, unused latents
        if _call(estimator, "fit", fit_args) is None:
            return
        for name, args in methods:
            if not hasattr(estimator, name):
                # scikit-learn's available_if: e.g. no partial_fit with
                # inference="jj" (the chained AttributeError says why)
                continue
            out = _call(estimator, name, args)
            if out is not None and name not in ("fit", "partial_fit"):
                _check_output(estimator, name, out)


@SETTINGS
@given(
    X=matrices(),
    inference=st.sampled_from(["acp", "avi", "svi", "jj"]),
    n_components=st.integers(1, 4),
    learning_rate=st.sampled_from([1e-2, 1e-3, 10.0, 1e3]),
    tol=st.sampled_from([None, 1e-3, 0.0]),
    binarize=st.sampled_from([0.0, 0.5, None]),
    n_mc_samples=st.sampled_from([3, 1]),
    batch_size=st.sampled_from(["auto", 1, 7]),
    posterior=st.sampled_from(["scaled_logit", "logit", "probability"]),
    n_init=st.sampled_from([1, 2]),
    init=st.sampled_from(["data", "k-means++", "cooccurrence"]),
    prior_smoothing=st.sampled_from([0.0, 0.01, 100.0]),
)
def test_noisy_or_property(X, inference, n_components, learning_rate, tol, binarize,
                           n_mc_samples, batch_size, posterior, n_init, init,
                           prior_smoothing):
    model = NoisyORFactorizer(
        n_components, inference=inference, hidden_layer_sizes=(4,), max_iter=2,
        learning_rate=learning_rate, tol=tol, binarize=binarize,
        n_mc_samples=n_mc_samples, n_elbo_samples=5,
        batch_size=batch_size, posterior=posterior, n_init=n_init,
        init=init, prior_smoothing=prior_smoothing, random_state=0,
    )
    methods = [("transform", (X,)), ("score", (X,)), ("score_samples", (X,)),
               ("elbo", (X,)), ("fit_transform", (X,)), ("partial_fit", (X,)),
               ("transform", (X,))]
    _exercise(model, X, None, methods)


@st.composite
def pairs(draw):
    """Pairs (or triples) of entity ids, mostly valid, and their labels."""
    n = draw(st.sampled_from([12] * 3 + list(range(1, 31)) + [0]))
    rng = np.random.RandomState(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["ok"] * 6 + ["triples"] * 2 + [
        "huge", "float", "negative", "nan", "self", "shape"]))
    high = draw(st.sampled_from([3, 10, 40]))
    X = rng.randint(high, size=(n, 2)).astype(np.int64)
    if kind == "triples":
        X = np.column_stack([X, rng.randint(draw(st.sampled_from([1, 3])), size=n)])
    elif kind == "huge" and n:
        X[0, 1] = draw(st.sampled_from([10**9, 2**62]))
    elif kind == "float":
        X = X + rng.random_sample(X.shape) * draw(st.sampled_from([0.0, 0.5]))
    elif kind == "negative" and n:
        X[0, 0] = -1
    elif kind == "nan" and n:
        X = X.astype(np.float64)
        X[0, 0] = np.nan
    elif kind == "self" and n:
        X[0, 1] = X[0, 0]
    elif kind == "shape":
        X = rng.randint(high, size=(n, draw(st.sampled_from([1, 4]))))
    # avoid self-pairs except where asked for
    if kind != "self" and X.ndim == 2 and X.shape[1] >= 2 and n:
        same = X[:, 0] == X[:, 1]
        X[same, 1] = X[same, 0] + 1
    y = _labels(draw, n)
    return X, y


@SETTINGS
@given(
    data=pairs(),
    inference_weights=st.sampled_from([("mcvi", "full"), ("mcvi", "diagonal"),
                                       ("cavi", "diagonal"), ("score", "full"),
                                       ("score", "diagonal"), ("cavi", "full")]),
    n_components=st.integers(1, 3),
    init=st.sampled_from(["auto", "random", "spectral"]),
    alpha=st.sampled_from([1.0, 1e-8, 1e8]),
    stochastic=st.sampled_from([None, None, "batch", "nonlinks"]),
)
def test_relational_property(data, inference_weights, n_components, init, alpha,
                             stochastic):
    X, y = data
    inference, weights = inference_weights
    extra = {}
    if stochastic == "batch":
        extra = dict(batch_size=2)
    elif stochastic == "nonlinks":
        extra = dict(unlisted_pairs="nonlinks")
    model = LatentFeatureRelational(
        n_components, inference=inference, weights=weights, init=init,
        alpha=alpha, max_iter=2, n_mc_samples=3, random_state=0, **extra,
    )
    methods = [("predict_proba", (X,)), ("predict", (X,)),
               ("decision_function", (X,)), ("transform", (X,)),
               ("score", (X, y)), ("elbo", (X, y)), ("partial_fit", (X, y)),
               ("predict_proba", (X,))]
    _exercise(model, X, y, methods)


@SETTINGS
@given(
    X=matrices(max_rows=25, max_cols=6),
    data=st.data(),
    inference=st.sampled_from(["vi", "pr", "mcmc"]),
    prior=st.sampled_from(["mabn", "gaussian"]),
    n_components=st.integers(1, 3),
    init=st.sampled_from(["bmemg", "random"]),
    diversity_strength=st.sampled_from([1.0, 0.0, 100.0]),
    fit_intercept=st.booleans(),
)
def test_experts_property(X, data, inference, prior, n_components, init,
                          diversity_strength, fit_intercept):
    y = _labels(data.draw, X.shape[0])
    if inference == "pr":
        prior = "mabn"  # pr regularizes the MABN posterior only (a ValueError)
    model = DiversityMixtureOfExperts(
        n_components, inference=inference, prior=prior,
        diversity_strength=diversity_strength, fit_intercept=fit_intercept,
        max_iter=2, random_state=0,
    )
    if inference == "mcmc":
        model.set_params(burn_in=4, n_mcmc_samples=4)
    methods = [("predict_proba", (X,)), ("predict", (X,)), ("transform", (X,)),
               ("score", (X, y)), ("elbo", (X, y))]
    # the start is a private setting (user guide, "Advanced settings")
    with mock.patch.object(experts_estimator, "_INIT", init):
        _exercise(model, X, y, methods)
