"""scikit-learn's common estimator checks on every skbinvi estimator."""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbinvi import (
    DiversityMixtureOfExperts,
    LatentFeatureRelational,
    NoisyORFactorizer,
)

ESTIMATORS = [
    NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), max_iter=5,
                      n_elbo_samples=20, random_state=0),
    # (init="k-means++" here, so that scikit-learn's checks also cover it)
    NoisyORFactorizer(n_components=3, inference="avi", hidden_layer_sizes=(8,),
                      max_iter=5, n_elbo_samples=20, init="k-means++", random_state=0),
    # (and init="cooccurrence" here)
    NoisyORFactorizer(n_components=3, inference="svi", max_iter=5, n_elbo_samples=20,
                      init="cooccurrence", random_state=0),
    # (and prior_smoothing here)
    NoisyORFactorizer(n_components=3, inference="jj", max_iter=5, n_elbo_samples=20,
                      prior_smoothing=0.01, random_state=0),
] + [
    LatentFeatureRelational(n_components=3, inference="mcvi", max_iter=5,
                            random_state=0),
    LatentFeatureRelational(n_components=3, inference="cavi", weights="diagonal",
                            max_iter=5, random_state=0),
    LatentFeatureRelational(n_components=3, inference="cavi", max_iter=5,
                            random_state=0),
    LatentFeatureRelational(n_components=3, inference="score", max_iter=5,
                            random_state=0),
]
# DiversityMixtureOfExperts: its common checks (tiny settings, every inference
# method) run in tests/test_experts_estimator.py::test_sklearn_common_checks.

# The common checks feed real-valued data with n_features != 2; the relational
# model takes pairs of integer entity ids, X of shape (n_pairs, 2). Every
# property these checks test is tested on pair data in tests/test_relational.py
# (the test named after the reason).
_NOT_PAIRS = ("check data have n_features != 2; X must be (n_pairs, 2) entity ids "
              "(pair-data version in tests/test_relational.py)")
_NOT_IDS = ("check data are real-valued; X must hold integer entity ids "
            "(pair-data version in tests/test_relational.py)")
_RELATIONAL_XFAIL = {
    **dict.fromkeys([
        "check_fit_score_takes_y", "check_dont_overwrite_parameters",
        "check_n_features_in_after_fitting", "check_estimators_dtypes",
        "check_dtype_object", "check_pipeline_consistency", "check_estimators_nan_inf",
        "check_estimators_pickle", "check_f_contiguous_array_estimator",
        "check_supervised_y_2d", "check_non_transformer_estimators_n_iter",
        "check_transformer_data_not_an_array", "check_transformer_general",
        "check_transformer_preserve_dtypes", "check_transformer_n_iter",
        "check_methods_sample_order_invariance", "check_methods_subset_invariance",
        "check_fit2d_1feature", "check_dict_unchanged", "check_fit2d_predict1d",
        "check_positive_only_tag_during_fit",
    ], _NOT_PAIRS),
    **dict.fromkeys([
        "check_estimators_overwrite_params", "check_estimators_fit_returns_self",
        "check_readonly_memmap_input", "check_classifiers_classes",
        "check_classifiers_train", "check_decision_proba_consistency",
        "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in",
        "check_estimators_partial_fit_n_features",
    ], _NOT_IDS),
    "check_classifier_data_not_an_array": (
        "its random integer pairs include self-pairs (i, i), which the model "
        "rejects with a ValueError"),
}


def _expected_failed_checks(estimator):
    if isinstance(estimator, LatentFeatureRelational):
        return _RELATIONAL_XFAIL
    return {}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# one small instance of each estimator, for the tests of shared behaviour
_EACH_SMALL_ESTIMATOR = pytest.mark.parametrize(
    "estimator",
    [NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), n_elbo_samples=20),
     LatentFeatureRelational(n_components=3),
     DiversityMixtureOfExperts(n_components=2)],
    ids=lambda e: type(e).__name__,
)


def _tiny_fit_data(estimator):
    """Small valid training data for each estimator."""
    from sklearn.datasets import make_classification

    from skbinvi.datasets import make_relational

    if isinstance(estimator, NoisyORFactorizer):
        return ((np.random.RandomState(0).uniform(size=(60, 12)) < 0.3).astype(float),
                None)
    if isinstance(estimator, LatentFeatureRelational):
        X, y, _ = make_relational(30, 3, random_state=0)
        return X, y
    return make_classification(80, 4, n_informative=3, n_redundant=0, random_state=0)


@_EACH_SMALL_ESTIMATOR
def test_tol_none_runs_max_iter_without_convergence_warning(estimator):
    """tol=None means one thing in every estimator: a fixed budget of max_iter
    iterations, no convergence test, no ConvergenceWarning."""
    import warnings

    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning

    X, y = _tiny_fit_data(estimator)
    model = clone(estimator).set_params(tol=None, max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model.fit(X) if y is None else model.fit(X, y)
    assert model.n_iter_ == 3 and not model.converged_
    assert model.elbo_history_.shape == (3,) and np.isfinite(model.elbo_)
    # with a float tol the same short run warns
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        m = clone(model).set_params(tol=1e-12)
        m.fit(X) if y is None else m.fit(X, y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@_EACH_SMALL_ESTIMATOR
def test_warm_fits_with_early_stopping_share_the_split_and_the_best(estimator):
    """Warm fits with early stopping hold out the same rows and keep the best
    held-out state over all of them: best_validation_score_ is the best of
    validation_scores_ (it was the best of the last fit's, on other rows)."""
    from sklearn.base import clone

    X, y = _tiny_fit_data(estimator)
    model = clone(estimator).set_params(
        max_iter=4, tol=None, early_stopping=True, n_iter_no_change=50,
        warm_start=True, random_state=0)
    fit = (lambda: model.fit(X)) if y is None else (lambda: model.fit(X, y))
    fit()
    seed = model._validation_split
    fit()
    assert model._validation_split == seed and model.n_iter_ == 8
    assert model.best_validation_score_ == np.nanmax(model.validation_scores_)


@_EACH_SMALL_ESTIMATOR
def test_equally_seeded_random_state_instances_give_the_same_fit(estimator):
    """random_state=RandomState(7) twice: the same fit, ELBO included (the
    relational model seeded its ELBO's common random numbers from the
    operating system when given an instance)."""
    from sklearn.base import clone

    X, y = _tiny_fit_data(estimator)
    fits = []
    for _ in range(2):
        model = clone(estimator).set_params(
            max_iter=3, tol=None, random_state=np.random.RandomState(7))
        model.fit(X) if y is None else model.fit(X, y)
        fits.append(model)
    assert_array_equal(fits[0].elbo_history_, fits[1].elbo_history_)
    assert fits[0].elbo_ == fits[1].elbo_


@_EACH_SMALL_ESTIMATOR
def test_n_active_components_counts_the_latent_variables_in_use(estimator):
    """One attribute, n_active_components_, in every estimator: the latent
    variables in use by the estimator's own criterion, recomputed here from
    the fitted attributes, after fit and again after a warm fit that moved
    the model."""
    from sklearn.base import clone

    X, y = _tiny_fit_data(estimator)
    model = clone(estimator).set_params(max_iter=3, tol=None, random_state=0,
                                        warm_start=True)
    K = model.n_components
    for _ in range(2):
        model.fit(X) if y is None else model.fit(X, y)
        if isinstance(model, NoisyORFactorizer):
            expected = int(np.sum(model.prior_ > 0.01))
        elif isinstance(model, LatentFeatureRelational):
            has_pairs = np.bincount(X[:, :2].ravel(),
                                    minlength=model.n_entities_) > 0
            q = model.latent_features_[has_pairs]
            expected = int(np.sum(q.max(axis=0) - q.min(axis=0) >= 0.5))
        else:
            expected = np.maximum(1, np.sum(model.expert_usage_ >= 0.01, axis=1))
            assert model.n_active_components_.dtype.kind == "i"
        assert_array_equal(model.n_active_components_, expected)
        assert np.all((0 <= model.n_active_components_)
                      & (model.n_active_components_ <= K))


_STRUCTURE_CASES = [
    (NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), n_elbo_samples=20,
                       max_iter=2), {"n_components": 5}),
    (NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), n_elbo_samples=20,
                       max_iter=2), {"n_components": 1}),
    (NoisyORFactorizer(n_components=3, inference="svi", n_elbo_samples=20,
                       max_iter=2), {"inference": "acp"}),
    (NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), n_elbo_samples=20,
                       max_iter=2), {"hidden_layer_sizes": (4,)}),
    (LatentFeatureRelational(n_components=3, max_iter=3), {"n_components": 5}),
    (LatentFeatureRelational(n_components=3, max_iter=3), {"weights": "diagonal"}),
    (DiversityMixtureOfExperts(n_components=3, max_iter=3), {"n_components": 5}),
    (DiversityMixtureOfExperts(n_components=3, max_iter=3), {"inference": "mcmc"}),
    (DiversityMixtureOfExperts(n_components=3, max_iter=3), {"prior": "gaussian"}),
    (DiversityMixtureOfExperts(n_components=3, max_iter=3), {"fit_intercept": False}),
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(("estimator", "change"), _STRUCTURE_CASES,
                         ids=lambda v: type(v).__name__ if hasattr(v, "fit") else
                         "-".join(f"{k}={w}" for k, w in v.items()))
def test_a_structural_parameter_set_after_fit_is_a_clear_error(estimator, change):
    """Parameters that fix the fitted shapes (n_components, the inference
    method, the encoder's layers, the form of the weights) changed by
    set_params after fit: predicting, warm-starting and partial_fit raise a
    ValueError naming the parameter, where the fitted arrays were read with
    the new shapes before (uninitialized memory in transform, out-of-bounds
    writes that crashed the process, bare IndexError/AttributeError)."""
    from sklearn.base import clone

    X, y = _tiny_fit_data(estimator)
    args = (X,) if y is None else (X, y)
    model = clone(estimator).set_params(random_state=0).fit(*args)
    expected = model.predict_proba(X) if y is not None else model.transform(X)
    name, value = next(iter(change.items()))
    model.set_params(**change)
    match = re.escape(f"but now has {name}={value!r}")
    predict = model.transform if y is None else model.predict_proba
    with pytest.raises(ValueError, match=match):
        predict(X)
    with pytest.raises(ValueError, match=match):
        model.elbo(*args) if y is not None else model.score(X)
    with pytest.raises(ValueError, match="warm_start=True continues"):
        model.set_params(warm_start=True).fit(*args)
    if hasattr(model, "partial_fit") and isinstance(model, NoisyORFactorizer) \
            and model.inference != "jj":
        with pytest.raises(ValueError, match="partial_fit continues"):
            model.partial_fit(X)
    # set back, the fitted model is usable again, unchanged
    model.set_params(**{name: estimator.get_params()[name]}, warm_start=False)
    np.testing.assert_array_equal(
        model.predict_proba(X) if y is not None else model.transform(X), expected)
    # a fresh fit with the new value works
    model.set_params(**change).fit(*args)
    assert model.n_iter_ >= 1


_COUNT_PARAMETERS = [
    (NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), n_elbo_samples=20),
     ["n_components", "max_iter", "n_mc_samples", "n_init"]),
    (LatentFeatureRelational(n_components=3),
     ["n_components", "max_iter", "n_mc_samples", "n_init"]),
    (DiversityMixtureOfExperts(n_components=2),
     ["n_components", "max_iter", "n_mcmc_samples", "burn_in"]),
]


@pytest.mark.parametrize(("estimator", "names"), _COUNT_PARAMETERS,
                         ids=lambda v: type(v).__name__ if hasattr(v, "fit") else "")
@pytest.mark.parametrize("flag", [True, False, np.True_])
def test_a_boolean_is_not_a_count(estimator, names, flag):
    """``bool`` is an ``Integral``, so scikit-learn's ``Interval(Integral, ...)``
    let ``n_components=True`` through to a later "an integer is required"
    TypeError from NumPy; every count parameter now refuses booleans."""
    from sklearn.base import clone

    X, y = _tiny_fit_data(estimator)
    for name in names:
        model = clone(estimator).set_params(**{name: flag})
        with pytest.raises(ValueError, match=rf"'{name}' parameter.*not a bool"):
            model.fit(X) if y is None else model.fit(X, y)


@pytest.mark.parametrize("estimator", [NoisyORFactorizer(), LatentFeatureRelational(),
                                       DiversityMixtureOfExperts()],
                         ids=lambda e: type(e).__name__)
def test_every_integer_parameter_refuses_booleans(estimator):
    """No parameter constraint of any estimator is scikit-learn's bare
    ``Interval(Integral, ...)`` (which accepts True): every integer range is
    an ``IntInterval``, and each refuses True and False while accepting its
    lower bound."""
    from numbers import Integral

    from sklearn.utils._param_validation import Interval

    from skbinvi._validation import IntInterval

    n_checked = 0
    for name, constraints in type(estimator)._parameter_constraints.items():
        for c in constraints:
            if isinstance(c, Interval) and c.type is Integral:
                assert isinstance(c, IntInterval), name
                assert not c.is_satisfied_by(True) and not c.is_satisfied_by(False)
                low = c.left if c.closed in ("left", "both") else c.left + 1
                assert c.is_satisfied_by(low) and c.is_satisfied_by(np.int64(low))
                n_checked += 1
    assert n_checked >= 4


@pytest.mark.parametrize(("name", "value"), [
    ("diversity_strength", 1.01e8), ("diversity_strength", 1e300),
    ("prior_std", 1e101), ("prior_std", 1e200), ("prior_std", 1e-101),
    ("prior_std", 1e-300)])
@pytest.mark.parametrize("inference", ["vi", "mcmc", "gaussian"])
def test_extreme_prior_scales_are_a_clear_error(name, value, inference):
    """diversity_strength >= 2e9 made SciPy's ive return NaN, after which the
    Bessel series asked for memory proportional to kappa (201 GiB at 2e9; the
    "mcmc" process was killed); prior_std = 1e200 overflowed sigma^2 and 1e-300
    leaked divide-by-zero warnings. The documented ranges are now checked."""
    X, y = _tiny_fit_data(DiversityMixtureOfExperts())
    kw = (dict(prior="gaussian", inference="vi") if inference == "gaussian"
          else dict(inference=inference))
    model = DiversityMixtureOfExperts(n_components=2, max_iter=2, **kw,
                                      **{name: value})
    with pytest.raises(ValueError, match=rf"'{name}' parameter.*range"):
        model.fit(X, y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(("name", "value"), [
    ("diversity_strength", 1e8), ("prior_std", 1e100), ("prior_std", 1e-100)])
@pytest.mark.parametrize("inference", ["vi", "pr", "mcmc", "gaussian"])
def test_prior_scales_at_the_ends_of_their_range_fit(name, value, inference):
    """The ends of the documented ranges fit, with finite results and no
    RuntimeWarning (overflow, divide by zero, invalid value)."""
    import warnings

    X, y = _tiny_fit_data(DiversityMixtureOfExperts())
    kw = (dict(prior="gaussian", inference="vi") if inference == "gaussian"
          else dict(inference=inference))
    model = DiversityMixtureOfExperts(n_components=2, max_iter=2, burn_in=10,
                                      n_mcmc_samples=10, random_state=0, **kw,
                                      **{name: value})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model.fit(X, y)
        proba = model.predict_proba(X)
    final = model.log_joint_ if inference == "mcmc" else model.elbo_
    assert np.all(np.isfinite(proba)) and np.isfinite(final)
