"""Helpers shared by the tests of the bundled data sets."""

import importlib.util
from importlib.resources import files
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
BUILD_SCRIPT = REPO_ROOT / "tools" / "build_datasets.py"


def read_bundled(filename):
    """The arrays of a bundled ``skbinvi/datasets/data`` file, as a dict."""
    res = files("skbinvi.datasets") / "data" / filename
    with res.open("rb") as f, np.load(f, allow_pickle=False) as z:
        return {key: z[key] for key in z.files}


def load_build_script():
    """``tools/build_datasets.py`` imported as a module."""
    spec = importlib.util.spec_from_file_location("_build_datasets", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
