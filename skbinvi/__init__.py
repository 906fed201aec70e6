"""skbinvi: scikit-learn compatible variational inference for binary latent
variables."""

from .experts import DiversityMixtureOfExperts
from .noisy_or import NoisyORFactorizer
from .relational import LatentFeatureRelational

__version__ = "0.2.0.dev0"

__all__ = [
    "DiversityMixtureOfExperts",
    "LatentFeatureRelational",
    "NoisyORFactorizer",
    "__version__",
]
