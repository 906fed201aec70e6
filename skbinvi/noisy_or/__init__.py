"""The noisy-OR factor model ([Yan] in METHODS.md section 2)."""

from ._estimator import NoisyORFactorizer

__all__ = ["NoisyORFactorizer"]
