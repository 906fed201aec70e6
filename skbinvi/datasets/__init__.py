"""Bundled real data sets and synthetic generators with known ground truth."""

from ._reuters import load_reuters
from ._samples_generator import make_noisy_or

__all__ = ["load_reuters", "make_noisy_or"]
