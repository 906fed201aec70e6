"""Benchmarks of LatentFeatureRelational: Miller et al.'s kinship protocol and speed.

Run from the repository root::

    python benchmarks/bench_relational.py kinship            # 5 seeds (~40 min)
    python benchmarks/bench_relational.py kinship --seeds 1  # one seed (~8 min)
    python benchmarks/bench_relational.py kinship --quick    # smoke run (< 1 min)
    python benchmarks/bench_relational.py speed              # seconds per iteration

kinship
    The protocol of Miller, Griffiths and Jordan (NIPS 2009), Table 1, on the
    Alyawarra kinship data (``load_kinships(relation="all")``: 104 people, 25
    relations, 267,800 ordered triples (i, j, r), i != j). For every seed, 20% of
    the ordered entries of the tensor are held out at random (one mask per seed,
    shared by both settings):

    single
        one model per relation, fitted to that relation's training entries;
        AUC of the held-out entries of each relation, averaged over the
        relations (relations whose held-out entries hold a single class, such as
        the relation with 2 links, are skipped and counted).
    global
        one model, one feature set shared by all relations, a full weight matrix
        and a bias per relation, fitted to all training entries; the same
        per-relation AUCs, averaged (and the AUC of all held-out entries pooled).

    The table prints the mean (and standard deviation over seeds) beside the
    published rows of Table 1 (LFRM, IRM, MMSB). The estimator runs with its
    defaults except the settings printed in the header (``n_mc_samples``,
    ``n_elbo_samples``, ``max_iter``, ``tol=0``).
speed
    Seconds per ``"mcvi"`` iteration (diagonal and full W) on synthetic networks
    of N entities with every pair observed, against N, and the kernel time per
    pair, feature and sample (which should not grow with N).

Everything printed is also written to ``--out`` (JSON, with machine info).
"""

import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Miller, Griffiths and Jordan (NIPS 2009), Table 1, Alyawarra kinship: AUC
PUBLISHED = {
    "LFRM (Miller et al., MCMC)": {"single": 0.9443, "global": 0.9183},
    "IRM (Kemp et al.)": {"single": 0.9310, "global": 0.8943},
    "MMSB (Airoldi et al.)": {"single": 0.9005, "global": 0.9143},
}


def _machine():
    import numba

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "cpu_count": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _mean_auc(y, score, rel, relations):
    from sklearn.metrics import roc_auc_score

    aucs, skipped = [], []
    for r in relations:
        sel = rel == r
        if 0 < y[sel].sum() < sel.sum():
            aucs.append(roc_auc_score(y[sel], score[sel]))
        else:
            skipped.append(r)
            aucs.append(float("nan"))
    return np.array(aucs), skipped


def kinship(args):
    """Miller et al.'s Table 1 protocol; returns the JSON record."""
    from sklearn.metrics import roc_auc_score

    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import load_kinships

    kin = load_kinships(relation="all")
    X, y = kin.data, kin.target
    R = len(kin.relation_names)
    settings = dict(
        n_components=args.n_components,
        max_iter=args.max_iter,
        tol=0.0,
        n_mc_samples=args.n_mc_samples,
        n_elbo_samples=args.n_elbo_samples,
    )
    relations = range(R) if not args.quick else range(3)
    record = {"settings": settings, "seeds": [], "published": PUBLISHED}
    print(
        f"Kinship, Miller et al. protocol: {len(y)} ordered triples, {R} relations, "
        f"20% held out per seed; LatentFeatureRelational({settings}) defaults "
        "otherwise (weights='full', init='spectral', inference='mcvi')",
        flush=True,
    )
    for seed in range(args.seeds):
        test = np.random.RandomState(seed).random_sample(len(y)) < 0.2
        entry = {"seed": seed}
        if "single" in args.settings:
            tic = time.perf_counter()
            score = np.full(test.sum(), np.nan)
            rel_test = X[test, 2]
            for r in relations:
                tr = (~test) & (X[:, 2] == r)
                model = LatentFeatureRelational(random_state=seed, **settings)
                model.fit(X[tr, :2], y[tr])
                score[rel_test == r] = model.decision_function(
                    X[test & (X[:, 2] == r), :2]
                )
            keep = np.isin(rel_test, list(relations))
            aucs, skipped = _mean_auc(
                y[test][keep], score[keep], rel_test[keep], relations
            )
            entry["single"] = {
                "mean_auc": float(np.nanmean(aucs)),
                "auc_per_relation": aucs.tolist(),
                "skipped_relations": skipped,
                "seconds": time.perf_counter() - tic,
            }
            print(
                f"seed {seed} single: mean AUC {np.nanmean(aucs):.4f} "
                f"({time.perf_counter() - tic:.0f} s; skipped {skipped})",
                flush=True,
            )
        if "global" in args.settings:
            tic = time.perf_counter()
            train = ~test & np.isin(X[:, 2], list(relations))
            model = LatentFeatureRelational(random_state=seed, **settings)
            model.fit(X[train], y[train])
            sel = test & np.isin(X[:, 2], list(relations))
            score = model.decision_function(X[sel])
            aucs, skipped = _mean_auc(y[sel], score, X[sel, 2], relations)
            entry["global"] = {
                "mean_auc": float(np.nanmean(aucs)),
                "pooled_auc": float(roc_auc_score(y[sel], score)),
                "auc_per_relation": aucs.tolist(),
                "skipped_relations": skipped,
                "elbo": model.elbo_,
                "n_iter": model.n_iter_,
                "seconds": time.perf_counter() - tic,
            }
            print(
                f"seed {seed} global: mean AUC {np.nanmean(aucs):.4f}, pooled "
                f"{entry['global']['pooled_auc']:.4f} "
                f"({time.perf_counter() - tic:.0f} s)",
                flush=True,
            )
        record["seeds"].append(entry)
    lines = ["", "| model | single | global |", "|---|---|---|"]
    cells = {}
    for setting in ("single", "global"):
        values = [e[setting]["mean_auc"] for e in record["seeds"] if setting in e]
        if values:
            cells[setting] = (
                f"{np.mean(values):.4f} ± {np.std(values):.4f}"
                if len(values) > 1
                else f"{values[0]:.4f}"
            )
            record[f"{setting}_mean_auc"] = float(np.mean(values))
            record[f"{setting}_std_auc"] = float(np.std(values))
    lines.append(
        f"| LatentFeatureRelational (mcvi, full W, {args.seeds} seed"
        f"{'s' if args.seeds > 1 else ''}) | {cells.get('single', '-')} | "
        f"{cells.get('global', '-')} |"
    )
    for name, row in PUBLISHED.items():
        lines.append(f"| {name} | {row['single']:.4f} | {row['global']:.4f} |")
    table = "\n".join(lines)
    print(table)
    record["table"] = table
    return record


def speed(args):
    """Seconds per mcvi iteration against N (every pair observed)."""
    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import make_relational

    sizes = [100, 300] if args.quick else [100, 300, 1000]
    D = args.n_components
    rows = []
    for N in sizes:
        X, y, _ = make_relational(N, D, directed=True, random_state=0)
        for weights in ("diagonal", "full"):
            times = []
            for k in (1, 3):
                model = LatentFeatureRelational(
                    D,
                    weights=weights,
                    max_iter=k,
                    tol=0,
                    random_state=0,
                    n_elbo_samples=args.n_elbo_samples,
                )
                tic = time.perf_counter()
                model.fit(X, y)
                times.append(time.perf_counter() - tic)
            per_iter = (times[1] - times[0]) / 2
            ns = per_iter / (len(y) * D * args.n_mc_samples) * 1e9
            rows.append(
                {
                    "N": N,
                    "pairs": len(y),
                    "weights": weights,
                    "seconds_per_iteration": per_iter,
                    "ns_per_pair_feature_sample": ns,
                }
            )
            print(
                f"N={N:6d} pairs={len(y):9d} {weights:8s} "
                f"{per_iter:8.3f} s/iteration  {ns:6.1f} ns per pair x feature x "
                "sample",
                flush=True,
            )
    return {"rows": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("task", choices=["kinship", "speed"])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (3 relations, 1 seed, 5 iterations)",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--settings",
        nargs="+",
        default=["single", "global"],
        choices=["single", "global"],
    )
    parser.add_argument("--n-components", type=int, default=10)
    parser.add_argument("--max-iter", type=int, default=60)
    parser.add_argument("--n-mc-samples", type=int, default=5)
    parser.add_argument("--n-elbo-samples", type=int, default=8)
    parser.add_argument("--out", default=None, help="JSON output")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.max_iter = 1, 5
    warnings.simplefilter("ignore")
    record = {"task": args.task, "machine": _machine(), "args": vars(args)}
    record.update(kinship(args) if args.task == "kinship" else speed(args))
    suffix = "_quick" if args.quick else ""
    out = args.out or os.path.join(
        HERE, "results", f"bench_relational_{args.task}{suffix}.json"
    )
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
