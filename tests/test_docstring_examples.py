"""The Examples sections of the public docstrings run, print what they show,
and raise no warning: a user who copies one sees no ConvergenceWarning or
any other warning."""

import doctest
import importlib
import warnings

import pytest

MODULES = [
    "skbinvi.noisy_or._estimator",
    "skbinvi.relational._estimator",
    "skbinvi.experts._estimator",
    "skbinvi.datasets._adult",
    "skbinvi.datasets._reuters",
    "skbinvi.datasets._kinships",
    "skbinvi.datasets._mnist",
    "skbinvi.datasets._samples_generator",
    "skbinvi.datasets._relational_generator",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_without_warnings(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{name} has no docstring example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS
                                   | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for test in tests:
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_every_module_with_examples_is_listed():
    import pathlib

    import skbinvi

    root = pathlib.Path(skbinvi.__file__).parent
    found = {".".join(("skbinvi",) + p.relative_to(root).with_suffix("").parts)
             for p in root.rglob("*.py") if ">>> " in p.read_text()}
    assert found <= set(MODULES), sorted(found - set(MODULES))
