"""Numba configuration shared by every kernel module.

Kernels are compiled lazily on first use and cached on disk (``cache=True``) so
that later processes load them in milliseconds. Set the environment variable
``SKBINVI_NUMBA_CACHE=0`` to turn caching off (for example on a read-only
install), or point ``NUMBA_CACHE_DIR`` at a writable folder.
"""

import os

import numba

NUMBA_CACHE = os.getenv("SKBINVI_NUMBA_CACHE", "1").lower() in {"1", "true", "yes"}


def njit(func=None, **kwargs):
    """``numba.njit`` with the package defaults (cache on, fastmath off).

    Used as ``@njit`` or ``@njit(parallel=True)``.
    """
    kwargs.setdefault("cache", NUMBA_CACHE)
    if func is None:
        return numba.njit(**kwargs)
    return numba.njit(**kwargs)(func)


def as_py(func):
    """Return the pure-Python function behind a jitted kernel (for tests)."""
    return getattr(func, "py_func", func)
