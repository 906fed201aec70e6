"""The package's top level: what ``import skbinvi`` gives, and what it imports."""

import subprocess
import sys

import pytest

import skbinvi


def test_estimator_modules_are_imported_on_first_use():
    # in a fresh interpreter: importing the package, or one estimator,
    # imports neither of the other estimators' modules (nor their kernels)
    code = (
        "import sys, skbinvi\n"
        "loaded = lambda: sorted(m for m in ('skbinvi.experts', 'skbinvi.noisy_or',"
        " 'skbinvi.relational') if m in sys.modules)\n"
        "print(loaded())\n"
        "from skbinvi import LatentFeatureRelational\n"
        "print(loaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "['skbinvi.relational']"]


def test_top_level_names():
    assert set(skbinvi.__all__) <= set(dir(skbinvi))
    for name in skbinvi.__all__:
        assert getattr(skbinvi, name) is not None
    from skbinvi.relational import LatentFeatureRelational

    assert skbinvi.LatentFeatureRelational is LatentFeatureRelational
    with pytest.raises(AttributeError, match="no attribute 'NoSuchEstimator'"):
        skbinvi.NoSuchEstimator  # noqa: B018
