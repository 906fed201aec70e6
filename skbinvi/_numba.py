"""Numba configuration shared by every kernel module.

Kernels are compiled lazily on first use and cached on disk (``cache=True``) so
that later processes load them in milliseconds. Set the environment variable
``SKBINVI_NUMBA_CACHE=0`` to turn caching off (for example on a read-only
install), or point ``NUMBA_CACHE_DIR`` at a writable folder.
"""

import os

import llvmlite.binding as llvm
import numba
from numba import types
from numba.extending import get_cython_function_address

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


def scipy_special(name, restype, *argtypes):
    """A function of ``scipy.special.cython_special`` callable from jitted code.

    ``name`` is the exported C symbol (for a fused function, Cython's name of
    its float64 variant, e.g. ``"__pyx_fuse_1ive"``); the C signature is
    ``restype(*argtypes, int skip_dispatch)``: call it with a last argument
    0. The address is registered under a fixed LLVM symbol and the function
    is a ``numba.types.ExternalFunction`` of that symbol, so the kernels
    that call it can be cached on disk (a ctypes function pointer would be
    a "dynamic global" and make Numba refuse to cache them). Returns None
    when this SciPy does not export ``name`` (callers then use their NumPy
    path).
    """
    try:
        address = get_cython_function_address("scipy.special.cython_special", name)
    except (ValueError, AttributeError, ImportError):
        return None
    symbol = f"skbinvi_scipy_special_{name}"
    llvm.add_symbol(symbol, address)
    return types.ExternalFunction(symbol, restype(*argtypes, types.intc))
