"""Tests of DiversityMixtureOfExperts (the estimator around skbinvi.experts)."""

import functools
import pickle
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from _reference import experts as REF
from scipy import special
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.extmath import row_norms

from skbinvi import DiversityMixtureOfExperts
from skbinvi.datasets import load_adult, load_reuters
from skbinvi.experts import _estimator
from skbinvi.experts._variational import objective_and_aux
from skbinvi.experts._vmf import vmf_entropy

METHODS = [("vi", "mabn"), ("pr", "mabn"), ("mcmc", "mabn"), ("vi", "gaussian"),
           ("mcmc", "gaussian")]
FAST = dict(max_iter=30, n_mcmc_samples=100, burn_in=200)
TINY = dict(max_iter=3, n_mcmc_samples=5, burn_in=5)  # and _INNER_MAX_ITER = 1


def _two_expert_data(n=300, seed=0):
    """Gate by the sign of x_1, experts +4 x_2 and -4 x_2: one linear model fails."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 3))
    logit = np.where(X[:, 0] > 0, 4.0 * X[:, 1], -4.0 * X[:, 1])
    y = (rng.rand(n) < special.expit(logit)).astype(int)
    return X, y


def two_regimes(n, seed, p=20, flip=0.05):
    """The task of issue 12: the sign of x_0 decides which side of x_1 is class 1.

    n rows of p standard normal features, a fraction ``flip`` of the labels
    flipped (accuracy ceiling 1 - flip = 0.95); one linear model is at chance.
    """
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, p))
    y = np.where(X[:, 0] > 0, X[:, 1] > 0, X[:, 1] < 0).astype(int)
    flipped = rng.rand(n) < flip
    y[flipped] = 1 - y[flipped]
    return X, y


def _model(inference, prior, K=2, **kw):
    params = dict(FAST, inference=inference, prior=prior, random_state=0)
    params.update(kw)
    return DiversityMixtureOfExperts(K, **params)


@pytest.fixture(scope="module")
def fitted():
    X, y = _two_expert_data()
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for inference, prior in METHODS:
            out[inference, prior] = _model(inference, prior).fit(X, y)
    return X, y, out


# ---------------------------------------------------------------------------
# scikit-learn's common checks, tiny settings
# ---------------------------------------------------------------------------


@parametrize_with_checks([
    DiversityMixtureOfExperts(2, inference=inference, prior=prior, random_state=0,
                              **TINY)
    for inference, prior in METHODS
])
def test_sklearn_common_checks(estimator, check, monkeypatch):
    monkeypatch.setattr(_estimator, "_INNER_MAX_ITER", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# ---------------------------------------------------------------------------
# learning, attributes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_method_learns_the_two_experts(fitted, method):
    X, y, out = fitted
    model = out[method]
    Xt, yt = _two_expert_data(1000, seed=1)
    lr = LogisticRegression().fit(X, y).score(Xt, yt)
    # measured (seed 0): every method 0.86-0.89 held out (Bayes rule ~0.89),
    # one logistic regression ~0.5
    assert model.score(Xt, yt) > 0.8
    assert model.score(Xt, yt) > lr + 0.25
    assert model.n_active_components_[0] == 2
    assert model.responsibility_entropy_[0] < 0.6


@pytest.mark.parametrize("method", METHODS)
def test_fitted_attributes(fitted, method):
    X, y, out = fitted
    m = out[method]
    K, d = 2, X.shape[1]
    # one type whatever the number of classes: a leading problem axis
    assert m.expert_coef_.shape == (1, K, d) and m.gate_coef_.shape == (1, K, d)
    assert m.expert_intercept_.shape == (1, K) and m.gate_intercept_.shape == (1, K)
    assert m.expert_angle_mean_.shape == (1,) and m.gate_angle_var_.shape == (1,)
    assert 0 <= m.expert_angle_mean_[0] <= np.pi / 2 and m.expert_angle_var_[0] >= 0
    assert m.expert_usage_.shape == (1, K) and m.n_active_components_.dtype.kind == "i"
    assert m.fit_time_ > 0 and m.n_iter_ >= 1
    G = m.transform(X[:50])
    assert G.shape == (50, K)
    np.testing.assert_allclose(G.sum(axis=1), 1.0)
    P = m.predict_proba(X[:50])
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    if method[0] == "mcmc":
        # a chain has no ELBO: the loop's value is named for what it is
        assert not hasattr(m, "elbo_") and not hasattr(m, "elbo")
        h, final = m.log_joint_history_, m.log_joint_
    else:
        assert not hasattr(m, "log_joint_")
        h, final = m.elbo_history_, m.elbo_
    assert h.shape == (m.n_iter_,) and np.all(np.isfinite(h))
    assert np.isfinite(final) and m.converged_ in (True, False)
    if method[0] == "mcmc":
        assert m.expert_samples_.shape == (1, 100, K, d + 1)
        rates = m.acceptance_rates_[0]
        assert all(0.0 < r < 1.0 for r in rates.values())
        # 200 burn-in + 100 kept sweeps, in blocks of 25
        assert m.log_posterior_trace_.shape == (1, 300) and m.n_iter_ == 12
        assert m.converged_
        # the predictive mean equals the average over the kept samples
        np.testing.assert_allclose(m.expert_coef_[0],
                                   m.expert_samples_[0, :, :, :d].mean(0))
    else:
        # per sample, never decreasing
        assert np.all(np.diff(h) >= -1e-9 * np.abs(h[:-1]))
        assert not hasattr(m, "acceptance_rates_")
        # elbo_ solves each row's gate bound to 1e-12 nats, the iterations to
        # 1e-8 nats (a looser but valid bound): never below, at most ~1e-8 above
        assert h[-1] - 1e-12 <= m.elbo_ <= h[-1] + 1e-7


def test_elbo_of_new_data(fitted):
    X, y, out = fitted
    Xt, yt = _two_expert_data(500, seed=11)
    for method, m in out.items():
        if method[0] == "mcmc":
            # the log joint of rows, as the loop monitors it (no public elbo)
            value = functools.partial(_design_objective, m)
            final = m.log_joint_
        else:
            value, final = m.elbo, m.elbo_
        # the training rows give elbo_, in nats per sample
        assert value(X, y) == pytest.approx(final, rel=1e-9), method
        new = value(Xt, yt)
        assert np.isfinite(new)
        if method[0] != "mcmc":  # a bound on log p(y | X) / n, so below 0
            assert new < 0
        # shuffled labels are explained worse
        assert value(Xt, np.random.RandomState(0).permutation(yt)) < new
        # per row: the KL term (the log prior for "mcmc") is charged per
        # training row, so the value does not depend on how many rows are
        # scored; divided by the number of rows scored it weighed 10 times
        # its training weight on a held-out tenth (early stopping)
        assert value(np.r_[Xt, Xt], np.r_[yt, yt]) == pytest.approx(new, rel=1e-9)
        assert value(Xt[:30], yt[:30]) > -3 * abs(final), method
    with pytest.raises(ValueError, match="not seen in fit"):
        out["vi", "mabn"].elbo(Xt, yt + 5)
    with pytest.raises(ValueError, match="needs the labels y"):
        out["vi", "mabn"].elbo(Xt)


def _design_objective(model, X, y):
    """The fit loop's value of the rows (X, y) (the log joint for "mcmc")."""
    return model._elbo_per_sample(*model._check_elbo_input(X, y))


def _mean_cosine(model, which):
    A = np.column_stack([getattr(model, f"{which}_coef_")[0],
                         getattr(model, f"{which}_intercept_")[0]])
    U = A / np.linalg.norm(A, axis=1, keepdims=True)
    return float((U @ U.T)[np.triu_indices(len(U), 1)].mean())


@pytest.mark.slow
def test_diversity_strength_spreads_the_experts():
    # The Type II MABN pulls u_i towards -sum_{j<i} u_j, so a large kappa
    # drives the K directions towards a regular simplex, mean pairwise cosine
    # -1/(K - 1). (The non-obtuse angles of Omega do not see this: antipodal
    # vectors have angle 0 there.) One fit's value at kappa = 10 moves with
    # rounding (random_state=0: -0.040, -0.056, -0.064, -0.075 and -0.114 in
    # successive versions), so the cosines are averaged over three starts.
    # Measured (K = 4, 60 iterations, random_state 0-2): kappa 0 / 10 / 100
    # give mean cosines 0.009 / -0.173 / -0.302 between the experts (limit
    # -1/3), -0.181 / -0.262 / -0.301 between the gates.
    X, y = _two_expert_data(200, seed=2)
    cos = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for kappa in (0.0, 10.0, 100.0):
            fits = [DiversityMixtureOfExperts(4, diversity_strength=kappa,
                                              inference="vi", max_iter=60, tol=0.0,
                                              random_state=seed).fit(X, y)
                    for seed in range(3)]
            cos[kappa] = tuple(np.mean([_mean_cosine(m, part) for m in fits])
                               for part in ("expert", "gate"))
    # kappa = 10 already brings the experts close to the limit -1/3
    assert cos[10.0][0] < cos[0.0][0] - 0.05
    assert cos[100.0][0] < cos[10.0][0] - 0.03
    assert -1 / 3 - 1e-9 < cos[100.0][0] < -0.2
    assert cos[100.0][1] < cos[0.0][1] - 0.03


def test_pr_regularization_spreads_the_experts():
    X, y = _two_expert_data(200, seed=2)
    kw = dict(inference="pr", max_iter=20, random_state=0, gate_regularization=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        off = DiversityMixtureOfExperts(4, expert_regularization=0.0, **kw).fit(X, y)
        on = DiversityMixtureOfExperts(4, expert_regularization=300.0, **kw).fit(X, y)
    assert on.expert_angle_mean_[0] > off.expert_angle_mean_[0] + 0.1


# ---------------------------------------------------------------------------
# the start: live gates (issue 12)
# ---------------------------------------------------------------------------


def _em_mixture_accuracy(X, y, Xt, yt, n_iter=60):
    """Test accuracy of a maximum-likelihood mixture of two logistic experts
    and a logistic gate (scikit-learn's LogisticRegression, responsibilities
    as sample weights), fitted by EM from the true regimes (responsibility
    0.9 on the side x_0 > 0): the mixture's model class without priors,
    given the answer at the start."""
    n = len(y)
    r = np.where(X[:, 0] > 0, 0.9, 0.1)
    gate_y = np.r_[np.ones(n), np.zeros(n)]
    for _ in range(n_iter):
        experts = [LogisticRegression().fit(X, y, sample_weight=w + 1e-8)
                   for w in (r, 1 - r)]
        gate = LogisticRegression().fit(np.vstack([X, X]), gate_y,
                                        sample_weight=np.r_[r, 1 - r] + 1e-8)
        g = gate.predict_proba(X)[:, 1]
        lik = [e.predict_proba(X)[np.arange(n), y] for e in experts]
        r_new = g * lik[0] / (g * lik[0] + (1 - g) * lik[1])
        done, r = np.max(np.abs(r_new - r)) < 1e-6, r_new
        if done:
            break
    g = gate.predict_proba(Xt)[:, 1]
    prob = (g * experts[0].predict_proba(Xt)[:, 1]
            + (1 - g) * experts[1].predict_proba(Xt)[:, 1])
    return np.mean((prob > 0.5) == yt)


@pytest.mark.slow
@pytest.mark.parametrize("train_seed", [0, 1])
def test_two_regimes_every_method_with_defaults(train_seed):
    """Issue 12's task: 2,000 training rows, 20 features, 5% flipped labels, K = 4.

    Each fit is scored on 50,000 test rows (seed train_seed + 200), which
    gives its expected accuracy to about 0.0013; 2,000 test rows, the issue's
    size, have a standard error of about 0.007. Measured (seed 0 / seed 1):
    vi 0.9024 / 0.9027, mcmc 0.8998 / 0.9082, Gaussian vi 0.9023 / 0.9039;
    LogisticRegression about 0.50; an EM fit of the same model class without
    priors, started from the true regimes, 0.9003 / 0.9026. The chain's
    accuracy moves by about 0.005 with its start (seeds 0-3: 0.8998, 0.9082,
    0.8872, 0.8916 from the held-out start, 0.9064, 0.9125, 0.8860, 0.8921
    from the ELBO's), so "mcmc" is held to the EM fit only. Over training
    seeds 0-9 (benchmarks/bench_moe.py, section
    two_regimes) "vi" averages 0.905 and is above 0.90 on 8 of them and
    above the EM fit on 9 (seed 8: 0.9005 against 0.9016); seeds 2 and 3
    end at 0.896-0.897, where the EM fit ends at 0.894 and 0.890: 2,000
    labels tilt a learned gate by 1.7-3.4 degrees. A logistic regression
    per regime with the *true* gate scores 0.916-0.923, but that gate is not
    learnable exactly from 2,000 labels: the mixture's experts under the
    true gate reach that level (checked below), and the gap comes from the
    learned gate's direction (user guide, "Results").
    """
    X, y = two_regimes(2000, train_seed)
    Xt, yt = two_regimes(50000, train_seed + 200)
    lr = LogisticRegression().fit(X, y).score(Xt, yt)
    em = _em_mixture_accuracy(X, y, Xt, yt)
    assert em > 0.895
    for inference, prior in METHODS[:4]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = DiversityMixtureOfExperts(4, inference=inference, prior=prior,
                                          random_state=0).fit(X, y)
        acc = m.score(Xt, yt)
        assert acc > 0.90 or inference == "mcmc", (inference, prior, acc)
        assert acc > em - 0.002, (inference, prior, acc, em)
        assert acc > lr + 0.3
        # the gates live: two regimes, two experts in clear use
        assert m.responsibility_entropy_[0] < 0.3
        assert m.n_active_components_[0] >= 2
        if (inference, prior) == ("vi", "mabn"):
            _check_experts_match_true_gate_ceiling(m, X, y, Xt, yt)


def _check_experts_match_true_gate_ceiling(m, X, y, Xt, yt):
    """The vi experts, routed by the true gate, score as well as a logistic
    regression per true regime (within 0.015): what the mixture loses is in
    its learned gate, not in its experts or their prior."""
    top = np.argsort(-m.expert_usage_[0])[:2]
    G = m.gate_coef_[0]
    # the task is symmetric in x_0 and x_1: the mixture may gate on either
    axis = int(np.argmax(np.abs(G[top[0], :2] - G[top[1], :2])))
    pos, neg = top if G[top[0], axis] > G[top[1], axis] else top[::-1]
    E = Xt @ m.expert_coef_[0].T + m.expert_intercept_[0]
    routed = np.mean(np.where(Xt[:, axis] > 0, E[:, pos] > 0, E[:, neg] > 0) == yt)
    hits = 0
    for side in (True, False):
        tr, te = (X[:, axis] > 0) == side, (Xt[:, axis] > 0) == side
        hits += np.sum(LogisticRegression().fit(X[tr], y[tr]).predict(Xt[te]) == yt[te])
    assert routed > hits / len(yt) - 0.015, (routed, hits / len(yt))


def test_start_candidates_on_threads_give_the_same_fit():
    """The BMEM-G start runs its candidates on Numba's threads; with one
    thread they run one after another, and the fit is the same to the bit."""
    n_threads = numba.get_num_threads()
    if n_threads < 2:
        pytest.skip("needs two Numba threads")
    X, y = two_regimes(600, 3)
    fits = []
    for threads in (1, n_threads):
        numba.set_num_threads(threads)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fits.append(DiversityMixtureOfExperts(3, max_iter=4, random_state=0)
                            .fit(X, y))
        finally:
            numba.set_num_threads(n_threads)
    for name in ("expert_coef_", "gate_coef_", "elbo_history_"):
        np.testing.assert_array_equal(getattr(fits[0], name), getattr(fits[1], name))


def test_start_validation_split_is_stratified_disjoint_and_covering():
    """The start holds out a fifth of each class; with fewer than
    _START_MIN_CLASS_ROWS rows of a class it holds out nothing."""
    rng = np.random.default_rng(0)
    y = (rng.random(203) < 0.3).astype(float)
    fit_rows, held_out = _estimator._validation_split(y, np.random.RandomState(0))
    assert np.intersect1d(fit_rows, held_out).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([fit_rows, held_out])),
                                  np.arange(y.size))
    for label in (0, 1):
        n = int(np.sum(y == label))
        assert np.sum(y[held_out] == label) == round(_estimator._START_HELD_OUT * n)
    y_rare = np.zeros(50)
    y_rare[:_estimator._START_MIN_CLASS_ROWS - 1] = 1.0
    assert _estimator._validation_split(y_rare, np.random.RandomState(0)) == (None,
                                                                              None)
    # and the fit still runs, choosing among the random candidates by ELBO
    X = np.random.RandomState(1).normal(size=(50, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = DiversityMixtureOfExperts(3, max_iter=5, random_state=0).fit(X, y_rare)
    assert np.isfinite(model.elbo_)


def test_one_expert_candidate_is_the_ridge_logistic_regression():
    X, y = _two_expert_data(200)
    Xd = np.hstack([X, np.ones((X.shape[0], 1))])
    template = _estimator.gaussian_init(4, Xd.shape[1], 2.0, np.random.RandomState(0),
                                        _estimator._GAUSSIAN_INIT_SCALE)
    one = _estimator._one_expert_candidate(template, Xd, y, 2.0)
    lr = LogisticRegression(C=4.0, fit_intercept=False, max_iter=1000).fit(Xd, y)
    np.testing.assert_allclose(one.means[0][0], lr.coef_[0], rtol=1e-3, atol=1e-4)
    # the other experts and the gates are the template's, gate 0 takes the rows
    np.testing.assert_array_equal(one.means[0][1:], template.means[0][1:])
    gate = special.softmax(Xd @ one.means[1].T, axis=1)
    assert gate[:, 0].min() > 0.8
    assert template.means[1][0, -1] != one.means[1][0, -1]  # a copy, not a view


def test_start_gives_one_expert_where_one_logistic_regression_is_the_truth():
    """Rows from one logistic model: held-out rows do not favour a mixture,
    so the fit keeps one expert in use and predicts as LogisticRegression
    does; on the two-regime task, where one expert cannot fit, it keeps
    several."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(1500, 8))
    w = rng.normal(size=8)
    y = (rng.random(1500) < special.expit(X @ w + 0.5)).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = DiversityMixtureOfExperts(random_state=0).fit(X[:1000], y[:1000])
    lr = LogisticRegression().fit(X[:1000], y[:1000])
    assert model.n_active_components_[0] == 1
    agree = np.mean(model.predict(X[1000:]) == lr.predict(X[1000:]))
    assert agree > 0.98, agree
    Xr, yr = two_regimes(1000, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mix = DiversityMixtureOfExperts(random_state=0).fit(Xr, yr)
    assert mix.n_active_components_[0] >= 2


@pytest.mark.slow
def test_real_tables_not_below_logistic_regression():
    """Real-data floor beside the baseline of the same run: on scikit-learn's
    breast cancer and digits 3 against 8 the default mixture is within half a
    point of LogisticRegression(); on digits even against odd, which one
    linear model cannot separate, above it by 3 points. Accuracy of 3-fold CV
    averaged over three shuffles (seeds 0-2): on one split a row is 0.28
    point of digits 3 against 8, and the two models, nearly the same
    hyperplane there, trade single rows from one split to the next."""
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    Xd, yd = load_digits(return_X_y=True)
    keep = np.isin(yd, (3, 8))
    tables = {"breast cancer": (*load_breast_cancer(return_X_y=True), -0.005),
              "digits 3 vs 8": (Xd[keep], (yd[keep] == 3).astype(int), -0.005),
              "digits even vs odd": (Xd, (yd % 2 == 0).astype(int), 0.03)}
    cvs = [StratifiedKFold(3, shuffle=True, random_state=seed) for seed in range(3)]
    for name, (X, y, margin) in tables.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mixture = make_pipeline(StandardScaler(),
                                    DiversityMixtureOfExperts(random_state=0))
            mix = np.mean([cross_val_score(mixture, X, y, cv=cv).mean() for cv in cvs])
        lr = np.mean([cross_val_score(make_pipeline(StandardScaler(),
                                                    LogisticRegression(max_iter=5000)),
                                      X, y, cv=cv).mean() for cv in cvs])
        assert mix >= lr + margin, (name, mix, lr)


def _paper_magnitude_priors(monkeypatch):
    """The paper's Gamma(2, 0.5) magnitudes for experts and gates and one
    design for both (no intercept scale), under which the dead gates of the
    old random start were found (with the default soft gate prior one gate
    takes every row instead)."""
    monkeypatch.setattr(_estimator, "_EXPERT_MAGNITUDE", None)
    monkeypatch.setattr(_estimator, "_EXPERT_INTERCEPT_SCALE", 1.0)
    monkeypatch.setattr(_estimator, "_GATE_MAGNITUDE_SHAPE", 2.0)
    monkeypatch.setattr(_estimator, "_GATE_MAGNITUDE_RATE", 0.5)


def _adult_subset():
    X, y = load_adult(return_X_y=True)
    idx = np.random.RandomState(0).choice(X.shape[0], 4000, replace=False)
    return X[idx], y[idx]


@pytest.mark.slow
@pytest.mark.parametrize("inference", ["vi", "pr"])
def test_adult_bmemg_start_keeps_gates_alive(inference, monkeypatch):
    """Issue 12 acceptance: Adult, 4,000 rows, K = 5, max_iter = 40.

    Measured (this subset, seed 0; benchmarks/bench_moe.py, section
    adult_start, 2026-11-25, rerun after the shrinking over-relaxation
    factor): vi angle 1.13 rad, mean max gate probability 1.000, ELBO -1,848
    nats against -5,494 from the old start; pr 1.10 rad, 1.000, -1,852
    against -5,492.
    """
    X, y = _adult_subset()
    _paper_magnitude_priors(monkeypatch)
    kw = dict(n_components=5, inference=inference, max_iter=40, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        new = DiversityMixtureOfExperts(**kw).fit(X, y)
        monkeypatch.setattr(_estimator, "_INIT", "random")
        old = DiversityMixtureOfExperts(**kw).fit(X, y)
    # the old start's gates died: uniform responsibilities, one expert in use
    # (reported in the fitted attributes, not warned about)
    assert old._start == "random" and new._start == "bmemg"
    assert old.responsibility_entropy_[0] > 0.99 and old.n_active_components_[0] == 1
    assert new.responsibility_entropy_[0] < 0.5
    assert new.expert_angle_mean_[0] > 0.5
    assert new.transform(X).max(axis=1).mean() > 0.5
    assert (new.elbo_ - old.elbo_) * X.shape[0] > 1000.0
    assert old.transform(X).max(axis=1).mean() < 0.25


@pytest.mark.slow
def test_old_start_gates_die_mechanism(monkeypatch):
    """Why init='bmemg' exists. From the old start (uniform random mean
    directions, kappa 10, Gamma(5, 5) magnitudes) in p = 124, E[eta] =
    E[g] A_p(kappa) mu ~ 0.08 mu: gate logits ~ 0.03, responsibilities 1/K.
    There the gain of moving a gate's mean is zero to first order, while the
    variance penalty is first order, so the ascent sheds the gates' magnitude
    and concentration: E[g] A_p(kappa) -> 0 and phi -> 1/K, a fixed point
    where every expert solves the same weighted logistic regression.
    """
    X, y = _adult_subset()
    K = 5
    monkeypatch.setattr(_estimator, "_INIT", "random")
    _paper_magnitude_priors(monkeypatch)
    m = DiversityMixtureOfExperts(K, max_iter=40, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X, y)
    eta = m._states[0].eta
    # E[g] A_p(kappa) at the start
    start_scale = 1.0 * REF.bessel_ratio(X.shape[1] + 1, 10.0)
    scale = eta.r / eta.s * REF.bessel_ratio(X.shape[1] + 1, eta.kappa)
    assert start_scale > 0.05
    assert np.all(scale < 0.1 * start_scale)
    # the variational responsibilities phi of the bound at the fitted q (the
    # fitted model does not keep the training rows' auxiliaries)
    Xd = m._design(X)
    cfg, lams, consts = m._engine().config(Xd.shape[1])
    target = m._targets(np.searchsorted(m.classes_, y))[0]
    phi = objective_and_aux(Xd, target, row_norms(Xd, squared=True),
                            eta=eta, beta=m._states[0].beta, cfg=cfg, consts=consts,
                            lams=lams)[1][0]
    assert np.abs(phi - 1.0 / K).mean() < 0.01 and np.abs(phi - 1.0 / K).max() < 0.1
    assert m.responsibility_entropy_[0] > 0.99
    assert m.n_active_components_[0] == 1
    assert m.expert_angle_mean_[0] < 0.1  # the experts merged


def test_n_init_keeps_the_best_and_warm_start_continues():
    X, y = two_regimes(400, 3, p=5)
    kw = dict(n_components=4, prior="gaussian", max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        one = DiversityMixtureOfExperts(**kw).fit(X, y)
        three = DiversityMixtureOfExperts(n_init=3, **kw).fit(X, y)
        # the first of the three runs is the single run (same random stream)
        assert three.elbo_ >= one.elbo_ - 1e-12
        for inference in ("vi", "mcmc"):
            m = DiversityMixtureOfExperts(2, inference=inference, max_iter=3,
                                          warm_start=True, random_state=0,
                                          n_mcmc_samples=20, burn_in=25)
            name = "elbo_history_" if inference == "vi" else "log_joint_history_"
            m.fit(X, y)
            first = getattr(m, name).copy()
            m.fit(X, y)
            history = getattr(m, name)
            assert history.shape == (first.size + m.n_iter_ - first.size,)
            np.testing.assert_array_equal(history[:first.size], first)
            if inference == "vi":
                assert history[first.size] >= first[-1] - 1e-9


def test_verbose_one_line_per_iteration(capsys):
    X, y = _two_expert_data(100, seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        DiversityMixtureOfExperts(2, max_iter=3, tol=0.0, verbose=1,
                                  random_state=0).fit(X, y)
        DiversityMixtureOfExperts(2, inference="mcmc", burn_in=25, n_mcmc_samples=25,
                                  verbose=1, random_state=0).fit(X, y)
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if "] iteration " in line]
    assert len(lines) == 3 + 2
    for line in lines:
        assert line.startswith("[DiversityMixtureOfExperts] iteration ")
        assert "nats/sample" in line and line.endswith(" s")
    # the chain has no ELBO: its lines name the log joint density
    assert all(": ELBO " in line for line in lines[:3])
    assert all(": log joint " in line for line in lines[3:])


# ---------------------------------------------------------------------------
# input handling
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_sparse_equals_dense(method):
    X, y = _two_expert_data(120, seed=3)
    X = np.where(np.abs(X) < 0.5, 0.0, X)
    kw = dict(max_iter=3, n_mcmc_samples=5, burn_in=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = _model(*method, **kw).fit(X, y)
        b = _model(*method, **kw).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(sp.csr_matrix(X)),
                               rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_deterministic_and_pickle(method):
    X, y = _two_expert_data(100, seed=4)
    kw = dict(max_iter=3, n_mcmc_samples=5, burn_in=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = _model(*method, **kw).fit(X, y)
        b = _model(*method, **kw).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(a.predict_proba(X), c.predict_proba(X))
    np.testing.assert_array_equal(a.transform(X), c.transform(X))


@pytest.mark.parametrize("method", [("vi", "mabn"), ("pr", "mabn"), ("vi", "gaussian")])
def test_fitted_model_does_not_keep_the_training_rows(method):
    """The rows' auxiliary bound parameters and scratch arrays (O(n K)) are
    dropped after fit: a pickle does not grow with the training set (it was
    4.6 MB for 10,000 rows of make_moons at K = 4, 9 kB now), and a warm start
    from the pickle continues exactly as one from the fitted model (both
    recompute the auxiliaries at the fitted q), never below the last ELBO."""
    sizes = []
    for n in (200, 2000):
        X, y = _two_expert_data(n, seed=6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = _model(*method, K=3, max_iter=4, warm_start=True).fit(X, y)
        sizes.append(len(pickle.dumps(model)))
    assert sizes[1] < 1.1 * sizes[0], sizes
    copy_ = pickle.loads(pickle.dumps(model))
    first = model.elbo_history_.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
        copy_.fit(X, y)
    np.testing.assert_array_equal(model.elbo_history_, copy_.elbo_history_)
    np.testing.assert_array_equal(model.predict_proba(X), copy_.predict_proba(X))
    assert model.elbo_history_[first.size] >= first[-1] - 1e-9


def test_multiclass_one_vs_rest():
    rng = np.random.RandomState(5)
    X = rng.normal(size=(240, 2))
    y = np.array(["a", "b", "c"])[np.argmax(X @ np.array([[1, 0, -1], [0, 1, -1]]), 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = DiversityMixtureOfExperts(2, max_iter=10, random_state=0).fit(X, y)
    assert m.score(X, y) > 0.85
    assert m.expert_coef_.shape == (3, 2, 2) and m.gate_intercept_.shape == (3, 2)
    assert m.expert_angle_mean_.shape == (3,) and m.n_active_components_.shape == (3,)
    assert m.transform(X).shape == (240, 6)
    # one history for the whole fit: the ELBOs of the three problems summed
    assert m.elbo_history_.shape == (m.n_iter_,)
    assert m.elbo(X, y) == pytest.approx(m.elbo_, rel=1e-9)
    np.testing.assert_allclose(m.predict_proba(X).sum(axis=1), 1.0)
    assert set(m.predict(X)) <= set("abc")



def test_multiclass_unused_experts_are_reported_per_problem():
    """With several one-vs-rest problems every problem reports its own count of
    experts in use (n_active_components_, expert_usage_), without a warning:
    fewer experts than n_components is what the prior is for."""
    rng = np.random.RandomState(5)
    X = rng.normal(size=(240, 2))
    y = np.array(["a", "b", "c"])[np.argmax(X @ np.array([[1, 0, -1], [0, 1, -1]]), 1)]
    m = DiversityMixtureOfExperts(6, max_iter=10, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.fit(X, y)
    assert not [w for w in caught if not issubclass(w.category, ConvergenceWarning)]
    assert m.n_active_components_.shape == (3,) and np.any(m.n_active_components_ < 6)
    assert m.expert_usage_.shape == (3, 6)
    np.testing.assert_array_equal(
        m.n_active_components_,
        np.maximum(1, np.sum(m.expert_usage_ >= 0.01, axis=1)))
    assert np.all(m.expert_usage_.sum(axis=1) <= 1.0 + 1e-12)


def test_warm_start_error_names_the_last_fit_inference():
    """A warm "pr" fit after "vi" continues the same state; a later refused
    change names "pr", the method of the last fit, not the first one."""
    X, y = _two_expert_data(100, seed=3)
    m = DiversityMixtureOfExperts(2, max_iter=3, tol=None, warm_start=True,
                                  random_state=0)
    with warnings.catch_warnings():
        m.fit(X, y)
        m.set_params(inference="pr").fit(X, y)
    with pytest.raises(ValueError, match="inference='pr' but now has inference='mcmc'"):
        m.set_params(inference="mcmc").fit(X, y)


def test_init_concentration_is_bounded(monkeypatch):
    """Beyond the package's largest concentration (1e8) scipy's ive is NaN and
    the series fallback allocated without bound (MemoryError). The random
    start's concentration (_INIT_CONCENTRATION, an advanced setting) is within
    that bound, and the bound itself fits."""
    from skbinvi.experts._ascent import KAPPA_MAX

    assert 0 < _estimator._INIT_CONCENTRATION <= KAPPA_MAX == 1e8
    X, y = _two_expert_data(50)
    monkeypatch.setattr(_estimator, "_INIT", "random")
    monkeypatch.setattr(_estimator, "_INIT_CONCENTRATION", 1e8)
    m = DiversityMixtureOfExperts(2, max_iter=2, tol=None, random_state=0)
    with warnings.catch_warnings():
        m.fit(X, y)
    assert np.isfinite(m.elbo_)

def _stop_iteration(history, tol, patience):
    """First iteration at which the tol rule of the fit loop ends a run."""
    best, no_change = -np.inf, 0
    for it, value in enumerate(history, start=1):
        no_change = 0 if value > best + tol else no_change + 1
        best = max(best, value)
        if no_change >= patience:
            return it
    return None


def test_multiclass_tol_applies_to_each_one_vs_rest_problem():
    """With n one-vs-rest problems the ELBO sums n ELBOs, so tol is n * tol on it.

    Measured on scikit-learn's digits (10 classes, defaults): the rule on the
    sum with tol itself ran all 100 iterations and warned, each problem still
    gaining about 1e-4 nats per sample per iteration; with tol per problem the
    fit converges after 52, at the same accuracy (0.944).
    """
    rng = np.random.RandomState(5)
    X = rng.normal(size=(300, 3))
    y = np.argmax(X @ rng.normal(size=(3, 4)) + 0.5 * rng.normal(size=(300, 4)), 1)
    tol = 1e-2
    with warnings.catch_warnings():
        m = DiversityMixtureOfExperts(3, tol=tol, max_iter=200, random_state=0
                                      ).fit(X, y)
    h = m.elbo_history_
    assert m.converged_
    assert m.n_iter_ == _stop_iteration(h, 4 * tol, m.n_iter_no_change)
    # the rule on the sum with tol itself would have gone on
    assert _stop_iteration(h, tol, m.n_iter_no_change) in (None, m.n_iter_)
    assert _stop_iteration(h[:-1], 4 * tol, m.n_iter_no_change) is None
    # two classes: one problem, tol as given
    yb = (y == 0).astype(int)
    with warnings.catch_warnings():
        b = DiversityMixtureOfExperts(3, tol=tol, max_iter=200, random_state=0
                                      ).fit(X, yb)
    assert b.converged_
    assert b.n_iter_ == _stop_iteration(b.elbo_history_, tol, b.n_iter_no_change)
    # the warning names the rule per problem
    with pytest.warns(ConvergenceWarning, match=r"per problem \(the ELBO sums 4\)"):
        with warnings.catch_warnings():
            DiversityMixtureOfExperts(3, tol=1e-9, max_iter=2, random_state=0
                                      ).fit(X, y)


def test_set_output_and_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = _two_expert_data(100, seed=13)
    X = pd.DataFrame(X, columns=["a", "b", "c"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = DiversityMixtureOfExperts(3, max_iter=3, random_state=0).fit(X, y)
    names = m.get_feature_names_out()
    assert list(names) == [f"diversitymixtureofexperts{k}" for k in range(3)]
    m.set_output(transform="pandas")
    out = m.transform(X)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == list(names)


def test_no_intercept_and_inputs_unchanged():
    X, y = _two_expert_data(100, seed=6)
    X0, y0 = X.copy(), y.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = DiversityMixtureOfExperts(2, fit_intercept=False, max_iter=3,
                                      random_state=0).fit(X, y)
    np.testing.assert_array_equal(m.expert_intercept_, 0.0)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


def test_convergence_warning_and_tol():
    X, y = _two_expert_data(100, seed=7)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        DiversityMixtureOfExperts(2, max_iter=1, tol=0.0, random_state=0).fit(X, y)
    m = DiversityMixtureOfExperts(2, max_iter=200, tol=1e-3, random_state=0).fit(X, y)
    assert m.converged_ and m.n_iter_ < 200


@pytest.mark.parametrize(
    "X, y, match",
    [
        (np.array([[0.0, np.nan], [1.0, 2.0]]), [0, 1], "NaN"),
        (np.array([[0.0, np.inf], [1.0, 2.0]]), [0, 1], "infinity"),
        (np.ones((4, 2)), [1, 1, 1, 1], "two classes in y; got only 1.$"),
        (np.ones((4, 2)), np.array(["a"] * 4, dtype=object), "got only 'a'.$"),
        (np.ones((4, 2)), [0, 1, 0], "inconsistent numbers of samples"),
        (np.ones(4), [0, 1, 0, 1], "2D array"),
        (np.ones((0, 2)), [], "0 sample"),
        (np.ones((4, 2)), [0.1, 0.5, 0.2, 0.7], "continuous"),
        (np.array([["a", "b"], ["c", "d"]]), [0, 1], "convert"),
        (np.array([[0.0, 1e150], [1.0, 2.0], [3.0, -1e150]]), [0, 1, 0],
         "common scale"),
    ],
)
def test_bad_input(X, y, match):
    with pytest.raises(ValueError, match=match):
        DiversityMixtureOfExperts(2, max_iter=2).fit(X, y)


@pytest.mark.parametrize("inference", ["vi", "pr", "mcmc"])
def test_extreme_scales_finite_or_clear_error(inference):
    """Issue 13: features scaled by 1e150 give a clear ValueError, large but
    representable scales a finite result (never a LinAlgError)."""
    X, y = _two_expert_data(60, seed=14)
    kw = dict(inference=inference, max_iter=3, n_mcmc_samples=5, burn_in=5,
              random_state=0)
    with pytest.raises(ValueError, match="common scale"):
        DiversityMixtureOfExperts(2, **kw).fit(X * 1e150, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for scale in (1e-150, 1e6, 1e30):
            m = DiversityMixtureOfExperts(2, **kw).fit(X * scale, y)
            assert np.all(np.isfinite(m.predict_proba(X * scale)))
            assert np.isfinite(m.log_joint_ if inference == "mcmc" else m.elbo_)


@pytest.mark.slow
def test_sparse_two_million_columns_no_dense_square(monkeypatch):
    """Issue 13: 2,000,000 mostly empty columns must not allocate p x p (29 TiB).

    (Slow, about 12 s on a shared machine: the K x 2,000,000 mean directions
    are dense; the memory is O(K p + nnz), the time O(K p) per evaluation.
    The factorized BMEM-G start runs on the 801 columns the rows use (800
    and the intercept) and leaves the others at the prior, their optimum;
    over all the columns it took 104 of the fit's 117 s.)
    The 800 ones are placed directly: ``scipy.sparse.random`` took a minute
    and 3 GB to draw them from the 4e8 cells.
    """
    rng = np.random.RandomState(0)
    X = sp.csr_matrix((np.ones(800), (rng.randint(0, 200, 800),
                                      rng.randint(0, 2_000_000, 800))),
                      shape=(200, 2_000_000))
    X.sum_duplicates()
    X.data[:] = 1.0
    y = np.arange(200) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        monkeypatch.setattr(_estimator, "_INNER_MAX_ITER", 1)
        m = DiversityMixtureOfExperts(2, max_iter=1, random_state=0).fit(X, y)
    assert np.all(np.isfinite(m.predict_proba(X[:5])))
    with pytest.raises(ValueError, match="covariance"):
        DiversityMixtureOfExperts(2, prior="gaussian", max_iter=2).fit(X, y)


def _wide_binary_rows(p):
    """120 binary rows with about 5 of p features on each; y alternates."""
    rng = np.random.RandomState(0)
    rows, cols = rng.randint(0, 120, 600), rng.randint(0, p, 600)
    X = sp.csr_matrix((np.ones(600), (rows, cols)), shape=(120, p))
    X.sum_duplicates()
    X.data[:] = 1.0
    return X, np.arange(120) % 2


def _traced_fit_peak(model, X, y):
    """Peak traced memory (bytes) of model.fit(X, y), the compiled kernels
    loaded before the trace; the fit must predict finite probabilities."""
    import tracemalloc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X[:, :20], y)
        tracemalloc.start()
        try:
            model.fit(X, y)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert np.all(np.isfinite(model.predict_proba(X[:5])))
    return peak


@pytest.mark.parametrize("inference", ["vi", "pr", "mcmc"])
def test_start_on_wide_data_forms_no_dense_square(inference):
    """With K p^2 > 2e7 the BMEM-G start of every method is the factorized
    one, O(nnz K) per step: no p x p matrix may be formed (until this version
    "vi" and "pr" fell back to the random start there, and the
    Metropolis-Hastings start was a draw from the prior; SciPy's vMF sampler,
    used before that, built and factorized one p x p matrix per vector: 177 s
    and 1 GB for this fit at p = 5,000)."""
    p = 3000
    X, y = _wide_binary_rows(p)
    model = DiversityMixtureOfExperts(5, inference=inference, burn_in=5,
                                      n_mcmc_samples=5, max_iter=2, random_state=0)
    peak = _traced_fit_peak(model, X, y)
    assert peak < 8 * p * p / 4  # a quarter of one p x p float64 matrix
    if inference != "mcmc":
        assert model._start == "bmemg"


def test_factorized_start_above_100_design_columns():
    """The rule of the start: full covariances up to 100 design columns (the
    intercept included) while K p^2 <= 2e7, the factorized q beyond."""
    from skbinvi.experts._estimator import _diagonal_start

    for p, K, expected in ((65, 10, False), (100, 10, False), (101, 10, True),
                           (124, 10, True),
                           (785, 10, True), (100, 2001, True), (100, 2000, False)):
        assert _diagonal_start(np.zeros((1, p)), K) == bool(expected), (p, K)


@pytest.mark.slow
def test_gates_live_on_wide_text_beyond_the_covariance_limit():
    """Reuters bodies on their 2,000 most frequent words (K p^2 = 4e7 > 2e7),
    acq against the rest, default fit: the factorized start keeps the gates
    alive. Until this version the start fell back to "random" there and the
    gates died (responsibility entropy 1.00, ELBO -1.390 nats per sample,
    test accuracy 0.978); measured now (seed 0): 0.002, -0.382, 0.982, in
    8 s on one thread. The accuracy floor is a logistic regression on the
    same words (0.984), in the same test, less one point."""
    train, test = (load_reuters(subset=s, text="body") for s in ("train", "test"))
    X, Xt = sp.csr_matrix(train.data), sp.csr_matrix(test.data)
    cols = np.argsort(-np.asarray(X.sum(axis=0)).ravel(), kind="stable")[:2000]
    X, Xt = X[:, cols], Xt[:, cols]
    y, yt = np.asarray(train.target)[:, 0], np.asarray(test.target)[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = DiversityMixtureOfExperts(10, random_state=0).fit(X, y)
    assert model._start == "bmemg"
    assert model.responsibility_entropy_[0] < 0.5
    assert model.elbo_ > -1.0
    lr = LogisticRegression(max_iter=2000).fit(X, y).score(Xt, yt)
    assert model.score(Xt, yt) >= lr - 0.01, (model.score(Xt, yt), lr)


@pytest.mark.slow
@pytest.mark.parametrize("inference", ["vi", "pr"])
def test_factorized_start_keeps_gates_alive_on_adult(inference, monkeypatch):
    """The factorized BMEM-G start (forced here at p = 124) starts the gates
    apart as the full one does: on the Adult subset of
    test_adult_bmemg_start_keeps_gates_alive, where the random start's gates
    die, its gates live and its ELBO is within 0.02 nats per sample of the
    full start's. Measured (seed 0; factorized / full): ELBO vi -0.4620 /
    -0.4611 nats per sample, pr -0.4622 / -0.4655; responsibility entropy
    (a fraction of log K) 0.0004 / 0.0006 in all four fits (the random
    start's: above 0.99).
    """
    X, y = _adult_subset()
    kw = dict(n_components=5, inference=inference, max_iter=40, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        full = DiversityMixtureOfExperts(**kw).fit(X, y)
    monkeypatch.setattr(_estimator, "_diagonal_start", lambda X, K: True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        factorized = DiversityMixtureOfExperts(**kw).fit(X, y)
    assert np.all(factorized.responsibility_entropy_ < 0.5)
    assert factorized.elbo_ > full.elbo_ - 0.02


def test_bmemg_start_keeps_few_covariance_sets_on_one_thread():
    """The BMEM-G start (of "vi", "pr" and prior="gaussian") holds 2 K p^2
    floats of covariances per candidate. On one thread its candidates run one
    after the other and only the best so far keeps them, each candidate
    forms its own when it starts, and an iteration writes the precisions over
    its Q statistics: measured 9.3-10.7 units of 8 K p^2 bytes at the peak
    here (p = 400, K = 5; 9.2 at p = 800 and 1,500), 14.8 before (all four
    candidates' covariances from the start, a new array for the
    precisions; 13.3 at p = 800). The fits are the same to the last bit."""
    import numba

    p, K = 400, 5
    X, y = _wide_binary_rows(p)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        for prior in ("mabn", "gaussian"):
            model = DiversityMixtureOfExperts(K, prior=prior, max_iter=1,
                                              random_state=0)
            peak = _traced_fit_peak(model, X, y)
            assert peak < 12.5 * 8 * K * p * p, (prior, peak / (8 * K * p * p))
    finally:
        numba.set_num_threads(threads)


def test_bad_parameters_and_predict_checks():
    X, y = _two_expert_data(50)
    with pytest.raises(ValueError, match="prior='gaussian'"):
        DiversityMixtureOfExperts(2, inference="pr", prior="gaussian").fit(X, y)
    with pytest.raises(ValueError, match="inference"):
        DiversityMixtureOfExperts(2, inference="gibbs").fit(X, y)
    with pytest.raises(TypeError, match="init"):  # an advanced setting, not a parameter
        DiversityMixtureOfExperts(2, init="random")
    with pytest.raises(ValueError, match="diversity_strength"):
        DiversityMixtureOfExperts(2, diversity_strength=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="n_components"):
        DiversityMixtureOfExperts(0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = DiversityMixtureOfExperts(2, max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        m.predict(np.ones((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        m.transform(np.full((2, 3), np.nan))


@pytest.mark.slow
def test_pipeline_and_grid_search():
    X, y = _two_expert_data(300, seed=8)
    Xt, yt = _two_expert_data(1000, seed=15)
    lr = LogisticRegression().fit(X, y).score(Xt, yt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        grid = GridSearchCV(DiversityMixtureOfExperts(2, max_iter=10, random_state=0),
                            {"diversity_strength": [0.0, 10.0]}, cv=2).fit(X, y)
        # the mixture inside a pipeline learns what one logistic regression cannot
        pipe = make_pipeline(StandardScaler(),
                             DiversityMixtureOfExperts(2, random_state=0)).fit(X, y)
        # transform feeds a downstream model: the pipeline is the composition
        moe = DiversityMixtureOfExperts(2, max_iter=10, random_state=0)
        stacked = make_pipeline(moe, LogisticRegression()).fit(X, y)
        G = DiversityMixtureOfExperts(2, max_iter=10, random_state=0).fit(X, y)
    manual = LogisticRegression().fit(G.transform(X), y)
    assert grid.best_score_ > lr + 0.2
    assert pipe.score(Xt, yt) > lr + 0.25
    np.testing.assert_allclose(stacked.predict_proba(Xt),
                               manual.predict_proba(G.transform(Xt)), rtol=1e-10)


# ---------------------------------------------------------------------------
# real data: UCI Adult (a9a encoding)
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_adult_every_method(method):
    X, y = load_adult(return_X_y=True)
    Xt, yt = load_adult(subset="test", return_X_y=True)
    X, y, Xt, yt = X[:4000], y[:4000], Xt[:4000], yt[:4000]
    lr = LogisticRegression(max_iter=1000).fit(X, y).score(Xt, yt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = _model(*method, K=3, max_iter=40, n_mcmc_samples=100, burn_in=200).fit(X, y)
    acc = m.score(Xt, yt)
    # logistic regression 0.838, majority class 0.763 on these rows
    assert acc > 0.82
    assert acc > lr - 0.01


def test_mcmc_learns_prior_hyperparameters_by_em(monkeypatch):
    X, y = _two_expert_data(200, seed=9)
    # the EM itself (M-step maximizes, moves towards the truth on data drawn
    # from the model) is tested in tests/test_experts_mcmc.py; here the wiring
    monkeypatch.setattr(_estimator, "_N_EM_ITER", 3)
    m = DiversityMixtureOfExperts(2, inference="mcmc", n_mcmc_samples=20,
                                  burn_in=50, random_state=0).fit(X, y)
    hp = m.prior_hyperparameters_[0]
    assert np.linalg.norm(hp["mu0"]) == pytest.approx(1.0)
    assert hp["mu0"].shape == (X.shape[1] + 1,)
    assert hp["magnitude_shape"] > 0 and hp["magnitude_rate"] > 0
    assert (hp["magnitude_shape"], hp["magnitude_rate"]) != (2.0, 0.5)
    # blocks: 2 of burn-in, 3 EM iterations, 1 burn-in with the learned prior,
    # 1 of kept samples
    assert m.n_iter_ == 2 + 3 + 1 + 1
    assert m.log_posterior_trace_.shape == (1, 50 + 50 * 3 + 25 + 20)
    assert m.score(X, y) > 0.8
    monkeypatch.setattr(_estimator, "_N_EM_ITER", 0)
    plain = DiversityMixtureOfExperts(2, inference="mcmc", n_mcmc_samples=5, burn_in=5,
                                      random_state=0).fit(X, y)
    assert not hasattr(plain, "prior_hyperparameters_")


def test_unused_experts_are_reported():
    """Two regimes need two experts: with K = 4 the other two end unused, and the
    estimator reports it in n_active_components_ and expert_usage_, without a
    warning (the prior switched them off: the model working, not a failure)."""
    X, y = _two_expert_data(300, seed=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        m = DiversityMixtureOfExperts(4, random_state=0).fit(X, y)
    assert m.n_active_components_[0] == 2
    used = np.sort(m.expert_usage_[0])[::-1]
    assert used[1] > 0.2 and used[2] < 0.01
    # what an expert in use pays for its concentration: KL(q || uniform) of
    # its expert and gate directions, from the fitted q
    st = m._states[0]
    p = X.shape[1] + 1
    uniform = float(vmf_entropy(p, 0.0))
    price = sum(uniform - vmf_entropy(p, q.kappa) for q in (st.beta, st.eta))
    np.testing.assert_allclose(m._concentration_price()[0], price)
    in_use = m.expert_usage_[0] >= 0.01
    assert np.all(price[in_use] > 1.0)          # concentrated: they pay
    assert price[~in_use].max() < 0.5 * price[in_use].min()  # near the prior


@pytest.mark.slow
def test_price_of_an_expert_grows_with_the_number_of_features():
    """Why the gates die on raw binary MNIST (user guide, "Many features").

    An expert in use needs a concentrated q: the variance of its logits has
    the term E[g^2] (A_p(kappa) / kappa) ||x||^2, which a large kappa makes
    small, and the KL of q from a uniform direction, about (p - 1) / 2 log
    kappa, is paid in every dimension. Measured on the two-regime task
    (2,000 rows, seed 3; the price of an expert and its gate): 120 nats
    each with its 20 features (test accuracy 0.899), 210-350 nats (mean 283)
    with 50 noise features added (0.797): more features make every expert
    dearer, so the ELBO keeps fewer of them or learns them worse. Checked:
    the price per expert in use grows by half at least with the noise
    features (p from 21 to 71 design columns).
    """
    X, y = two_regimes(2000, 3)
    noise = np.random.RandomState(0).normal(size=(2000, 50))
    prices = []
    for Z in (X, np.hstack([X, noise])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = DiversityMixtureOfExperts(4, random_state=0).fit(Z, y)
        price = m._concentration_price()[0]
        prices.append(np.mean(price[m.expert_usage_[0] >= 0.01]))
    assert prices[1] > 1.5 * prices[0], prices


def test_one_dimensional_directions_are_refused_with_a_clear_error():
    """Found by the property test: one column without intercept gave "the
    dimension p must be an integer >= 2" from deep inside the vMF code."""
    X = np.random.RandomState(0).normal(size=(20, 1))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="fit_intercept=False"):
        DiversityMixtureOfExperts(2, fit_intercept=False).fit(X, y)
    # the Gaussian prior has no directions: it fits
    DiversityMixtureOfExperts(2, prior="gaussian", fit_intercept=False,
                              max_iter=3, tol=None).fit(X, y)


def test_mcmc_early_stopping_and_a_schedule_cut_short():
    """"mcmc" has no held-out ELBO to monitor: early stopping would restore a
    burn-in state. A chain that max_iter cuts short says so, with the
    max_iter its schedule needs (not the tol rule, which it does not use)."""
    X, y = _two_expert_data(120)
    with pytest.raises(ValueError, match="early_stopping=True.*fixed schedule"):
        DiversityMixtureOfExperts(2, inference="mcmc", early_stopping=True).fit(X, y)
    model = DiversityMixtureOfExperts(2, inference="mcmc", burn_in=50,
                                      n_mcmc_samples=100, max_iter=4, random_state=0)
    with pytest.warns(ConvergenceWarning,
                      match=r"50 of n_mcmc_samples=100 samples kept.*max_iter >= 6"):
        model.fit(X, y)
    assert model.expert_samples_.shape[1] == 50 and not model.converged_
    model.set_params(max_iter=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model.fit(X, y)
    assert model.expert_samples_.shape[1] == 100 and model.converged_


def test_dead_gates_are_reported_quietly(monkeypatch, capsys):
    """From the random start (an advanced setting) the gates die on the Adult
    subset: the fit says so in responsibility_entropy_, n_active_components_
    and its verbose output, and issues no warning but the ConvergenceWarning
    of a run cut short by max_iter."""
    X, y = _adult_subset()
    monkeypatch.setattr(_estimator, "_INIT", "random")
    _paper_magnitude_priors(monkeypatch)
    model = DiversityMixtureOfExperts(n_components=5, max_iter=15, random_state=0,
                                      verbose=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    assert not [w for w in caught if not issubclass(w.category, ConvergenceWarning)]
    assert model._start == "random"
    assert model.responsibility_entropy_[0] > 0.99
    assert model.n_active_components_[0] == 1
    out = capsys.readouterr().out
    assert "n_active_components_ = [1] of n_components = 5" in out
    assert "responsibility_entropy_ = [" in out


def test_public_parameters():
    """At most 20 public parameters; the research and tuning knobs are module
    constants (user guide, "Advanced settings")."""
    names = sorted(DiversityMixtureOfExperts().get_params())
    assert len(names) <= 20
    assert names == sorted([
        "n_components", "inference", "prior", "diversity_strength",
        "expert_regularization", "gate_regularization", "prior_std",
        "fit_intercept", "max_iter", "tol", "n_iter_no_change", "n_init",
        "warm_start", "early_stopping", "validation_fraction", "n_mcmc_samples",
        "burn_in", "random_state", "verbose"])
    for name, value in [("_INIT", "bmemg"), ("_INIT_CONCENTRATION", 10.0),
                        ("_INNER_MAX_ITER", 3), ("_ANGLE_VARIANCE_WEIGHT", 0.0),
                        ("_MAGNITUDE_SHAPE", 2.0), ("_MAGNITUDE_RATE", 0.5),
                        ("_EXPERT_MAGNITUDE", "logistic"),
                        ("_GATE_MAGNITUDE_SHAPE", 2.0), ("_GATE_MAGNITUDE_RATE", 8.0),
                        ("_THIN", 1), ("_PROPOSAL_CONCENTRATION", 200.0),
                        ("_PROPOSAL_SCALE", 0.1), ("_N_EM_ITER", 0)]:
        assert getattr(_estimator, name) == value, name


@pytest.mark.parametrize("setting, value", [
    ("_INNER_MAX_ITER", 1), ("_ANGLE_VARIANCE_WEIGHT", 0.5),
    ("_MAGNITUDE_SHAPE", 3.0), ("_MAGNITUDE_RATE", 1.0), ("_THIN", 2),
    ("_PROPOSAL_CONCENTRATION", 50.0), ("_PROPOSAL_SCALE", 0.3),
    ("_EXPERT_MAGNITUDE", None), ("_GATE_MAGNITUDE_SHAPE", 3.0),
    ("_GATE_MAGNITUDE_RATE", 1.0)])
def test_advanced_settings_are_read_at_fit_time(setting, value, monkeypatch):
    """Each advanced setting changes the fit of the method it belongs to."""
    X, y = _two_expert_data(80, seed=3)
    # the Gamma prior of _MAGNITUDE_* is that of "mcmc" (the vi experts use it
    # with _EXPERT_MAGNITUDE = None only)
    inference = ("mcmc" if setting in ("_THIN", "_PROPOSAL_CONCENTRATION",
                                       "_PROPOSAL_SCALE", "_MAGNITUDE_SHAPE",
                                       "_MAGNITUDE_RATE") else
                 "pr" if setting == "_ANGLE_VARIANCE_WEIGHT" else "vi")
    kw = dict(inference=inference, max_iter=3, tol=None, n_mcmc_samples=5,
              burn_in=5, random_state=0)
    # K = 3: with two experts there is one angle, and its variance is 0
    base = DiversityMixtureOfExperts(3, **kw).fit(X, y)
    monkeypatch.setattr(_estimator, setting, value)
    changed = DiversityMixtureOfExperts(3, **kw).fit(X, y)
    assert not np.array_equal(base.predict_proba(X), changed.predict_proba(X))
