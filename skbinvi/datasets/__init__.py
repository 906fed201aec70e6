"""Bundled real data sets and synthetic generators with known ground truth."""

from ._samples_generator import make_noisy_or

__all__ = ["make_noisy_or"]
