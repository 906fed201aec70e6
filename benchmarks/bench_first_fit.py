"""First fit of every estimator in a fresh process: import, compile, fit.

What a new user waits for. Each estimator's default fit on a small data set
(the sizes of the README's snippets) runs in a fresh Python process with an
empty Numba cache ("cold": the kernels compile), then in a second fresh
process on the cache the first one wrote ("cached": what every later
session sees), where the fit is also repeated to time it once compiled.
Seconds are wall clock and CPU (``time.perf_counter`` and
``time.process_time`` of the process), split into importing the package and
loading the data, the first fit, and the later fits.

The fits:

- ``NoisyORFactorizer(20, random_state=0)`` on a 200 x 300 binary matrix
  (density 0.05, seed 0);
- ``DiversityMixtureOfExperts(random_state=0)`` on scikit-learn's breast
  cancer table, standardized;
- ``LatentFeatureRelational(random_state=0)`` on the kinship relation
  ``term18`` (104 people), 80% of the ordered pairs
  (``train_test_split(test_size=0.2, random_state=0)``).

Usage (from the repository root, the package installed)::

    python benchmarks/bench_first_fit.py [--repeats 3] [--out PATH]

Running time: about a minute.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

from _harness import machine_info, rounded, run_worker, table, worker_env

HERE = os.path.dirname(os.path.abspath(__file__))
ESTIMATORS = ("NoisyORFactorizer", "DiversityMixtureOfExperts",
              "LatentFeatureRelational")


def _data_and_model(name):
    """(X, y or None, estimator) of the first fit of ``name``."""
    import numpy as np

    if name == "NoisyORFactorizer":
        from skbinvi import NoisyORFactorizer

        X = (np.random.default_rng(0).random((200, 300)) < 0.05).astype(np.float64)
        return X, None, lambda: NoisyORFactorizer(20, random_state=0)
    if name == "DiversityMixtureOfExperts":
        from sklearn.datasets import load_breast_cancer
        from sklearn.preprocessing import StandardScaler

        from skbinvi import DiversityMixtureOfExperts

        X, y = load_breast_cancer(return_X_y=True)
        return (StandardScaler().fit_transform(X), y,
                lambda: DiversityMixtureOfExperts(random_state=0))
    from sklearn.model_selection import train_test_split

    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import load_kinships

    kin = load_kinships(relation="term18")
    X, _, y, _ = train_test_split(kin.data, kin.target, test_size=0.2, random_state=0)
    return X, y, lambda: LatentFeatureRelational(random_state=0)


def _worker(cfg, result_path):
    import time

    wall0, cpu0 = time.perf_counter(), time.process_time()
    X, y, make = _data_and_model(cfg["estimator"])
    out = dict(import_wall=time.perf_counter() - wall0,
               import_cpu=time.process_time() - cpu0, fits=[])
    for _ in range(cfg["repeats"]):
        wall, cpu = time.perf_counter(), time.process_time()
        model = make().fit(X, y) if y is not None else make().fit(X)
        out["fits"].append(dict(wall=rounded(time.perf_counter() - wall, 3),
                                cpu=rounded(time.process_time() - cpu, 3),
                                n_iter=int(model.n_iter_)))
    out["import_wall"] = rounded(out["import_wall"], 3)
    out["import_cpu"] = rounded(out["import_cpu"], 3)
    with open(result_path, "w") as f:
        json.dump(out, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3,
                        help="fits in the cached process (the first is timed as "
                             "the cached first fit, all as fits once compiled)")
    parser.add_argument("--out", default=os.path.join(HERE, "results",
                                                      "bench_first_fit.json"))
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_config", help=argparse.SUPPRESS)
    parser.add_argument("--_result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._worker:
        _worker(json.loads(args._config), args._result)
        return
    results = dict(machine=machine_info(), repeats=args.repeats, estimators={})
    rows = []
    for name in ESTIMATORS:
        cache = tempfile.mkdtemp(prefix="skbinvi-first-fit-")
        try:
            env = worker_env(cache)
            cold, _ = run_worker(__file__, "fit", dict(estimator=name, repeats=1),
                                 env, timeout=1800)
            cached, _ = run_worker(__file__, "fit",
                                   dict(estimator=name, repeats=args.repeats),
                                   env, timeout=1800)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if "error" in cold or "error" in cached:
            sys.exit(f"{name}: {cold.get('error') or cached.get('error')}")
        results["estimators"][name] = dict(cold=cold, cached=cached)
        warm = cached["fits"][1:] or cached["fits"]
        rows.append([
            name,
            f"{cold['wall_seconds']:.1f}",
            f"{cold['import_wall']:.1f}",
            f"{cold['fits'][0]['wall']:.1f} / {cold['fits'][0]['cpu']:.1f}",
            f"{cached['wall_seconds']:.1f}",
            f"{cached['fits'][0]['wall']:.2f}",
            f"{min(f['wall'] for f in warm):.2f} / {min(f['cpu'] for f in warm):.2f}",
            "/".join(str(f["n_iter"]) for f in cached["fits"]),
        ])
    table(["estimator", "cold process s", "import s", "cold fit s (wall / CPU)",
           "cached process s", "cached first fit s", "fit once compiled s (wall / CPU)",
           "n_iter"], rows, title="first fit in a fresh process")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
