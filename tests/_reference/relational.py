"""Reference implementations for the tests of :mod:`skbinvi.relational`."""

import numpy as np

from skbinvi.relational._kernels import _hashed_samples


def sample_features(q, seed, n_draws):
    """The (S, N, D) samples of :func:`expected_pair_log_likelihood` (for tests)."""
    N, D = q.shape
    z = np.empty((n_draws, N, D), dtype=np.uint8)
    _hashed_samples(q, seed, z)
    return z.astype(np.float64)
