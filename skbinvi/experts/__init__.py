"""Bayesian mixture of experts with the mutual angular (diversity) prior ([Xie]
ICML 2016)."""

from ._estimator import DiversityMixtureOfExperts

__all__ = ["DiversityMixtureOfExperts"]
