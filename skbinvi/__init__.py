"""skbinvi: scikit-learn compatible variational inference for binary latent
variables."""

from ._base import UnusedLatentWarning
from .experts import DiversityMixtureOfExperts
from .noisy_or import NoisyORFactorizer
from .relational import LatentFeatureRelational

__version__ = "0.2.0.dev0"

__all__ = [
    "DiversityMixtureOfExperts",
    "LatentFeatureRelational",
    "NoisyORFactorizer",
    "UnusedLatentWarning",
    "__version__",
]
