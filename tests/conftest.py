"""Shared test configuration: the ``slow`` marker and common fixtures.

Tests marked ``@pytest.mark.slow`` (real-data floors, long fits, common checks
of every configuration) run in CI (where the environment variable ``CI`` is
set) or with ``python -m pytest --runslow``; the default local run skips them
so that it stays within a few minutes on two cores.
"""

import os

import numpy as np
import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--runslow", action="store_true", default=False,
        help="run the tests marked slow (always run when CI is set)",
    )


def _run_slow(config):
    return config.getoption("--runslow") or os.environ.get("CI", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if _run_slow(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (CI runs it)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A fresh seeded RandomState for tests that draw their own data."""
    return np.random.RandomState(0)
