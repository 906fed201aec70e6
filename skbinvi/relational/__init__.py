"""The latent feature relational model (METHODS.md section 1)."""

from ._estimator import LatentFeatureRelational

__all__ = ["LatentFeatureRelational"]
