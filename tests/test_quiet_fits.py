"""Healthy default fits are quiet; the README's snippets run and print.

A warning asks the user to act. A default fit on real data that ends well
(the model's prior switched off what the data do not need, the default
number of epochs ran) must not warn: what the fit chose is reported in the
fitted attributes (``n_active_components_``, ``expert_usage_``). Each fit
below runs with every ``UserWarning`` (``ConvergenceWarning`` included)
turned into an error, as ``python -W error::UserWarning`` does.
"""

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbinvi import (
    DiversityMixtureOfExperts,
    LatentFeatureRelational,
    NoisyORFactorizer,
)
from skbinvi.datasets import load_adult, load_binary_mnist, load_kinships, load_reuters

ROOT = Path(__file__).resolve().parents[1]


def _noisy_or(X):
    return NoisyORFactorizer(50, random_state=0).fit(X)


def _mixture(X, y):
    model = make_pipeline(StandardScaler(), DiversityMixtureOfExperts(random_state=0))
    return model.fit(X, y)


def _reuters(categories, text):
    kwargs = {} if categories is None else {"categories": categories}
    return load_reuters(text=text, **kwargs).data


def _digits_parity():
    X, y = load_digits(return_X_y=True)
    return X, y % 2


def _adult_rows():
    X, y = load_adult(return_X_y=True)
    return X[:3000].toarray(), y[:3000]


FITS = {
    "noisy-or reuters bodies": lambda: _noisy_or(_reuters(None, "body")),
    "noisy-or R8": lambda: _noisy_or(_reuters("r8", "body")),
    "noisy-or reuters headlines": lambda: _noisy_or(_reuters(None, "headline")),
    "noisy-or binary mnist": lambda: _noisy_or(load_binary_mnist().data),
    "mixture breast cancer": lambda: _mixture(*load_breast_cancer(return_X_y=True)),
    "mixture digits parity": lambda: _mixture(*_digits_parity()),
    "mixture adult": lambda: _mixture(*_adult_rows()),
    "relational kinship": lambda: LatentFeatureRelational(random_state=0).fit(
        *load_kinships(relation="term18", return_X_y=True)),
    "relational kinship, all relations": lambda: LatentFeatureRelational(
        random_state=0).fit(*load_kinships(relation="all", return_X_y=True)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FITS))
def test_default_fit_on_real_data_is_quiet(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = FITS[name]()
    fitted = model[-1] if hasattr(model, "steps") else model
    assert np.isfinite(fitted.elbo_)


def _readme_snippets():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_snippets():
    assert len(_readme_snippets()) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_readme_snippets())))
def test_readme_snippet_runs_quietly_and_prints(index, tmp_path):
    """Each README snippet, run as a script under ``-W error::UserWarning``,
    ends without error and prints what it computes."""
    result = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", _readme_snippets()[index]],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "the snippet prints nothing"
    assert not result.stderr.strip(), result.stderr
