"""skbinvi: scikit-learn compatible variational inference for binary latent
variables."""

import importlib

__version__ = "0.2.0.dev0"

# the estimators' modules are imported on first use (PEP 562), so that a
# process that uses one estimator does not import (and set up the kernels
# of) the other two
_MODULES = {
    "DiversityMixtureOfExperts": ".experts",
    "LatentFeatureRelational": ".relational",
    "NoisyORFactorizer": ".noisy_or",
}

__all__ = [
    "DiversityMixtureOfExperts",
    "LatentFeatureRelational",
    "NoisyORFactorizer",
    "__version__",
]


def __getattr__(name):
    if name in _MODULES:
        value = getattr(importlib.import_module(_MODULES[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
