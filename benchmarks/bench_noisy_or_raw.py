"""The default pipeline on corpora nobody tuned it to: a raw vocabulary.

Run from the repository root (needs the Reuters-21578 source files in
``../shared/data/reuters21578``, or ``--source``)::

    python benchmarks/bench_noisy_or_raw.py        # ~2 min on 2 cores
    # the two small corpora, every fit timed three times (median; ~3 min)
    python benchmarks/bench_noisy_or_raw.py --corpora r4long rare \
        --components 50 100 150 --repeat 3 \
        --out benchmarks/results/bench_noisy_or_raw_repeat.json
    # a large vocabulary (11,929 words, 51 classes; ~4 min)
    python benchmarks/bench_noisy_or_raw.py --corpora r52 \
        --components 50 100 150 --out benchmarks/results/bench_noisy_or_raw_r52.json

The bundled Reuters matrices (``skbinvi.datasets.load_reuters``) use our own
lemmatized vocabulary, and the defaults were chosen on them. This benchmark
builds three other corpora from the same source, the way a user would, with
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
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

from _harness import ROOT, import_skbinvi, machine_info, table

import_skbinvi()

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(ROOT) / "tools"))
import build_datasets  # noqa: E402
from bench_noisy_or import _default_accuracy  # noqa: E402

CORPORA = ("r4long", "r7", "rare", "r52")
DEFAULT_CORPORA = ("r4long", "r7", "rare")


def raw_corpora(source, names=CORPORA):
    """The corpora ``names``: name -> (X_train, y_train, X_test, y_test), binary CSR."""
    from sklearn.feature_extraction.text import CountVectorizer

    docs = build_datasets.select_modapte(build_datasets.parse_reuters_sgml(source))
    single = [d for d in docs if len(d["topics"]) == 1 and d["body"]]
    n_train = Counter(d["topics"][0] for d in single if d["lewissplit"] == "TRAIN")
    n_test = Counter(d["topics"][0] for d in single if d["lewissplit"] == "TEST")
    r8 = set(build_datasets.R8_CATEGORIES)
    topics = {
        "r4long": {"crude", "trade", "money-fx", "interest"},
        "r7": r8 - {"earn"},
        "rare": {c for c in n_train
                 if c not in r8 and n_train[c] >= 10 and n_test[c] >= 5},
        "r52": {c for c in n_train if n_test[c] >= 1},
    }
    # r52: the whole vocabulary of words in two documents or more
    vectorizer_options = {"r52": dict(min_df=2, max_features=None)}
    out = {}
    for name in names:
        keep = topics[name]
        train = [d for d in single if d["topics"][0] in keep
                 and d["lewissplit"] == "TRAIN"]
        test = [d for d in single if d["topics"][0] in keep
                and d["lewissplit"] == "TEST"]
        options = dict(min_df=5, max_features=3000)
        options.update(vectorizer_options.get(name, {}))
        vectorizer = CountVectorizer(binary=True, stop_words="english", **options)
        X_train = vectorizer.fit_transform([d["body"] for d in train])
        X_test = vectorizer.transform([d["body"] for d in test])
        y_train = np.array([d["topics"][0] for d in train])
        y_test = np.array([d["topics"][0] for d in test])
        # documents with no word of the vocabulary carry nothing to classify
        rows_train = X_train.getnnz(axis=1) > 0
        rows_test = X_test.getnnz(axis=1) > 0
        out[name] = (X_train[rows_train].astype(np.float64), y_train[rows_train],
                     X_test[rows_test].astype(np.float64), y_test[rows_test])
    return out


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
    accuracy, _ = _default_accuracy(model.transform(X_train), y_train,
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
    parser.add_argument("--source", default=str(build_datasets.DEFAULT_REUTERS_SOURCE),
                        help="folder of the Reuters-21578 .sgm.gz files")
    parser.add_argument("--components", type=int, nargs="+", default=[50, 100])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--corpora", nargs="+", choices=CORPORA,
                        default=list(DEFAULT_CORPORA),
                        help="default: %(default)s (r52 only when named)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time every fit this many times, the methods taking "
                             "turns, and report the median (the fits are "
                             "deterministic; the last one is evaluated)")
    parser.add_argument("--out", default=str(Path(ROOT) / "benchmarks" / "results"
                                              / "bench_noisy_or_raw.json"))
    args = parser.parse_args(argv)
    from skbinvi import NoisyORFactorizer

    start = time.perf_counter()
    corpora = raw_corpora(Path(args.source))
    X0 = corpora["r4long"][0]
    from bench_noisy_or import _split_passes

    # compile (or load) the kernels first, those of the passes split between
    # threads too
    for method, split in itertools.product(("acp", "avi"), (False, True)):
        with warnings.catch_warnings(), _split_passes(split):
            warnings.simplefilter("ignore")
            model = NoisyORFactorizer(5, inference=method, max_iter=1).fit(X0[:100])
            model.score(X0[:10])
    results = {"machine": machine_info(), "repeat": args.repeat,
               "corpora": {}, "fits": []}
    rows = []
    for name in args.corpora:
        X_train, y_train, X_test, y_test = corpora[name]
        results["corpora"][name] = dict(
            n_train=X_train.shape[0], n_test=X_test.shape[0],
            n_features=X_train.shape[1], n_classes=len(set(y_train)),
            words_per_document=round(float(X_train.getnnz(axis=1).mean()), 1))
        for K in args.components:
            for seed in args.seeds:
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
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"Total wall time {results['total_seconds'] / 60:.1f} min; "
          f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
