"""Benchmark of DiversityMixtureOfExperts on UCI Adult: training time per method.

Run from the repository root::

    python benchmarks/bench_moe.py            # full run (~15 min, 2 cores)
    python benchmarks/bench_moe.py --quick    # smoke run (< 1 min)

Data: :func:`skbinvi.datasets.load_adult` (a9a encoding, 32,561 x 123
binary features, CSR; the estimator appends the intercept column).

k30
    One fit per method at K = 30 on the full training set with the settings of
    ``examples/plot_adult_experts.py`` (``max_iter=40`` for the variational
    methods, 300 burn-in + 200 kept sweeps for MCMC): training seconds,
    iterations or sweeps, test accuracy and the MCMC acceptance rates (expert
    direction, expert magnitude, gate direction, gate magnitude), beside the paper's hours ([Xie]:
    VI 2.9 h, MCMC 7.5 h, PR 3.3 h for K = 30 on Adult-9).
per_iteration
    Seconds per outer iteration ("vi", "pr", Gaussian "vi") or per sweep
    ("mcmc", Gaussian "mcmc") as (t(long) - t(short)) / (extra iterations),
    which removes the fixed cost of a fit (validation, the statistics set-up,
    the chain's start), for n in {4,000, 8,000, 16,000, 32,561} at K = 10 and
    for K in {5, 10, 20, 30} on the full set. ``tol=0`` so that every
    iteration runs.

Runs in this process, one configuration after the other (the first call of
each kernel compiles it; a warm-up fit runs first). Everything printed is
also written to ``--out`` (JSON, with machine info).
"""

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from bench_noisy_or import _import_skbinvi, machine_info, table  # noqa: E402

_import_skbinvi()

from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from skbinvi import DiversityMixtureOfExperts  # noqa: E402
from skbinvi.datasets import load_adult  # noqa: E402

METHODS = {
    "vi": dict(inference="vi", prior="mabn"),
    "pr": dict(inference="pr", prior="mabn"),
    "mcmc": dict(inference="mcmc", prior="mabn"),
    "vi-gauss": dict(inference="vi", prior="gaussian"),
    "mcmc-gauss": dict(inference="mcmc", prior="gaussian"),
}
PAPER_HOURS = {"vi": 2.9, "pr": 3.3, "mcmc": 7.5}


def fit(X, y, K, params, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = DiversityMixtureOfExperts(K, random_state=0, **params, **kw)
        tic = time.perf_counter()
        model.fit(X, y)
    return model, time.perf_counter() - tic


def per_iteration(X, y, K, params, short, long):
    """Seconds per iteration (variational) or sweep (MCMC), fixed cost removed."""
    if params["inference"] == "mcmc":
        kw = [dict(burn_in=0, n_samples=s) for s in (short, long)]
    else:
        kw = [dict(max_iter=s, tol=0.0) for s in (short, long)]
    t_short = fit(X, y, K, params, **kw[0])[1]
    t_long = fit(X, y, K, params, **kw[1])[1]
    return (t_long - t_short) / (long - short), t_short


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = args.out or os.path.join(
        HERE, "results", "bench_moe_quick.json" if args.quick else "bench_moe.json")
    X, y = load_adult(return_X_y=True)
    Xt, yt = load_adult(subset="test", return_X_y=True)
    if args.quick:
        X, y = X[:2000], y[:2000]
    k_main = 3 if args.quick else 30
    ns = [500, 1000, 2000] if args.quick else [4000, 8000, 16000, X.shape[0]]
    ks = [2, 3] if args.quick else [5, 10, 20, 30]
    iters = (1, 3) if args.quick else (2, 7)
    sweeps = (5, 15) if args.quick else (25, 125)
    settings = dict(max_iter=5 if args.quick else 40,
                    n_samples=20 if args.quick else 200,
                    burn_in=30 if args.quick else 300)
    results = {"machine": machine_info(), "quick": args.quick, "settings": settings}

    for params in METHODS.values():  # warm-up: compile every kernel
        fit(X[:300], y[:300], 2, params, max_iter=2, n_samples=2, burn_in=2)

    rows, k30 = [], {}
    for name, params in METHODS.items():
        model, seconds = fit(X, y, k_main, params, **settings)
        rates = getattr(model, "acceptance_rates_", {})
        k30[name] = dict(seconds=round(seconds, 2), n_iter=model.n_iter_,
                         accuracy=round(model.score(Xt, yt), 4),
                         acceptance_rates={k: round(v, 3) for k, v in rates.items()})
        hours = PAPER_HOURS.get(name)
        rows.append([name, f"{seconds:.1f}", model.n_iter_, f"{k30[name]['accuracy']:.4f}",
                     " ".join(f"{v:.2f}" for v in rates.values()),
                     "" if hours is None else f"{hours:.1f} h",
                     "" if hours is None else f"{hours * 3600 / seconds:.0f}x"])
        print(f"  {name}: {seconds:.1f} s", flush=True)
    results["k30"] = k30
    table(["method", "train s", "iters/sweeps", "test acc", "acceptance", "paper",
           "paper / ours"],
                rows, title=f"K = {k_main}, n = {X.shape[0]}")

    scaling = {"n": {}, "K": {}}
    for axis, values in (("n", ns), ("K", ks)):
        rows = []
        for v in values:
            n = v if axis == "n" else X.shape[0]
            K = 10 if axis == "n" else v
            if args.quick:
                K = min(K, 3)
            row = [v]
            entry = {}
            for name, params in METHODS.items():
                short, long = sweeps if params["inference"] == "mcmc" else iters
                per, base = per_iteration(X[:n], y[:n], K, params, short, long)
                entry[name] = dict(per_iteration=round(per, 4), fit_short=round(base, 2))
                row.append(f"{per:.3f}")
            scaling[axis][v] = entry
            rows.append(row)
            print(f"  {axis}={v} done", flush=True)
        table([axis] + [f"{m} s/it" for m in METHODS], rows,
              title=("K = 10" if axis == "n" else f"n = {X.shape[0]}")
              + ": seconds per iteration (vi, pr, vi-gauss) or sweep (mcmc)")
    results["scaling"] = scaling
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
