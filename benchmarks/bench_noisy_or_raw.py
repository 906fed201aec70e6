"""The default pipeline on corpora nobody tuned it to: a raw vocabulary.

Run from the repository root (needs the Reuters-21578 source files in
``../shared/data/reuters21578``, or ``--source``)::

    python benchmarks/bench_noisy_or_raw.py        # ~2 min on 2 cores
    python benchmarks/bench_noisy_or_raw.py --quick  # r4long, K=20, seed 0 (< 1 min)
    # the two small corpora, every fit timed three times (median; ~3 min)
    python benchmarks/bench_noisy_or_raw.py --corpora r4long rare \
        --components 50 100 150 --repeat 3 \
        --out benchmarks/results/bench_noisy_or_raw_repeat.json
    # a large vocabulary (11,929 words, 51 classes; ~4 min)
    python benchmarks/bench_noisy_or_raw.py --corpora r52 \
        --components 50 100 150 --out benchmarks/results/bench_noisy_or_raw_r52.json

The bundled Reuters matrices (``skbinvi.datasets.load_reuters``) use our own
lemmatized vocabulary, and the defaults were chosen on them. This benchmark
takes three other corpora from the same source (``_corpora.raw_corpora``;
``bench_noisy_or.py --corpora`` reaches them too), built the way a user would, with
``CountVectorizer(binary=True, min_df=5, max_features=3000,
stop_words="english")`` on the raw body text of single-topic ModApte
documents:

r4long
    4 topics of long documents (crude, trade, money-fx, interest): 771
    training and 299 test documents, about 68 words per document; the shape
    of a small newsgroup corpus.
r7
    R8 without earn (whose documents are short): 2,354 training and 962 test
    documents, about 51 words per document.
rare
    The 24 single-topic categories outside R8 with at least 10 training and
    5 test documents: 817 training and 282 test documents, about 55 words per
    document, 24 classes.
r52 (only with ``--corpora``)
    Every single-topic category with at least one test document (51 of them,
    the R52 benchmark's documents with a non-empty body) and a large
    vocabulary: ``CountVectorizer(binary=True, min_df=2,
    stop_words="english")`` with no ``max_features``, 11,929 words; 5,963
    training and 2,345 test documents, about 50 words per document.

Default fits of ``NoisyORFactorizer(K, inference=...)`` ("acp", "avi") and
``LatentDirichletAllocation(K, learning_method="online")`` side by side, in
this one process (kernels compiled first), features into
``LogisticRegression()``: test accuracy, wall seconds of ``fit``, test ELBO
(nats per document) and the causes with a prior above 0.01. The table and
the JSON (``--out``) give every seed. A fit of a few seconds varies by
10-15% in wall time from one run to the next; ``--repeat N`` times every fit
N times, the three methods taking turns, and reports the median.
"""

import argparse
import itertools
import json
import os
import sys
import time
import warnings

import numpy as np
from _corpora import RAW_CORPORA, raw_corpora
from _harness import default_accuracy, machine_info, split_passes, table

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPORA = ("r4long", "r7", "rare")


def timed_fit(method, K, seed, X_train):
    """One default fit; returns (model, wall seconds of ``fit``, warning names)."""
    from sklearn.decomposition import LatentDirichletAllocation

    from skbinvi import NoisyORFactorizer

    if method == "lda":
        model = LatentDirichletAllocation(K, learning_method="online",
                                          random_state=seed)
    else:
        model = NoisyORFactorizer(K, inference=method, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        model.fit(X_train)
        seconds = time.perf_counter() - start
    return model, seconds, sorted({w.category.__name__ for w in caught})


def evaluate(model, method, K, seed, seconds, caught, X_train, y_train, X_test,
             y_test):
    """The result row of a fit: median seconds (and every repeat), accuracy, ELBO."""
    accuracy, _ = default_accuracy(model.transform(X_train), y_train,
                                    model.transform(X_test), y_test)
    result = dict(method=method, K=K, seed=seed,
                  fit_seconds=round(float(np.median(seconds)), 2),
                  accuracy=round(accuracy, 4))
    if len(seconds) > 1:
        result["fit_seconds_repeats"] = [round(t, 2) for t in seconds]
    if method != "lda":
        prior = model.prior_
        result.update(
            test_elbo=round(model.score(X_test), 3),
            causes_in_use=int((prior > 0.01).sum()),
            rarest_cause_rows=round(float(prior.min() * X_train.shape[0]), 1),
            warnings=caught,
        )
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", choices=RAW_CORPORA, metavar="NAME",
                        default=None,
                        help=f"any of {' '.join(RAW_CORPORA)} (default: "
                             f"{' '.join(DEFAULT_CORPORA)}; quick: r4long)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: r4long, K=20, seed 0, written to "
                             "results/bench_noisy_or_raw_quick.json")
    parser.add_argument("--components", type=int, nargs="+", default=None,
                        metavar="K", help="default 50 100 (quick 20)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        metavar="SEED", help="default 0 1 2 (quick 0)")
    parser.add_argument("--out", default=None,
                        help="JSON output (default results/bench_noisy_or_raw.json, "
                             "or bench_noisy_or_raw_quick.json with --quick)")
    parser.add_argument("--source", default=None,
                        help="folder of the Reuters-21578 .sgm.gz files (default "
                             "../shared/data/reuters21578)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time every fit this many times, the methods taking "
                             "turns, and report the median (the fits are "
                             "deterministic; the last one is evaluated)")
    args = parser.parse_args(argv)
    quick = args.quick
    names = args.corpora or (["r4long"] if quick else list(DEFAULT_CORPORA))
    Ks = args.components or ([20] if quick else [50, 100])
    seeds = args.seeds or ([0] if quick else [0, 1, 2])
    out = args.out or os.path.join(HERE, "results", "bench_noisy_or_raw_quick.json"
                                   if quick else "bench_noisy_or_raw.json")
    from skbinvi import NoisyORFactorizer

    start = time.perf_counter()
    corpora = raw_corpora(args.source, names=names)
    X0 = corpora[names[0]][0]

    # compile (or load) the kernels first, those of the passes split between
    # threads too
    for method, split in itertools.product(("acp", "avi"), (False, True)):
        with warnings.catch_warnings(), split_passes(split):
            warnings.simplefilter("ignore")
            model = NoisyORFactorizer(5, inference=method, max_iter=1).fit(X0[:100])
            model.score(X0[:10])
    results = {"machine": machine_info(), "repeat": args.repeat,
               "corpora": {}, "fits": []}
    rows = []
    for name in names:
        X_train, y_train, X_test, y_test = corpora[name]
        results["corpora"][name] = dict(
            n_train=X_train.shape[0], n_test=X_test.shape[0],
            n_features=X_train.shape[1], n_classes=len(set(y_train)),
            words_per_document=round(float(X_train.getnnz(axis=1).mean()), 1))
        for K in Ks:
            for seed in seeds:
                methods = ("lda", "acp", "avi")
                seconds = {method: [] for method in methods}
                for rep in range(args.repeat):
                    for method in methods:
                        model, t, caught = timed_fit(method, K, seed, X_train)
                        seconds[method].append(t)
                        if rep < args.repeat - 1:
                            continue
                        r = evaluate(model, method, K, seed, seconds[method], caught,
                                     X_train, y_train, X_test, y_test)
                        r["corpus"] = name
                        results["fits"].append(r)
                        rows.append([name, K, seed, method.upper(), r["fit_seconds"],
                                     r["accuracy"], r.get("test_elbo", "n/a"),
                                     r.get("causes_in_use", "-")])
                        print(f"  {name} K={K} seed {seed} {method}: {r}", flush=True)
    results["total_seconds"] = round(time.perf_counter() - start, 1)
    print(table(
        ["corpus", "K", "seed", "method", "fit s", "accuracy", "test ELBO",
         "causes > 0.01"], rows,
        title="Default fits on raw-vocabulary corpora",
        notes=[f"{n}: {c}" for n, c in results["corpora"].items()]))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"Total wall time {results['total_seconds'] / 60:.1f} min; "
          f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
