"""The latent feature relational model (user guide: ``doc/modules/relational.rst``)."""

from ._estimator import LatentFeatureRelational

__all__ = ["LatentFeatureRelational"]
