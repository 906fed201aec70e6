"""The noisy-OR factor model (Yan, Ailem and Sha, AISTATS 2020).

User Guide: doc/modules/noisy_or.rst.
"""

from ._estimator import NoisyORFactorizer

__all__ = ["NoisyORFactorizer"]
