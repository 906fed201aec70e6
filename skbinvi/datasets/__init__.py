"""Bundled real data sets and synthetic generators with known ground truth."""

from ._adult import load_adult
from ._kinships import load_kinships
from ._mnist import load_binary_mnist, make_multi_mnist
from ._relational_generator import make_relational, make_sparse_relational
from ._reuters import load_reuters
from ._samples_generator import make_noisy_or, make_noisy_or_patterns

__all__ = [
    "load_adult",
    "load_binary_mnist",
    "load_kinships",
    "load_reuters",
    "make_multi_mnist",
    "make_noisy_or",
    "make_noisy_or_patterns",
    "make_relational",
    "make_sparse_relational",
]
