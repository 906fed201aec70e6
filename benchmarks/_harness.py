"""Helpers shared by the benchmark scripts (standard library only at import time).

- :func:`worker_env`, :func:`run_worker`: run one configuration of a benchmark
  in a fresh subprocess of the benchmark script (its own Numba cache, BLAS
  threads, warnings off) and collect its JSON result;
- :func:`machine_info`: versions, CPU, BLAS, git commit and the folder the
  package was imported from, for the JSON output;
- :func:`table`: an aligned text table;
- :func:`split_passes`, :func:`default_accuracy`: the noisy-OR scripts' kernel
  warm-up switch and the default pipeline's classifier.

The scripts import the package as installed (``pip install -e .`` from the
repository root, as the README says) and these helpers by name: Python puts a
script's own folder first on ``sys.path``, so nothing edits the path. The
worker side lives in each script: ``script --_worker KIND --_config JSON
--_result PATH`` must write its measurements as JSON to PATH.
"""

import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

__all__ = [
    "ROOT",
    "default_accuracy",
    "fmt",
    "import_skbinvi",
    "machine_info",
    "rounded",
    "run_worker",
    "split_passes",
    "table",
    "worker_env",
]


def import_skbinvi():
    """Import skbinvi as installed, or exit with the command that installs it.

    (The scripts may as well ``import skbinvi``; this only words the error.)
    """
    try:
        import skbinvi  # noqa: F401
    except ImportError as exc:
        raise SystemExit("skbinvi is not installed: run `pip install -e .` from "
                         f"the repository root ({ROOT})") from exc



def rounded(x, nd=4):
    """x rounded to nd decimals (None stays None)."""
    return None if x is None else round(float(x), nd)



def worker_env(cache_dir, blas_threads=None):
    """Environment of a worker subprocess: the caller's (so the same installed
    package), its own Numba cache, warnings off, optionally a fixed number of
    BLAS threads."""
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = cache_dir
    env["SKBINVI_NUMBA_CACHE"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    if blas_threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(blas_threads)
    return env


def run_worker(script, kind, cfg, env, timeout):
    """Run ``script --_worker kind`` on one configuration in a fresh subprocess.

    The worker writes its measurements as JSON to a temporary file. Returns the
    result dict (``{"error": ...}`` on failure or timeout) with the
    configuration and the wall time added, and the wall time in seconds.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        out_path = f.name
    cmd = [
        sys.executable,
        os.path.abspath(script),
        "--_worker",
        kind,
        "--_config",
        json.dumps(cfg),
        "--_result",
        out_path,
    ]
    tic = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - tic
        if proc.returncode != 0:
            res = {"error": proc.stderr.strip().splitlines()[-1:] or ["?"]}
            sys.stderr.write(proc.stderr)
        else:
            with open(out_path) as f:
                res = json.load(f)
    except subprocess.TimeoutExpired:
        wall = time.perf_counter() - tic
        res = {"error": f"timeout after {timeout} s"}
    finally:
        os.unlink(out_path)
    return {"config": cfg, **res, "wall_seconds": rounded(wall, 2)}, wall


def machine_info():
    import numba
    import numpy
    import scipy
    import sklearn
    from threadpoolctl import threadpool_info

    import_skbinvi()
    import skbinvi

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else None,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "sklearn": sklearn.__version__,
        "numba": numba.__version__,
        "skbinvi": getattr(skbinvi, "__version__", None),
        # the checkout measured (an editable install points at one folder)
        "skbinvi_path": os.path.dirname(os.path.abspath(skbinvi.__file__)),
        # threads of the package's split passes (NUMBA_NUM_THREADS)
        "kernel_threads": int(numba.config.NUMBA_NUM_THREADS),
        "blas": [
            {
                k: d.get(k)
                for k in ("internal_api", "version", "num_threads", "architecture")
            }
            for d in threadpool_info()
            if d.get("user_api") == "blas"
        ],
    }
    try:
        with open("/proc/cpuinfo") as f:
            names = [
                ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")
            ]
        info["cpu_model"] = names[0] if names else None
        with open("/proc/meminfo") as f:
            info["mem_total_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "skbinvi"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        info["git_commit"] = commit or None
        info["skbinvi_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


@contextlib.contextmanager
def split_passes(split=True):
    """Inside: every pass that can run on threads does (the thresholds at 0),
    so that a tiny warm-up model also loads the kernels of the split passes,
    which large fits use. The results are the same either way."""
    from skbinvi import _optim
    from skbinvi.noisy_or import _encoder, _kernels

    names = [(_kernels, "PARALLEL_MIN_WORK"), (_encoder, "PARALLEL_MIN_WORK"),
             (_optim, "PARALLEL_MIN_ENTRIES")]
    saved = [getattr(module, name) for module, name in names]
    try:
        if split:
            for module, name in names:
                setattr(module, name, 0)
        yield
    finally:
        for (module, name), value in zip(names, saved, strict=True):
            setattr(module, name, value)


def default_accuracy(features_train, y_train, features_test, y_test):
    """The default pipeline's classifier: LogisticRegression() (OvR if multi-label).

    Returns (accuracy or exact match, number of ConvergenceWarnings).
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    clf = LogisticRegression()
    if y_train.ndim == 2:
        clf = OneVsRestClassifier(clf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(features_train, y_train)
    n_conv = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    return float(clf.score(features_test, y_test)), n_conv


def table(headers, rows, title=None, notes=()):
    """Print and return an aligned text table (numeric columns right-aligned).

    A row shorter than ``headers`` (a failed configuration's "ERROR" row) is
    padded with empty cells.
    """
    rows = [["" if c is None else str(c) for c in row]
            + [""] * (len(headers) - len(row)) for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
        for i, h in enumerate(headers)
    ]
    numeric = [
        all(_is_num(r[i]) for r in rows if r[i] not in ("", "-", "n/a"))
        for i in range(len(headers))
    ]

    def line(cells):
        return "  ".join(
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    lines = []
    if title:
        lines += ["", title, "=" * len(title)]
    lines += [line(headers), line(["-" * w for w in widths])]
    lines += [line(r) for r in rows]
    for note in notes:
        lines += textwrap.wrap(
            note, width=100, initial_indent="  * ", subsequent_indent="    "
        )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _is_num(s):
    try:
        float(s.rstrip("x%"))
        return True
    except ValueError:
        return False


def fmt(x, spec):
    """format(x, spec), or "n/a" for None."""
    return "n/a" if x is None else format(x, spec)
