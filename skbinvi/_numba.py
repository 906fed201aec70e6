"""Numba configuration shared by every kernel module.

Kernels are compiled lazily on first use and cached on disk so that later
processes load them in milliseconds. The cache lives in the user's cache
directory (``~/.cache/skbinvi/numba`` on Linux, ``$XDG_CACHE_HOME`` when set;
the platform's equivalent elsewhere), never inside the installed package, so
that reinstalling or uninstalling the package leaves nothing behind in
``site-packages`` and a read-only install still caches. ``NUMBA_CACHE_DIR``,
when set, takes precedence, as it does for every Numba user; the environment
variable ``SKBINVI_NUMBA_CACHE=0`` turns caching off. Large passes of the
noisy-OR kernels run on Python threads (:func:`run_parts`), as many as
``NUMBA_NUM_THREADS``.
"""

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import types
from numba.core.caching import (
    FunctionCache,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
)
from numba.extending import get_cython_function_address
from numba.misc.appdirs import AppDirs

NUMBA_CACHE = os.getenv("SKBINVI_NUMBA_CACHE", "1").lower() in {"1", "true", "yes"}


def thread_count():
    """Threads the row kernels of the package may use (at least 1).

    ``NUMBA_NUM_THREADS``, read when Numba is imported: by default the number
    of CPUs; joblib's worker processes lower it (it is one of the variables
    that joblib sets to share the CPUs between workers).
    """
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def parallel_pays(work, min_work, n_tasks=2):
    """Whether a pass should run on several threads (:func:`run_parts`).

    A pass pays from about ``min_work`` units of work on (below, handing it
    to threads costs more than it saves), with at least two tasks and two
    threads. Split passes give the same numbers, so the choice only changes
    the time.

    Parameters
    ----------
    work : int or float
        Size of the pass, in the kernel's own unit (e.g. row-cause pairs).
    min_work : int or float
        Smallest work that runs on threads.
    n_tasks : int, default=2
        Number of independent parts the pass can be split into.

    Returns
    -------
    bool
    """
    return n_tasks >= 2 and work >= min_work and thread_count() >= 2


def part_count(work, min_work):
    """Number of parts to split a pass into for :func:`run_parts`.

    One part per thread, but no part smaller than ``min_work / 2``: on a
    machine with many cores, a pass just above ``min_work`` goes to two or
    three threads, not to all of them, since each part costs a hand-over of
    tens of microseconds. On two threads every pass that pays
    (:func:`parallel_pays`) gets two parts.

    Parameters
    ----------
    work : int or float
        Size of the pass, in the unit of ``min_work``.
    min_work : int or float
        Smallest work that runs on threads; 0 or less: one part per thread.

    Returns
    -------
    int
        At least 1 and at most :func:`thread_count`.
    """
    if min_work <= 0:
        return thread_count()
    return max(1, min(thread_count(), int(2 * work // min_work)))


_POOL = None
_POOL_LOCK = threading.Lock()


def _forget_pool():
    # a forked child has none of its parent's threads: start a new pool
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def run_parts(kernel, parts):
    """Run ``kernel(*args)`` for every ``args`` in ``parts`` on threads.

    The calling thread and up to ``thread_count() - 1`` threads of a pool
    (created on first use) take the parts in order, each the next one left,
    until none is left: parts of unequal cost keep every thread busy.
    ``kernel`` must release the GIL (a Numba function compiled with
    ``nogil=True``, or a SciPy sparse product) and the parts must write to
    disjoint memory. Python threads rather than ``parallel=True`` kernels:
    GNU OpenMP, Numba's usual threading layer on Linux, makes a process
    that has used it unable to ``fork`` (the children of a ``multiprocessing``
    pool are terminated), and its threads busy-wait between passes. A call
    costs about 50 microseconds of hand-over on two cores, so it suits
    passes of a millisecond or more (the noisy-OR and relational kernels,
    whose smaller passes stay on the calling thread; User Guide, "Threads
    and processes").

    Parameters
    ----------
    kernel : callable
    parts : list of tuple
        The arguments of each call.

    Returns
    -------
    results : list
        ``kernel``'s return values, in the order of ``parts``.

    Raises
    ------
    Exception
        The first exception of a part, once every part has ended.
    """
    global _POOL
    n_workers = min(thread_count(), len(parts))
    if n_workers <= 1:
        return [kernel(*args) for args in parts]
    results = [None] * len(parts)
    counter = itertools.count()  # next() is atomic: each part is taken once

    def drain():
        for i in iter(counter.__next__, None):
            if i >= len(parts):
                return
            results[i] = kernel(*parts[i])

    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=thread_count() - 1,
                                       thread_name_prefix="skbinvi")
        pool = _POOL
    futures = [pool.submit(drain) for _ in range(n_workers - 1)]
    try:
        drain()
    finally:
        # every part ends before returning or raising: they write into the
        # caller's arrays
        wait(futures)
    for future in futures:
        future.result()
    return results


def balanced_parts(cumulative, n_parts):
    """Split items 0..n-1 into up to ``n_parts`` contiguous ranges of equal work.

    Parameters
    ----------
    cumulative : ndarray of shape (n + 1,)
        Nondecreasing; ``cumulative[i + 1] - cumulative[i]`` is the work of
        item i (e.g. a CSR ``indptr``).
    n_parts : int

    Returns
    -------
    bounds : list of (int, int)
        Nonempty ranges ``(lo, hi)`` covering 0..n-1 in order.
    """
    n = cumulative.shape[0] - 1
    targets = cumulative[0] + (cumulative[n] - cumulative[0]) * (
        np.arange(1, n_parts) / n_parts)
    cuts = np.searchsorted(cumulative, targets, side="left")
    edges = np.unique(np.concatenate(([0], np.clip(cuts, 0, n), [n])))
    return [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:], strict=True)
            if hi > lo]


def sparse_dot(X, W, min_work):
    """``X @ W`` for a CSR matrix X and a dense W, on threads when it is large.

    From ``min_work`` multiply-adds (``X.nnz * W.shape[1]``,
    :func:`parallel_pays`) the rows are split into ranges of equal nnz
    (:func:`balanced_parts`), each a view of X's arrays (no copy),
    multiplied by SciPy, which releases the GIL and sums every output entry
    in the order of the row's stored entries: the result is the same to the
    last bit as ``X @ W``.

    Parameters
    ----------
    X : csr_matrix of shape (B, D)
    W : ndarray of shape (D, H)
    min_work : int or float
        Smallest ``X.nnz * H`` that runs on threads.

    Returns
    -------
    ndarray of shape (B, H)
    """
    import scipy.sparse as sp

    B, work = X.shape[0], X.nnz * W.shape[1]
    if not parallel_pays(work, min_work, n_tasks=B):
        return np.asarray(X @ W)
    out = np.empty((B, W.shape[1]), dtype=np.result_type(X.dtype, W.dtype))

    def part(lo, hi):
        a, b = X.indptr[lo], X.indptr[hi]
        rows = sp.csr_matrix(
            (X.data[a:b], X.indices[a:b], X.indptr[lo : hi + 1] - a),
            shape=(hi - lo, X.shape[1]))
        out[lo:hi] = rows @ W

    run_parts(part, balanced_parts(X.indptr, part_count(work, min_work)))
    return out


def cache_dir():
    """Folder of the package's compiled-kernel cache.

    ``NUMBA_CACHE_DIR`` when set, otherwise ``skbinvi/numba`` in the user's
    cache directory. The folder for each source file is a subfolder named
    after a hash of that file's folder, so two installs (say, a wheel and an
    editable checkout) never share entries; an entry is also keyed by a hash
    of its source file, so an upgrade recompiles.

    Returns
    -------
    path : str
    """
    if numba.config.CACHE_DIR:
        return numba.config.CACHE_DIR
    return os.path.join(AppDirs(appname="skbinvi", appauthor=False).user_cache_dir,
                        "numba")


class _UserCacheLocator(UserWideCacheLocator):
    # numba's own user-wide locator, in the package's folder of the user cache
    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        self._cache_path = os.path.join(cache_dir(),
                                        self.get_suitable_cache_subpath(py_file))


class _FunctionCache(FunctionCache):
    # numba's FunctionCache, but never next to the source (numba's default
    # writes into ``__pycache__`` inside site-packages, which pip does not
    # remove, and which turns the package into an empty namespace package
    # once pip has removed the rest)
    class _impl_class(FunctionCache._impl_class):
        _locator_classes = [UserProvidedCacheLocator, _UserCacheLocator]


def njit(func=None, **kwargs):
    """``numba.njit`` with the package defaults (cache on, fastmath off, no
    C-callable wrapper).

    Used as ``@njit`` or ``@njit(parallel=True)``. A kernel cannot be passed
    as a first-class function value to another jitted function unless it is
    decorated with ``no_cfunc_wrapper=False``. With ``cache=True`` (the
    default unless ``SKBINVI_NUMBA_CACHE=0``) the compiled code is cached in
    :func:`cache_dir`; where no cache folder can be written, the kernel
    compiles in each process instead.
    """
    cache = kwargs.pop("cache", NUMBA_CACHE)
    # no C-callable wrapper (Numba makes one for every function, so that it
    # can be passed as a first-class function value, which no kernel does):
    # its lowering and code generation cost a tenth of a cold compilation
    kwargs.setdefault("no_cfunc_wrapper", True)

    def decorate(function):
        dispatcher = numba.njit(**kwargs)(function)
        if cache:
            try:
                # what numba.njit(cache=True) does, with the package's locators
                dispatcher._cache = _FunctionCache(dispatcher.py_func)
            except RuntimeError:  # no writable cache folder
                pass
        return dispatcher

    if func is None:
        return decorate
    return decorate(func)


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
