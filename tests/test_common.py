"""scikit-learn's common estimator checks on every skbinvi estimator."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbinvi import NoisyORFactorizer

ESTIMATORS = [
    NoisyORFactorizer(n_components=3, hidden_layer_sizes=(8,), max_iter=5,
                      n_score_samples=20, random_state=0),
    NoisyORFactorizer(n_components=3, inference="avi", hidden_layer_sizes=(8,),
                      max_iter=5, n_score_samples=20, random_state=0),
    NoisyORFactorizer(n_components=3, inference="svi", max_iter=5, n_transform_steps=10,
                      n_score_samples=20, random_state=0),
    NoisyORFactorizer(n_components=3, inference="jj", max_iter=5, n_transform_steps=10,
                      n_score_samples=20, random_state=0),
]


def _expected_failed_checks(estimator):
    return {}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
