"""DiversityMixtureOfExperts: Bayesian mixture of experts, mutual angular prior."""

import copy
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Real

import numba
import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.base import (
    ClassifierMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.extmath import row_norms
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from .._base import (
    FIT_LOOP_CONSTRAINTS,
    BaseVariational,
    StoppingRule,
    single_threaded_blas,
)
from .._validation import IntInterval
from ._angular import mutual_angles
from ._ascent import KAPPA_MAX, ObjectiveConfig, design_scale, prior_constants
from ._bounds import use_parallel
from ._mcmc import (
    ADAPT_BLOCK,
    adapt_proposals,
    fit_mabn_hyperparameters,
    gate_proba_samples,
    log_joint,
    predict_proba_samples,
    run_metropolis_hastings,
)
from ._variational import (
    VariationalState,
    _init_params,
    _mean_directions,
    _use_statistics,
    column_support,
    diagonal_gaussian_init,
    diagonal_gaussian_iteration,
    embed_columns,
    gaussian_init,
    gaussian_iteration,
    gaussian_objective_and_aux,
    objective_and_aux,
    params_from_vectors,
    prepared_csr,
    prior_covariances,
    squared_entries,
    transposed,
    variational_iteration,
)
from ._vmf import vmf_entropy

# iterations of the BMEM-G variational fit that starts "vi" and "pr"
# (_INIT = "bmemg") and the MCMC chain
_BMEMG_INIT_ITER = 10
# the range of prior_std: sigma^2 and 1 / sigma^2 stay finite with room to spare
_PRIOR_STD_MIN = 1e-100
_PRIOR_STD_MAX = 1e100
# scale of the random means of a BMEM-G fit (N(0, scale^2 / p) per entry): a
# start close to zero lets the data, not the draw, split the rows (on the
# two-regime task of the tests, 1.0 ends in lower ELBO optima for most seeds)
_GAUSSIAN_INIT_SCALE = 0.1
# the BMEM-G start: the best of this many random runs (and a one-expert run)
# of this many iterations is continued
_N_CANDIDATES = 4
_CANDIDATE_ITER = 10
# candidates run on at most this many random rows (the basin is chosen there)
# and the best is continued on the same rows: the start costs O(1) in n, and
# the vi / pr iterations refine it on all rows
_CANDIDATE_ROWS = 2000
# the candidates are scored by their log loss on this fraction of those rows
# (of each class), held out of their fit; with fewer than this many rows of a
# class, by their ELBO on all of them
_START_HELD_OUT = 0.2
_START_MIN_CLASS_ROWS = 5
# the one-expert candidate is kept unless the best random one's held-out log
# loss is lower by more than this many standard errors of the paired
# difference (a one-sided test at about 2.5%: where one expert predicts best,
# a random candidate can still lead by chance on a few dozen held-out rows)
_START_STANDARD_ERRORS = 2.0
# gate intercept of the one-expert candidate: softmax weight e^4 / (e^4 + K - 1)
# for its expert at the start (0.86 with K = 10)
_ONE_EXPERT_GATE = 4.0
# the BMEM-G start uses a q that factorizes over the coordinates of every
# vector (O(nnz K) per step, no p x p matrix) above this many design columns;
# the full-covariance start costs O(K (sum_n nnz_n^2 + p^3)) per iteration,
# and below this size little more than the factorized one (on dense rows of
# about 100 columns, such as the one-hot Adult table of the benchmark, the
# full-covariance start took most of the fit)
_DIAGONAL_START_FEATURES = 100
# an expert is in use when it is the most responsible expert, with
# responsibility >= (K + 1) / (2 K) (half way from 1/K to 1), for at least this
# fraction of the training rows
_USE_SHARE = 0.01
# prior="gaussian" stores K (p x p) covariances per set: at most this many entries
_GAUSSIAN_MAX_ENTRIES = 20_000_000
# features beyond this magnitude are rejected (squares of projections overflow)
_MAX_ABS_FEATURE = 1e100
# at most this many kept MCMC samples enter the log joint reported by elbo()
_MAX_ELBO_DRAWS = 20

# Advanced settings (user guide, "Advanced settings"): research and tuning
# knobs read at fit time; tests set them with monkeypatch.setattr.
# start of "vi" and "pr": "bmemg" (a BMEM-G variational fit) or "random"
# (uniform random mean directions, the start from which the gates can die)
_INIT = "bmemg"
# vMF concentration of the mean directions of the "random" start, in (0, 1e8]
_INIT_CONCENTRATION = 10.0
# rounds of blockwise gradient steps on q per outer iteration ("vi", "pr")
_INNER_MAX_ITER = 3
# gamma >= 0 of Omega = mean(angles) - gamma var(angles) ("pr")
_ANGLE_VARIANCE_WEIGHT = 0.0
# alpha_1, alpha_2 > 0: the Gamma(shape, rate) prior of every magnitude of
# "mcmc", and of the expert magnitudes of "vi" and "pr" when
# _EXPERT_MAGNITUDE is None
_MAGNITUDE_SHAPE = 2.0
_MAGNITUDE_RATE = 0.5
# the prior of the expert magnitudes of "vi" and "pr": "logistic", the Gamma
# matched (mode and curvature) to the chi distribution with p degrees of
# freedom of ||beta|| under N(0, I_p), the prior of LogisticRegression(C=1)
# (p the design columns, intercept included); None: _MAGNITUDE_SHAPE, _RATE
_EXPERT_MAGNITUDE = "logistic"
# "vi" and "pr" with fit_intercept: the experts' design column of the
# intercept holds this constant instead of 1 (the gates' holds 1), so that an
# expert's intercept has a prior this many times broader than its weights'
# (liblinear's intercept_scaling, for the experts alone; LogisticRegression
# leaves its intercept unpenalized)
_EXPERT_INTERCEPT_SCALE = 3.0
# the Gamma(shape, rate) prior of the gate magnitudes of "vi" and "pr": with
# standardized features a gate logit has prior variance about E[g^2], here
# 3 / 32 (soft gates, which the rows must sharpen)
_GATE_MAGNITUDE_SHAPE = 2.0
_GATE_MAGNITUDE_RATE = 8.0
# keep every _THIN-th sweep after burn-in ("mcmc")
_THIN = 1
# initial vMF direction-proposal concentration ("mcmc", MABN) and initial
# magnitude / random-walk proposal scale; both adapted during burn-in
_PROPOSAL_CONCENTRATION = 200.0
_PROPOSAL_SCALE = 0.1
# Monte Carlo EM iterations learning mu_0 and the Gamma prior after burn-in
# ("mcmc", MABN); 0: fixed hyper-parameters
_N_EM_ITER = 0


def _validation_split(y, rng):
    """Fit and held-out rows of the BMEM-G start, stratified by class.

    ``_START_HELD_OUT`` of the rows of each class (rounded) are held out.
    Returns ``(fit_rows, held_out)``, sorted int arrays, or ``(None, None)``
    when a class has fewer than ``_START_MIN_CLASS_ROWS`` rows: too few to
    hold some out and still fit both classes.
    """
    fit_rows, held_out = [], []
    for label in (0, 1):
        members = np.flatnonzero(y == label)
        if members.size < _START_MIN_CLASS_ROWS:
            return None, None
        members = rng.permutation(members)
        n_held = int(round(_START_HELD_OUT * members.size))
        held_out.append(members[:n_held])
        fit_rows.append(members[n_held:])
    return np.sort(np.concatenate(fit_rows)), np.sort(np.concatenate(held_out))


def _one_expert_candidate(template, X, y, sigma):
    """A BMEM-G start with one expert in use: a logistic regression.

    A copy of ``template`` (a GaussianState at random means) whose expert 0
    is the ridge logistic regression of (X, y) (``C = sigma**2``: the
    N(0, sigma^2 I) prior of every vector of BMEM-G, clipped to [1e-6, 1e6];
    the intercept is the last column of X) and whose gate 0 takes every row
    (intercept ``_ONE_EXPERT_GATE``, the others' near 0). Its lbfgs need not
    converge: it is a start.
    """
    one = copy.deepcopy(template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lr = LogisticRegression(C=float(np.clip(sigma**2, 1e-6, 1e6)),
                                fit_intercept=False, max_iter=200).fit(X, y)
    one.means[0][0] = lr.coef_[0]
    one.means[1][0, -1] += _ONE_EXPERT_GATE
    return one


def _diagonal_start(X, K):
    """Whether the BMEM-G start of "vi", "pr" and "mcmc" uses a factorized q.

    It does above ``_DIAGONAL_START_FEATURES`` columns of the design X (the
    intercept included), or when the full covariances would hold more than
    ``_GAUSSIAN_MAX_ENTRIES`` numbers.
    """
    p = X.shape[1]
    return p > _DIAGONAL_START_FEATURES or K * p * p > _GAUSSIAN_MAX_ENTRIES


def _magnitude_priors(p):
    """(alpha_1, alpha_2, alpha_3) of the magnitude priors of "vi" and "pr",
    experts then gates (:class:`~skbinvi.experts._ascent.ObjectiveConfig`).

    Arrays of shape (2,). The experts' prior with ``_EXPERT_MAGNITUDE =
    "logistic"`` is the chi distribution of ||beta|| under N(0, I_p), log
    density (p - 1) log g - g^2 / 2 + const (alpha = (p, 0, 1/2)): with a
    uniform direction the prior of beta is the N(0, I_p) of
    LogisticRegression(C=1) and of the BMEM-G start (``prior_std=1``). (A
    Gamma(2 p - 1, 2 sqrt(p - 1)) matched to it at its mode shrank short
    vectors less: a one-expert fit then drifted from the logistic regression
    on small tables.) With ``_EXPERT_MAGNITUDE = None``, the Gamma of
    ``_MAGNITUDE_SHAPE`` and ``_MAGNITUDE_RATE``; the gates' is the Gamma of
    ``_GATE_MAGNITUDE_SHAPE`` and ``_GATE_MAGNITUDE_RATE``.
    """
    if _EXPERT_MAGNITUDE == "logistic":
        expert = (float(p), 0.0, 0.5)
    elif _EXPERT_MAGNITUDE is None:
        expert = (float(_MAGNITUDE_SHAPE), float(_MAGNITUDE_RATE), 0.0)
    else:
        raise ValueError(f"_EXPERT_MAGNITUDE must be 'logistic' or None; got "
                         f"{_EXPERT_MAGNITUDE!r}.")
    gate = (float(_GATE_MAGNITUDE_SHAPE), float(_GATE_MAGNITUDE_RATE), 0.0)
    return tuple(np.array([e, g]) for e, g in zip(expert, gate, strict=True))


def _posterior_mean_vectors(params):
    """E[a_k] = (r_k / s_k) A_p(kappa_k) mu_k of a vMF x Gamma q, (K, p)."""
    return (params.r / params.s)[:, None] * _mean_directions(params)


def _angle_summary(A):
    """Mean and variance of the K (K - 1) / 2 pairwise non-obtuse angles (radians)."""
    K = A.shape[0]
    if K < 2 or np.any(np.linalg.norm(A, axis=1) == 0):
        return np.nan, np.nan
    theta = mutual_angles(A)[np.triu_indices(K, k=1)]
    return float(theta.mean()), float(theta.var())


def _responsibilities(X, y, experts, gates):
    """p(z = k | x, y) at the posterior mean vectors (K, p): (n, K), rows sum to 1."""
    log_gate = special.log_softmax(np.asarray(X @ gates.T), axis=1)
    sign = (2.0 * y - 1.0)[:, None]
    log_expert = special.log_expit(sign * np.asarray(X @ experts.T))
    return special.softmax(log_gate + log_expert, axis=1)


# ---------------------------------------------------------------------------
# inference engines: one per algorithm, behind one small interface
# ---------------------------------------------------------------------------
class _Engine:
    """One inference algorithm of :class:`DiversityMixtureOfExperts`.

    The estimator keeps one state per one-vs-rest problem and hands each to
    its engine: ``start`` (a fresh state, the start included),
    ``iteration_context``/``step`` (one iteration of the fit loop on one
    problem, its objective summed over the rows, nats), ``objective_context``/
    ``objective`` (the objective at the state), ``release`` (drop what belongs
    to the training rows), ``draws`` (the vectors predictions average over,
    (S, K, p) each), ``stopping_rule`` (what the fit loop monitors and when a
    run ends) and ``set_attributes`` (the fitted attributes of the algorithm).
    Settings are read from the estimator at every call.
    """

    def __init__(self, model):
        self.model = model

    def iteration_context(self, X):
        return None

    def objective_context(self, X):
        return None

    def release(self, state):
        state.aux = state.weights = None

    def stopping_rule(self, states):
        """The ``tol`` rule; ``tol`` applies to each one-vs-rest problem."""
        m = self.model
        return StoppingRule(m._stopping_tol(), m.n_iter_no_change,
                            n_problems=len(states))

    def set_attributes(self, states):
        """Fitted attributes of this algorithm alone (default: none)."""

    def expert_scale(self, p):
        """The column scale (p,) of the experts' design, or None (X itself)."""
        return None


class _GaussianEngine(_Engine):
    """prior="gaussian": BMEM-G variational EM, a Gaussian q of every vector
    ([1]_ of the estimator); also the start of "vi", "pr" and "mcmc"."""

    def start(self, X, y, rng):
        return self.fit_start(X, y, rng, 0)

    def fit_start(self, X, y, rng, n_iter, diagonal=False):
        """The best of ``_N_CANDIDATES`` + 1 short BMEM-G runs, continued.

        The candidates run ``_CANDIDATE_ITER`` iterations on four fifths of at
        most ``_CANDIDATE_ROWS`` random rows (stratified by class, see
        :func:`_validation_split`): ``_N_CANDIDATES`` from small random means,
        and one with a single expert in use, started at the ridge logistic
        regression of those rows (``LogisticRegression(C=prior_std**2)``, the
        prior's own strength) and a gate that gives it every row. The random
        candidate with the lowest log loss on the remaining fifth of the rows
        (at its posterior means) is chosen unless the one-expert candidate's log
        loss is within ``_START_STANDARD_ERRORS`` standard errors of the paired
        difference, and runs ``n_iter`` more iterations on all of them. The
        BMEM-G ELBO has poor local optima (an expert per class where one expert
        would do, or four sectors where two regimes would do) and which basin a
        run falls into is decided in its first iterations. The held-out rows,
        not the ELBO, choose the basin: every additional expert pays a KL term
        of the order of the number of features in the ELBO and its bound on the
        gate, so the ELBO prefers one expert where held-out rows show that
        several predict better (digits even against odd), and the random
        candidates alone split the rows between experts where one predicts best
        (the user guide, "Starting point"). With too few rows of a class to hold
        some out, the highest ELBO chooses among the random candidates.
        ``diagonal``: a q that factorizes over coordinates
        (:func:`~skbinvi.experts._variational.diagonal_gaussian_iteration`),
        chosen by :func:`_diagonal_start`. The start is part of initialization,
        with its own budget ((``_N_CANDIDATES`` + 1) x ``_CANDIDATE_ITER`` +
        ``n_iter`` iterations on at most ``_CANDIDATE_ROWS`` rows), outside
        ``max_iter`` and ``n_iter_``.
        """
        K, p = self.model.n_components, X.shape[1]
        rows = np.arange(X.shape[0])
        if rows.size > _CANDIDATE_ROWS:
            rows = np.sort(rng.choice(rows.size, _CANDIDATE_ROWS, replace=False))
        Xc, yc = X[rows], y[rows]
        sigma = self.model.prior_std
        support = None
        if diagonal:  # variances (2 K p floats a candidate) from the start
            # the columns of zeros in these rows stay at the prior, their
            # optimum (column_support): on 200 rows of 2,000,000 mostly empty
            # columns the start took 104 s of vector operations over them
            used = column_support(Xc)
            if 0 < used.size < p:
                support, Xc = used, Xc[:, used]
            # the same draw per column as on all p columns: N(0, scale^2 / p)
            scale = _GAUSSIAN_INIT_SCALE * np.sqrt(Xc.shape[1] / p)
            candidates = [diagonal_gaussian_init(K, Xc.shape[1], sigma, rng, scale)
                          for _ in range(_N_CANDIDATES)]

            def stepper(Xs, ys):
                X2, XT = squared_entries(Xs), transposed(Xs)
                return lambda state: diagonal_gaussian_iteration(Xs, X2, ys, state,
                                                                 sigma, XT)
        else:
            # the covariances (2 K p^2 floats a candidate) are formed when a
            # candidate starts, not all at once
            candidates = [gaussian_init(K, p, sigma, rng, _GAUSSIAN_INIT_SCALE,
                                        covariances=False)
                          for _ in range(_N_CANDIDATES)]

            def stepper(Xs, ys):
                sq = row_norms(Xs, squared=True)
                return lambda state: gaussian_iteration(Xs, ys, sq, state, sigma)

        fit_rows, held_out = _validation_split(yc, rng)
        one = None
        if held_out is None:
            step = stepper(Xc, yc)

            def score(state):  # the rule without held-out rows: the highest ELBO
                return np.array([-state.value])
        else:
            step = stepper(Xc[fit_rows], yc[fit_rows])
            Xv, yv = Xc[held_out], yc[held_out]
            one = _one_expert_candidate(candidates[0], Xc[fit_rows], yc[fit_rows],
                                        sigma)

            def score(state):  # log loss of every held-out row
                proba = predict_proba_samples(Xv, state.means[0], state.means[1])[:, 1]
                return -np.log(np.clip(np.where(yv == 1, proba, 1.0 - proba),
                                       1e-300, None))

        def run(state):
            if state.covs is None:
                state.covs = prior_covariances(K, p, sigma)
            for _ in range(_CANDIDATE_ITER):
                step(state)
            return score(state)

        # independent candidates, one per thread (their kernels release the GIL;
        # the same numbers with any number of threads), when every pass of a
        # candidate runs its serial kernel: Numba's fallback threading layer
        # (workqueue, without OpenMP or TBB) aborts on parallel kernels
        # launched from two threads at once. The factorized candidates run
        # in threads on dense rows (NumPy products, which release the GIL)
        # and one after another on sparse ones.
        runs = candidates + ([one] if one is not None else [])
        n_threads = min(len(runs), numba.get_num_threads())
        if (diagonal and sp.issparse(Xc)) or use_parallel(Xc.shape[0], 2 * K):
            n_threads = 1
        if n_threads > 1:
            with ThreadPoolExecutor(n_threads) as pool:
                losses = list(pool.map(run, runs))
        else:  # one at a time, keeping the covariances of the best so far only
            losses = []
            for i, state in enumerate(candidates):
                losses.append(run(state))
                lead = int(np.argmin([loss.mean() for loss in losses]))  # as below
                for j, c in enumerate(candidates[:i + 1]):
                    if j != lead:
                        c.covs = None
            if one is not None:
                losses.append(run(one))
        lead = int(np.argmin([loss.mean() for loss in losses[:len(candidates)]]))
        best = candidates[lead]
        if one is not None:
            # one expert unless the best mixture predicts the held-out rows
            # better by more than _START_STANDARD_ERRORS standard errors of
            # the paired difference (a one-sided test at about 2.5%)
            gain = losses[-1] - losses[lead]
            if gain.mean() <= _START_STANDARD_ERRORS * gain.std() / np.sqrt(gain.size):
                best = one
        if held_out is not None:
            best.aux = best.weights = None  # they belong to the fit rows
            step = stepper(Xc, yc)
        for _ in range(n_iter):
            step(best)
        if rows.size < X.shape[0]:
            best.aux = None  # its auxiliaries belong to the candidates' rows
        if support is not None:
            embed_columns(best, support, p, sigma)
        best.omega = 2.0
        return best

    def bmemg_means(self, X, y, rng, n_iter=_BMEMG_INIT_ITER):
        """Posterior means (2, K, p) of the BMEM-G start.

        The full-covariance fit when it is affordable, else the factorized one
        (:func:`_diagonal_start`).
        """
        diagonal = _diagonal_start(X, self.model.n_components)
        return self.fit_start(X, y, rng, n_iter, diagonal=diagonal).means

    def step(self, X, y, rng, state, context):
        return gaussian_iteration(X, y, row_norms(X, squared=True), state,
                                  self.model.prior_std)

    def objective(self, X, y, state, context):
        tmp = type(state)(state.means, state.covs)
        return gaussian_objective_and_aux(X, y, tmp, self.model.prior_std)

    def draws(self, state):
        return state.means[0][None], state.means[1][None]


class _VariationalEngine(_Engine):
    """"vi" and "pr" with the MABN prior: a vMF x Gamma q of every vector,
    blockwise gradient ascent on the ELBO (or the regularized objective)."""

    def config(self, p):
        """(ObjectiveConfig, (lambda_1, lambda_2), PriorConstants) of "vi" / "pr"."""
        m = self.model
        alpha1, alpha2, alpha3 = _magnitude_priors(p)
        if m.inference == "vi":
            cfg = ObjectiveConfig("vi", float(m.diversity_strength), m._mu0(p),
                                  alpha1, alpha2, 0.0, alpha3, self._intercept_scale())
            lams = (0.0, 0.0)
        else:
            cfg = ObjectiveConfig("pr", 0.0, m._mu0(p), alpha1, alpha2,
                                  float(_ANGLE_VARIANCE_WEIGHT), alpha3,
                                  self._intercept_scale())
            lams = (float(m.expert_regularization), float(m.gate_regularization))
        return cfg, lams, prior_constants(cfg, m.n_components, p)

    def _intercept_scale(self):
        """The experts' intercept column (ObjectiveConfig.intercept_scale)."""
        return float(_EXPERT_INTERCEPT_SCALE) if self.model.fit_intercept else 1.0

    def expert_scale(self, p):
        """The column scale (p,) of the experts' design, or None."""
        return design_scale(self._intercept_scale(), p)

    def start(self, X, y, rng):
        m = self.model
        K, p = m.n_components, X.shape[1]
        means = (_GaussianEngine(m).bmemg_means(X, y, rng) if _INIT == "bmemg"
                 else None)
        m._start = "random" if means is None else "bmemg"
        if means is None:
            beta = _init_params(K, p, rng, _INIT_CONCENTRATION, 1.0)
            eta = _init_params(K, p, rng, _INIT_CONCENTRATION, 1.0)
        else:
            scale = self.expert_scale(p)
            # the BMEM-G vectors are of X: the experts' of X diag(scale) are
            # theirs divided by the scale
            beta = params_from_vectors(means[0] if scale is None else means[0] / scale)
            eta = params_from_vectors(means[1])
        state = VariationalState(beta, eta)
        if means is not None:
            self._anneal_prior(X, y, state)
        return state

    def _anneal_prior(self, X, y, state):
        """With a strong MABN prior, choose how to start "vi" from the BMEM-G fit.

        The BMEM-G start ignores the diversity prior. With a strong one
        (``diversity_strength`` kappa > 1) the first gradient steps can pull
        every direction to the prior's simplex at once; the magnitudes of the
        experts whose data direction it forbids collapse, and a direction with
        zero magnitude gains nothing from turning back: a degenerate optimum
        (on Adult, K = 10, kappa = 100: one expert of magnitude 0 takes every
        row, 24% accuracy, ELBO -0.79 against -0.46 nats per sample when the
        prior is brought in gradually). On small data the direct path can end
        higher instead (the two-expert data of the tests). So both paths run
        the same number of iterations, log2(kappa): one at the full kappa, one
        at kappa_t = 2, 4, 8, ..., kappa; the one with the higher objective (at
        the full kappa) is kept and the recorded iterations start from it.
        Part of the start, with its own budget of 2 ceil(log2(kappa))
        iterations, outside ``max_iter`` and ``n_iter_``. ``state`` is updated
        in place.
        """
        m = self.model
        kappa = float(m.diversity_strength)
        if m.inference != "vi" or kappa <= 1.0:
            return
        p = X.shape[1]
        sq = row_norms(X, squared=True)
        use_stats = _use_statistics(X, m.n_components, "auto")
        cfg, lams, consts = self.config(p)
        direct = VariationalState(state.beta, state.eta)
        k_t = 1.0
        while k_t < kappa:
            k_t = min(2.0 * k_t, kappa)
            cfg_t = cfg._replace(kappa_prior=k_t)
            state.aux = None  # the objective changed with kappa
            variational_iteration(X, y, sq, state, cfg_t,
                                  prior_constants(cfg_t, m.n_components, p), lams,
                                  _INNER_MAX_ITER, use_stats, 0.0)
            variational_iteration(X, y, sq, direct, cfg, consts, lams,
                                  _INNER_MAX_ITER, use_stats, 0.0)
        annealed = objective_and_aux(X, y, sq, state.beta, state.eta, cfg, consts,
                                     lams)[0]
        if direct.value > annealed:
            state.beta, state.eta, state.steps = direct.beta, direct.eta, direct.steps
        state.aux = None
        state.omega, state.omega_growth = 2.0, 2.0

    def iteration_context(self, X):
        m = self.model
        cfg, lams, consts = self.config(X.shape[1])
        use_stats = _use_statistics(X, m.n_components, "auto")
        # tol=None (no tolerance): every one of the _INNER_MAX_ITER rounds
        inner_tol = 0.1 * (m._stopping_tol() or 0.0) * X.shape[0]
        return row_norms(X, squared=True), cfg, lams, consts, use_stats, inner_tol

    def step(self, X, y, rng, state, context):
        sq, cfg, lams, consts, use_stats, inner_tol = context
        return variational_iteration(X, y, sq, state, cfg, consts, lams,
                                     _INNER_MAX_ITER, use_stats, inner_tol)

    def objective_context(self, X):
        return (row_norms(X, squared=True), *self.config(X.shape[1]))

    def objective(self, X, y, state, context):
        sq, cfg, lams, consts = context
        return objective_and_aux(X, y, sq, state.beta, state.eta, cfg, consts,
                                 lams)[0]

    def release(self, state):
        state.aux = state.weights = None
        state.spare = None

    def draws(self, state):
        experts = _posterior_mean_vectors(state.beta)
        scale = self.expert_scale(experts.shape[1])
        if scale is not None:  # as vectors of X
            experts = experts * scale
        return experts[None], _posterior_mean_vectors(state.eta)[None]

    def concentration_price(self, states):
        """KL(q || uniform direction) of each expert's and its gate's direction.

        Returns an ndarray of shape (n_targets, K), nats: log |S^{p-1}| -
        H(vMF(kappa_expert)) + the same for the gate, the part of the ELBO an
        expert pays for knowing its directions. It grows like (p - 1) / 2 log
        kappa: with many features an expert needs a large kappa to make its
        logits sharp (their variance has a term E[g^2] (A_p(kappa) / kappa)
        ||x||^2) and pays for it in every one of the p dimensions (user
        guide, "Many features").
        """
        out = []
        for st in states:
            p = st.beta.mu.shape[1]
            uniform = float(vmf_entropy(p, 0.0))
            out.append(sum(uniform - np.asarray(vmf_entropy(p, q.kappa), dtype=float)
                           for q in (st.beta, st.eta)))
        return np.array(out)


def _has_elbo(model):
    """:func:`~sklearn.utils.metaestimators.available_if` check of ``elbo``
    (for a fitted model, the inference it was fitted with: a later
    ``set_params`` is the ValueError of the structural check)."""
    fitted = getattr(model, "_fitted_structure", {})
    if fitted.get("inference", model.inference) == "mcmc":
        raise AttributeError(
            "inference='mcmc' has no ELBO: it draws samples, and log_joint_ holds "
            "the log joint density of the training rows; use inference='vi' or "
            "'pr' for elbo(X, y).")
    return True


class _ScheduleRule(StoppingRule):
    """"mcmc": the run ends when the schedule is done (``converged_`` = True)
    and ``tol`` does not apply; the monitored value is the log joint density,
    in ``log_joint_`` and ``log_joint_history_`` (a chain has no ELBO)."""

    label = "log joint"
    attribute = "log_joint"

    def __init__(self, engine):
        super().__init__(None, engine.model.n_iter_no_change)
        self.engine = engine

    @property
    def ends_early(self):
        return True

    def update(self, value, best, held_out):
        m = self.engine.model
        return all(st["kept_sweeps"] >= m.n_mcmc_samples for st in m._states)

    def message(self, model):
        return self.engine.schedule_message(model._states)


class _ChainEngine(_Engine):
    """"mcmc": Metropolis-Hastings within Gibbs from the BMEM-G start, on a
    fixed schedule (adaptive burn-in, Monte Carlo EM, kept samples) in blocks
    of ``ADAPT_BLOCK`` sweeps; a block is one iteration of the fit loop, and
    its value is the mean log joint density of its sweeps (no ELBO)."""

    def start(self, X, y, rng):
        K = self.model.n_components
        means = _GaussianEngine(self.model).bmemg_means(X, y, rng)
        beta, eta = (np.array(v) for v in means)
        for v in (beta, eta):  # MABN directions need non-zero vectors
            v[np.linalg.norm(v, axis=1) == 0, -1] = 1e-3
        return dict(beta=beta, eta=eta,
                    kappa_hat=np.full((2, K), float(_PROPOSAL_CONCENTRATION)),
                    scale=np.full((2, K), float(_PROPOSAL_SCALE)),
                    burned=0, em_done=0, post_em=False, kept_beta=[], kept_eta=[],
                    kept_sweeps=0, accepted={}, trace=[], hyper=None)

    def prior(self, p, hyper=None):
        m = self.model
        mu0, a1, a2 = ((m._mu0(p), _MAGNITUDE_SHAPE, _MAGNITUDE_RATE)
                       if hyper is None else hyper)
        return dict(prior=m.prior, kappa=m.diversity_strength, mu0=mu0,
                    alpha1=a1, alpha2=a2, sigma=m.prior_std)

    def step(self, X, y, rng, st, context):
        """One block of sweeps of the schedule; returns the mean log joint (nats)."""
        m = self.model
        p = X.shape[1]
        em = m.prior == "mabn" and _N_EM_ITER > 0
        if st["kept_sweeps"] >= m.n_mcmc_samples:  # warm start: a new set of samples
            st.update(kept_beta=[], kept_eta=[], kept_sweeps=0, accepted={})
        common = dict(direction_concentration=st["kappa_hat"],
                      magnitude_scale=st["scale"], gaussian_scale=st["scale"],
                      random_state=rng,
                      init={"beta": st["beta"], "eta": st["eta"]},
                      **self.prior(p, st["hyper"]))
        if st["burned"] < m.burn_in:  # adaptive burn-in (discarded)
            block = min(ADAPT_BLOCK, m.burn_in - st["burned"])
            res = run_metropolis_hastings(X, y, m.n_components, n_samples=block,
                                          burn_in=0, thin=1, **common)
            st["kappa_hat"], st["scale"] = adapt_proposals(
                st["kappa_hat"], st["scale"], res.vector_acceptance_rates, m.prior)
            st["burned"] += block
        elif em and st["em_done"] < _N_EM_ITER:  # Monte Carlo EM iteration
            res = run_metropolis_hastings(X, y, m.n_components,
                                          n_samples=2 * ADAPT_BLOCK, burn_in=0, thin=1,
                                          **common)
            mu0, a1, a2 = fit_mabn_hyperparameters(res.beta_samples, res.eta_samples)
            st["hyper"] = (mu0, a1, a2)
            st["em_done"] += 1
        elif em and not st["post_em"]:  # burn-in with the learned prior
            res = run_metropolis_hastings(X, y, m.n_components,
                                          n_samples=ADAPT_BLOCK, burn_in=0, thin=1,
                                          **common)
            st["post_em"] = True
        else:  # kept samples
            n = min(ADAPT_BLOCK, m.n_mcmc_samples - st["kept_sweeps"])
            res = run_metropolis_hastings(X, y, m.n_components, n_samples=n,
                                          burn_in=0, thin=_THIN, **common)
            st["kept_beta"].append(res.beta_samples)
            st["kept_eta"].append(res.eta_samples)
            st["kept_sweeps"] += n
            for key, rate in res.acceptance_rates.items():
                a, w = st["accepted"].get(key, (0.0, 0))
                st["accepted"][key] = (a + rate * n, w + n)
        st["beta"], st["eta"] = res.beta_samples[-1], res.eta_samples[-1]
        st["trace"].append(res.log_posterior)
        return float(np.mean(res.log_posterior))

    def objective(self, X, y, st, context):
        """Mean log joint density of up to ``_MAX_ELBO_DRAWS`` kept samples."""
        prior = self.prior(X.shape[1], st["hyper"])
        return float(np.mean([log_joint(X, y, b, e, **prior)
                              for b, e in zip(*self.draws(st, _MAX_ELBO_DRAWS),
                                              strict=True)]))

    def release(self, state):
        """The chain's state is the model (its draws): nothing to drop."""

    def draws(self, st, limit=None):
        """Kept samples (S, K, p) x 2, thinned evenly to ``limit``; else the state."""
        if not st["kept_beta"]:
            return st["beta"][None], st["eta"][None]
        B = np.concatenate(st["kept_beta"])
        E = np.concatenate(st["kept_eta"])
        if limit is not None and B.shape[0] > limit:
            idx = np.linspace(0, B.shape[0] - 1, limit).round().astype(int)
            B, E = B[idx], E[idx]
        return B, E

    def stopping_rule(self, states):
        """The schedule: a run ends once every problem has kept its samples."""
        return _ScheduleRule(self)

    def schedule_message(self, states):
        """The ConvergenceWarning of a run that ``max_iter`` cut short."""
        m = self.model
        kept = min(st["kept_sweeps"] for st in states)
        em = m.prior == "mabn" and _N_EM_ITER > 0
        blocks = (-(-m.burn_in // ADAPT_BLOCK) + (_N_EM_ITER + 1 if em else 0)
                  + -(-m.n_mcmc_samples // ADAPT_BLOCK))
        return (
            f"{type(m).__name__}: max_iter={m.max_iter} blocks of sweeps ended "
            f"the chain before its schedule did: {kept} of n_mcmc_samples="
            f"{m.n_mcmc_samples} samples kept. From a new start the schedule "
            f"(burn_in={m.burn_in} sweeps"
            f"{f', {_N_EM_ITER} Monte Carlo EM iterations' if em else ''}"
            f", then the kept samples, {ADAPT_BLOCK} per block) needs max_iter >= "
            f"{blocks}: increase max_iter.")

    def set_attributes(self, states):
        m = self.model
        m.log_posterior_trace_ = np.stack([np.concatenate(st["trace"])
                                           for st in states])
        m.acceptance_rates_ = [{k: a / w for k, (a, w) in st["accepted"].items()}
                               for st in states]
        m.expert_samples_ = np.stack(m._experts)
        m.gate_samples_ = np.stack(m._gates)
        if m.prior == "mabn" and _N_EM_ITER > 0:
            m.prior_hyperparameters_ = [
                dict(mu0=st["hyper"][0], magnitude_shape=st["hyper"][1],
                     magnitude_rate=st["hyper"][2]) if st["hyper"] is not None
                else None for st in states]


class DiversityMixtureOfExperts(ClassNamePrefixFeaturesOutMixin, ClassifierMixin,
                                TransformerMixin, BaseVariational):
    r"""Bayesian mixture of experts with a diversity-promoting (mutual angular) prior.

    K logistic-regression experts and a softmax gate (BMEM, [1]_):

    .. math::

        p(z = k \mid x) = \mathrm{softmax}_k(\eta^\top x), \qquad
        p(y = 1 \mid x, z = k) = \sigma(\beta_k^\top x).

    Every expert vector :math:`\beta_k` and gate vector :math:`\eta_k` is a
    magnitude times a direction, :math:`a = g\,\tilde a`, with a Gamma
    prior on :math:`g` ("vi", "pr": for the experts, matched to the norm of
    a N(0, I) vector, the prior of ``LogisticRegression(C=1)``; for the gates,
    Gamma(2, 8), soft gates; "mcmc": Gamma(2, 0.5) for both); the directions
    of each set follow
    the mutual angular Bayesian network (MABN): direction i is drawn from a
    von Mises-Fisher distribution pointing away from the sum of the earlier
    ones, with concentration :math:`\kappa` (``diversity_strength``), so the
    experts (and the gates) are pushed apart. Binary classification;
    with more classes one mixture is fitted per class (one-vs-rest) and the
    probabilities are normalized over the classes. Experts the data do not
    need are switched off by the fit: ``n_active_components_`` reports how
    many are in use. Read more in the :ref:`User Guide <experts>`.

    Parameters
    ----------
    n_components : int, default=10
        Number of experts K (and of gate vectors), an upper bound on the
        number the fit uses.
    inference : {"vi", "mcmc", "pr"}, default="vi"
        - "vi": variational inference with the Type II MABN prior ([1]_,
          supplement section 2): q = vMF x Gamma for every vector, coordinate
          ascent on a lower bound of the ELBO.
        - "mcmc": Metropolis-Hastings with the Type I MABN prior ([1]_,
          supplement section 3); predictions average over the kept samples.
        - "pr": posterior regularization ([1]_, supplement section 4): the
          variational family of "vi" with independent priors, plus
          ``expert_regularization`` x Omega(experts) + ``gate_regularization``
          x Omega(gates), Omega the mean pairwise angle.

        "vi" is the fastest; "mcmc" is not held to one optimum and costs
        more (user guide, "Choosing a method and settings").
    prior : {"mabn", "gaussian"}, default="mabn"
        "gaussian": the BMEM-G baseline without diversity, every vector
        ~ N(0, sigma^2 I) with sigma = ``prior_std``; fitted by closed-form
        variational Bayes (inference="vi") or a Gaussian random walk
        ("mcmc"). Not available with inference="pr" (ValueError).
    diversity_strength : float, default=1.0
        kappa of the MABN prior ("vi", "mcmc"), in [0, 1e8]: 0 gives uniform,
        independent directions; larger values push the directions towards a
        regular simplex. Beyond 1e8 a vMF distribution is a point mass to
        double precision, so larger values raise a ValueError. Tune it by
        cross-validation.
    expert_regularization, gate_regularization : float, default=1.0
        lambda_1, lambda_2 >= 0 of "pr", nats per radian of mean pairwise
        angle; ignored by "vi" and "mcmc".
    prior_std : float, default=1.0
        sigma of the Gaussian prior (prior="gaussian"; also of the BMEM-G fit
        that starts every method), in [1e-100, 1e100].
    fit_intercept : bool, default=True
        Append a constant feature, so that every expert and gate has an
        intercept (part of the vector the prior acts on; the root of the MABN
        points along it). In "vi" and "pr" the experts see that feature as 3
        and the gates as 1, so that an expert's intercept has a prior three
        times broader than its weights' (user guide, "Intercepts").
    max_iter : int, default=100
        Iterations per run: outer iterations of "vi", "pr" and the Gaussian
        "vi"; for "mcmc", blocks of 25 sweeps, which must cover ``burn_in``
        and ``n_mcmc_samples`` (a ConvergenceWarning names the max_iter
        needed otherwise).
    tol : float or None, default=1e-3
        "vi", "pr", Gaussian "vi": a run has converged when the ELBO (nats per
        sample) has not improved on its best value by more than ``tol`` for
        ``n_iter_no_change`` iterations; with n > 2 classes the ELBO sums n
        one-vs-rest problems and must improve by ``tol`` x n. None: no
        convergence test and no ConvergenceWarning, every run takes
        ``max_iter`` iterations (with ``early_stopping`` the patience rule
        applies with a tolerance of 0). Not used by "mcmc", whose run ends
        with its schedule.
    n_iter_no_change : int, default=3
        Patience of the ``tol`` rule.
    n_init : int, default=1
        Independent runs, each from its own random start; the run with the
        highest final ``elbo_`` is kept.
    warm_start : bool, default=False
        Continue from the fitted state ("vi", "pr": q; "mcmc": the chain,
        which draws ``n_mcmc_samples`` new samples) on data with the same
        features and classes.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows, monitor
        their ELBO and keep the best iteration's state ("vi", "pr"; "mcmc"
        raises a ValueError).
    validation_fraction : float, default=0.1
        Fraction of rows held out by ``early_stopping``.
    n_mcmc_samples : int, default=200
        Kept MCMC sweeps ("mcmc").
    burn_in : int, default=1000
        MCMC sweeps discarded first ("mcmc"); during them the proposal scale
        of every vector is adapted every 25 sweeps towards an acceptance
        rate of 0.3, then frozen.
    random_state : int, RandomState instance or None, default=None
        Seed of the starts and of the chain.
    verbose : int, default=0
        >= 1: one line per iteration (the ELBO, or for "mcmc" the log joint
        density, in nats per sample, and elapsed seconds), and at the end
        the experts in use and the responsibility entropy.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of the features, when X has string column names.
    expert_coef_ : ndarray of shape (n_problems, K, n_features)
        Posterior means of the expert weights (without the intercept);
        ``n_problems`` is 1 for two classes (``classes_[1]`` against
        ``classes_[0]``), else ``n_classes`` (one-vs-rest).
    expert_intercept_ : ndarray of shape (n_problems, K)
        Their intercepts (0 without ``fit_intercept``).
    gate_coef_ : ndarray of shape (n_problems, K, n_features)
        Posterior means of the gate vectors.
    gate_intercept_ : ndarray of shape (n_problems, K)
        Their intercepts.
    expert_angle_mean_, expert_angle_var_ : ndarray of shape (n_problems,)
        Mean and variance of the pairwise non-obtuse angles (radians, in
        [0, pi/2]) between the posterior mean expert vectors (intercept
        included), the vectors the angular prior acts on: with "vi" and "pr"
        their intercept divided by the experts' intercept scale (user guide,
        "Intercepts"); NaN for K = 1.
    gate_angle_mean_, gate_angle_var_ : ndarray of shape (n_problems,)
        The same for the gate vectors.
    expert_usage_ : ndarray of shape (n_problems, K)
        Fraction of the training rows whose most responsible expert is k with
        responsibility p(z = k | x, y) >= (K + 1) / (2 K) (half way from 1/K
        to 1), at the posterior mean vectors.
    n_active_components_ : ndarray of int of shape (n_problems,)
        Experts in use: those with ``expert_usage_`` >= 0.01 (at least 1).
        Fewer than K is the prior at work, not a failure.
    responsibility_entropy_ : ndarray of shape (n_problems,)
        Mean row entropy of the responsibilities over log K, in [0, 1]; near
        1 the gates are dead (every row shared equally, the experts act as
        one). NaN for K = 1.
    elbo_ : float
        "vi", "pr": training objective at the end, nats per sample, summed
        over the one-vs-rest problems: "vi" and Gaussian "vi" the ELBO lower
        bound, "pr" the posterior-regularized objective. Not set by "mcmc".
    elbo_history_ : ndarray of shape (``n_iter_``,)
        The same after every iteration; never decreasing.
    log_joint_ : float
        "mcmc" (in place of ``elbo_``; a chain has no ELBO): the log joint
        density log p(y, beta, eta | X) per sample, summed over the
        one-vs-rest problems, averaged over (up to 20 of) the kept samples.
    log_joint_history_ : ndarray of shape (``n_iter_``,)
        "mcmc": the log joint density per sample averaged over the sweeps of
        each block, burn-in included.
    n_iter_ : int
        Iterations (blocks of sweeps for "mcmc") of the kept run.
    converged_ : bool
        "vi", "pr": the ``tol`` rule was met; "mcmc": the schedule was
        completed within ``max_iter`` blocks.
    validation_scores_ : ndarray of shape (``n_iter_``,) or None
        Held-out ELBO per iteration with ``early_stopping``, else None.
    best_validation_score_ : float or None
        Best value of ``validation_scores_``, else None.
    log_posterior_trace_ : ndarray of shape (n_problems, n_sweeps)
        "mcmc": the log joint density (nats, total) after every sweep.
    acceptance_rates_ : list of dict
        "mcmc": acceptance rate per move type over the kept sweeps, per problem.
    expert_samples_, gate_samples_ : ndarray of shape (n_problems, S, K, p)
        "mcmc": the kept samples, S = ``n_mcmc_samples``, p = n_features +
        fit_intercept (intercept last).
    fit_time_ : float
        Wall-clock training time in seconds.

    See Also
    --------
    sklearn.linear_model.LogisticRegression : one expert.
    sklearn.mixture.BayesianGaussianMixture : a Bayesian mixture that also
        switches off the components the data do not need.

    Notes
    -----
    Features must be on a common scale (binary, or standardized, e.g. with
    :class:`~sklearn.preprocessing.StandardScaler` in a pipeline): the prior
    is isotropic, and entries beyond 1e100 in magnitude raise a ValueError.

    Every method starts from a short BMEM-G variational fit (Gaussian prior)
    on at most 2,000 random rows: the best of 4 random candidates and a
    logistic regression (one expert in use), chosen on held-out rows, so the
    experts and gates start apart where the data put them, or as one expert
    where several do not predict better (User Guide, "Starting point"). Above
    100 design columns (or when K p^2 > 2e7) that fit uses a q factorized over
    coordinates, with no p x p matrix. Costs per outer iteration of "vi" /
    "pr": O(sum_n nnz_n^2 K) to form the bounds' sufficient statistics, then
    O(K p^2) per inner evaluation, memory O(K p^2 + n K); without the
    statistics (K p^2 > 2e7, p^2 > 3 nnz(X) or more than 256 non-zeros per
    row), O(nnz(X) K) per evaluation and memory O(n K + K p). "mcmc": O(nnz(X)
    + n K) per proposal, 4 K proposals per sweep. prior="gaussian" stores K p
    x p covariances and raises a ValueError above 2e7 entries.

    The Type II log-normalizer bound of the supplement of [1]_ (Lemma 1) is
    not a valid bound for p >= 19 and is replaced by a convex chord bound;
    the other corrections to the printed equations are listed in the user
    guide. The settings of the start, the inner ascent, the magnitude prior
    and the MCMC proposals are fixed (user guide, "Advanced settings").

    References
    ----------
    .. [1] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning
       of Latent Variable Models", ICML 2016, and its supplementary material.

    Examples
    --------
    >>> from skbinvi import DiversityMixtureOfExperts
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(200, 5, random_state=0)
    >>> model = DiversityMixtureOfExperts(2, random_state=0).fit(X, y)
    >>> model.predict_proba(X[:2]).shape
    (2, 2)
    >>> model.transform(X[:2]).shape
    (2, 2)

    One hyperplane separates these classes about as well as any mixture, so
    the fit keeps one expert in use:

    >>> int(model.n_active_components_[0])
    1
    """

    _structural_params = ("n_components", "prior", "inference", "fit_intercept")

    def _same_structure(self, name, now, fitted):
        if name == "inference":  # "vi" and "pr" share the variational state
            return (now == "mcmc") == (fitted == "mcmc")
        return super()._same_structure(name, now, fitted)

    _parameter_constraints: dict = {
        **FIT_LOOP_CONSTRAINTS,
        "n_components": [IntInterval(1, None, closed="left")],
        "inference": [StrOptions({"vi", "mcmc", "pr"})],
        "prior": [StrOptions({"mabn", "gaussian"})],
        "diversity_strength": [Interval(Real, 0, KAPPA_MAX, closed="both")],
        "expert_regularization": [Interval(Real, 0, None, closed="left")],
        "gate_regularization": [Interval(Real, 0, None, closed="left")],
        "prior_std": [Interval(Real, _PRIOR_STD_MIN, _PRIOR_STD_MAX, closed="both")],
        "fit_intercept": ["boolean"],
        "n_mcmc_samples": [IntInterval(1, None, closed="left")],
        "burn_in": [IntInterval(0, None, closed="left")],
    }

    def __init__(
        self,
        n_components=10,
        *,
        inference="vi",
        prior="mabn",
        diversity_strength=1.0,
        expert_regularization=1.0,
        gate_regularization=1.0,
        prior_std=1.0,
        fit_intercept=True,
        max_iter=100,
        tol=1e-3,
        n_iter_no_change=3,
        n_init=1,
        warm_start=False,
        early_stopping=False,
        validation_fraction=0.1,
        n_mcmc_samples=200,
        burn_in=1000,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.inference = inference
        self.prior = prior
        self.diversity_strength = diversity_strength
        self.expert_regularization = expert_regularization
        self.gate_regularization = gate_regularization
        self.prior_std = prior_std
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.n_init = n_init
        self.warm_start = warm_start
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_mcmc_samples = n_mcmc_samples
        self.burn_in = burn_in
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _design(self, X):
        """X with the constant column appended (CSR stays CSR)."""
        if sp.issparse(X):
            # canonical, int64 indices: the kernels then use it without copies
            if not self.fit_intercept:
                return prepared_csr(X)
            return prepared_csr(sp.hstack([X, sp.csr_matrix(np.ones((X.shape[0], 1)))],
                                          format="csr"))
        if not self.fit_intercept:
            return X
        return np.hstack([X, np.ones((X.shape[0], 1))])

    def _mu0(self, p):
        mu0 = np.zeros(p)
        mu0[-1 if self.fit_intercept else 0] = 1.0
        return mu0

    def _check_scale(self, X):
        data = X.data if sp.issparse(X) else X
        top = float(np.max(np.abs(data), initial=0.0))
        if top > _MAX_ABS_FEATURE:
            raise ValueError(
                f"{type(self).__name__}: X has entries of magnitude {top:.3g}; the "
                "prior is isotropic and needs features on a common scale (binary, or "
                "standardized, e.g. with sklearn.preprocessing.StandardScaler). "
                f"Entries above {_MAX_ABS_FEATURE:.0e} are rejected.")

    def _targets(self, y):
        """The 0/1 targets of the one-vs-rest problems (one for two classes)."""
        if self.classes_.size == 2:
            return [(y == 1).astype(np.float64)]
        return [(y == c).astype(np.float64) for c in range(self.classes_.size)]

    # -------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the posterior over the expert and gate vectors.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training inputs, finite, on a common scale (dense, or sparse
            converted to float64 CSR). Dense and sparse X are handled by
            kernels that round differently: the same data in both forms give
            fits that agree to rounding error at first, but the non-convex
            fit can then end at another nearby optimum.
        y : array-like of shape (n_samples,)
            Class labels, at least two classes.

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, holds NaN or infinity or entries beyond 1e100 in
            magnitude, has a shape that does not match y, if y is continuous
            or has one class only, if inference="pr" is combined with
            prior="gaussian", if prior="gaussian" would need more than 2e7
            covariance entries (K p^2), if inference="mcmc" is combined with
            ``early_stopping``, if the MABN prior would have directions in
            fewer than 2 dimensions (one feature, no intercept), if
            ``warm_start`` meets data of another shape or classes, or if a
            parameter is out of range.

        Warns
        -----
        ConvergenceWarning
            If a run stops at ``max_iter`` before meeting ``tol`` (or, for
            "mcmc", before finishing its sweeps). Experts left unused are not
            warned about: see ``n_active_components_`` and ``expert_usage_``.
        """
        if self.inference == "pr" and self.prior == "gaussian":
            raise ValueError(
                "inference='pr' regularizes the vMF x Gamma posterior of the MABN "
                "model; prior='gaussian' (the BMEM-G baseline) has no diversity term. "
                "Use inference='vi' or 'mcmc' with prior='gaussian'."
            )
        if self.inference == "mcmc" and self.early_stopping:
            raise ValueError(
                "early_stopping=True keeps the iteration with the best held-out "
                "ELBO, but inference='mcmc' draws its samples on a fixed schedule "
                "(burn_in, then n_mcmc_samples kept sweeps): an early iteration "
                "is a burn-in state. Use inference='vi' or 'pr', or "
                "early_stopping=False.")
        warm = self.warm_start and self._is_initialized()
        old_classes = getattr(self, "classes_", None)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             ensure_min_samples=2, reset=not warm)
        self._check_scale(X)
        check_classification_targets(y)
        classes, y_enc = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least two classes in y; got only "
                f"{classes[:1].tolist()[0]!r}."
            )
        if warm and not np.array_equal(classes, old_classes):
            raise ValueError(
                f"warm_start=True: y has classes {classes.tolist()} but the model "
                f"was fitted on {np.asarray(old_classes).tolist()}.")
        self.classes_ = classes
        Xd = self._design(X)
        p, K = Xd.shape[1], self.n_components
        if p < 2 and self.prior == "mabn":
            raise ValueError(
                f"The MABN prior needs directions in at least 2 dimensions; X has "
                f"{X.shape[1]} column(s) and fit_intercept={self.fit_intercept}, "
                f"so the experts live in {p}. Set fit_intercept=True, add "
                "features, or use prior='gaussian'.")
        if self.prior == "gaussian" and K * p * p > _GAUSSIAN_MAX_ENTRIES:
            raise ValueError(
                f"prior='gaussian' stores {K} covariance matrices of {p} x {p} "
                f"({K * p * p * 8 / 2**30:.1f} GiB); use at most "
                f"{int(np.sqrt(_GAUSSIAN_MAX_ENTRIES / K))} features, or the MABN "
                "prior (inference='vi', 'pr' or 'mcmc'), which needs no p x p matrix.")
        start = time.perf_counter()
        # many small (p x p) BLAS calls: one thread each avoids the busy-waiting of
        # BLAS thread pools, which costs more than it gains at these sizes
        with single_threaded_blas():
            self._fit_loop(Xd, y_enc)
        self.fit_time_ = time.perf_counter() - start
        return self

    # ------------------------------------------------------- fit-loop hooks
    def _engine(self):
        """The inference engine of the current settings (:class:`_Engine`)."""
        if self.inference == "mcmc":
            return _ChainEngine(self)
        if self.prior == "gaussian":
            return _GaussianEngine(self)
        return _VariationalEngine(self)

    def _initialize(self, X, y, rng):
        engine = self._engine()
        self._n_train_rows = X.shape[0]
        self._states = [engine.start(X, yc, rng) for yc in self._targets(y)]

    def _iterate(self, X, y, rng, partial=False):
        engine = self._engine()
        # the rows to which _elbo_per_sample charges the terms of no row
        self._n_train_rows = X.shape[0]
        context = engine.iteration_context(X)
        total = 0.0
        for yc, st in zip(self._targets(y), self._states, strict=True):
            total += engine.step(X, yc, rng, st, context)
        return total / X.shape[0]

    def _stopping_rule(self):
        return self._engine().stopping_rule(self._states)

    def _elbo_per_sample(self, X, y):
        """ELBO of the rows (X, y) per row, the KL term charged as in training.

        The objective is the rows' expected log-likelihood minus terms that
        do not depend on the rows (the KL of q from the prior; for "mcmc",
        the log prior of the draws). Divided by the number of rows, those
        terms would weigh 1 / n_rows: for a held-out tenth of the rows, ten
        times their weight in training, and early stopping would monitor a
        different trade-off than the one trained. So they are charged per
        training row, 1 / n_train, whatever the number of rows scored (on
        the training rows: the objective divided by their number).
        """
        n = X.shape[0]
        total = self._objective_total(X, y)
        n_train = self._n_train_rows
        if n == n_train:
            return total / n
        fixed = self._objective_total(X[:0], y[:0])
        return (total - fixed) / n + fixed / n_train

    def _objective_total(self, X, y):
        """The training objective at the current state on the rows (X, y), nats."""
        engine = self._engine()
        context = engine.objective_context(X)
        total = 0.0
        for yc, st in zip(self._targets(y), self._states, strict=True):
            total += engine.objective(X, yc, st, context)
        return total

    def _check_elbo_input(self, X, y):
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        self._check_scale(X)
        if y is None:
            raise ValueError("elbo(X, y) needs the labels y of the rows X: the "
                             "ELBO of a mixture of experts is that of p(y | X).")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},); got {y.shape}.")
        known = np.isin(y, self.classes_)
        if not np.all(known):
            raise ValueError(f"y has labels {np.unique(y[~known]).tolist()} that were "
                             f"not seen in fit (classes_ = {self.classes_.tolist()}).")
        return self._design(X), np.searchsorted(self.classes_, y)

    def _divergence_hint(self):
        return ("Standardize the features (the prior is isotropic), or lower "
                "prior_std.")

    def _after_fit(self, X, y):
        # The training rows' auxiliary bound parameters (c_n, d_nj, phi, xi),
        # the weights derived from them and the scratch arrays, O(n K) each,
        # are not part of the model: dropped, so that a fitted model and its
        # pickle do not grow with the training set. A warm start recomputes
        # them at the fitted q (one pass over the rows, as the first iteration
        # of a fit does).
        engine = self._engine()
        for st in self._states:
            engine.release(st)
        draws = [engine.draws(st) for st in self._states]
        self._experts = [d[0] for d in draws]
        self._gates = [d[1] for d in draws]
        mean_e = [e.mean(axis=0) for e in self._experts]
        mean_g = [g.mean(axis=0) for g in self._gates]
        d = self.n_features_in_
        self.expert_coef_ = np.stack([m[:, :d] for m in mean_e])
        self.gate_coef_ = np.stack([m[:, :d] for m in mean_g])
        # the intercept is the appended last column; zero without fit_intercept
        self.expert_intercept_ = np.stack([m[:, -1] * self.fit_intercept
                                           for m in mean_e])
        self.gate_intercept_ = np.stack([m[:, -1] * self.fit_intercept for m in mean_g])
        # the angles of the vectors the angular prior acts on
        scale = engine.expert_scale(mean_e[0].shape[1])
        ea = np.array([_angle_summary(m if scale is None else m / scale)
                       for m in mean_e])
        ga = np.array([_angle_summary(m) for m in mean_g])
        self.expert_angle_mean_, self.expert_angle_var_ = ea[:, 0], ea[:, 1]
        self.gate_angle_mean_, self.gate_angle_var_ = ga[:, 0], ga[:, 1]
        self._expert_use(X, y, mean_e, mean_g)
        for name in ("log_posterior_trace_", "acceptance_rates_", "expert_samples_",
                     "gate_samples_", "prior_hyperparameters_",
                     # the other algorithm's names of the loop's value
                     *(("elbo_", "elbo_history_") if self.inference == "mcmc"
                       else ("log_joint_", "log_joint_history_"))):
            if hasattr(self, name):
                delattr(self, name)
        engine.set_attributes(self._states)

    def _expert_use(self, X, y, mean_e, mean_g):
        """expert_usage_, n_active_components_, responsibility_entropy_ (and a
        verbose line): what the fit chose, reported, not warned about."""
        K = self.n_components
        usage, entropy = [], []
        for yc, e, g in zip(self._targets(y), mean_e, mean_g, strict=True):
            R = _responsibilities(X, yc, e, g)
            top = np.argmax(R, axis=1)
            clear = R[np.arange(R.shape[0]), top] >= (K + 1.0) / (2.0 * K)
            usage.append(np.bincount(top[clear], minlength=K) / R.shape[0])
            entropy.append(float(np.mean(special.entr(R).sum(axis=1)) / np.log(K))
                           if K > 1 else np.nan)
        self.expert_usage_ = np.array(usage)
        self.n_active_components_ = np.maximum(
            1, np.sum(self.expert_usage_ >= _USE_SHARE, axis=1)).astype(int)
        self.responsibility_entropy_ = np.array(entropy)
        if self.verbose:
            self._report(
                f"experts in use: n_active_components_ = "
                f"{self.n_active_components_.tolist()} of n_components = {K}; "
                f"responsibility_entropy_ = "
                f"{np.round(self.responsibility_entropy_, 3).tolist()}")

    def _concentration_price(self):
        """KL(q || uniform direction) of each expert's and its gate's direction.

        Returns an ndarray of shape (n_targets, K), nats (None unless "vi" /
        "pr"): see :meth:`_VariationalEngine.concentration_price`.
        """
        engine = self._engine()
        if not isinstance(engine, _VariationalEngine):
            return None
        return engine.concentration_price(self._states)

    # ---------------------------------------------------------------- predict
    def _check_X(self, X):
        self._check_fitted()
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        self._check_scale(X)
        return self._design(X)

    def predict_proba(self, X):
        """Posterior predictive class probabilities.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Inputs.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Binary: p(y = 1 | x) = sum_k softmax_k(eta^T x) sigmoid(beta_k^T x)
            at the posterior means ("vi", "pr") or averaged over the kept
            samples ("mcmc") (user guide, "The model"; Xie, Zhu and Xing,
            ICML 2016); columns in the order of ``classes_``. More classes:
            the one-vs-rest probabilities normalized to sum to one.

        Raises
        ------
        ValueError
            If X holds NaN or infinity or has the wrong number of features.
        """
        Xd = self._check_X(X)
        p1 = np.clip(np.column_stack([
            predict_proba_samples(Xd, e, g)[:, 1]
            for e, g in zip(self._experts, self._gates, strict=True)]), 0.0, 1.0)
        if len(self._experts) == 1:
            return np.column_stack([1.0 - p1[:, 0], p1[:, 0]])
        total = p1.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(total > 0, p1 / total, 1.0 / p1.shape[1])
        return out

    def predict(self, X):
        """Most probable class.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            ``classes_[argmax predict_proba]``.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of :meth:`predict` on (X, y).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Inputs.
        y : array-like of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            Fraction of samples predicted correctly.
        """
        return super().score(X, y, sample_weight=sample_weight)

    @available_if(_has_elbo)
    def elbo(self, X, y=None):
        """Evidence lower bound of the rows (X, y), nats per sample.

        The variational objective of ``fit`` (``inference="pr"``: the
        posterior-regularized one) summed over the one-vs-rest problems, for
        other rows: its KL term (which belongs to no row) charged per
        training row as in ``elbo_``, so that on the training rows it equals
        ``elbo_``. Not available with ``inference="mcmc"``, which has no
        ELBO (an AttributeError).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Inputs.
        y : array-like of shape (n_samples,)
            Their labels, from ``classes_`` (required: the ELBO is that of
            p(y | X)).

        Returns
        -------
        elbo : float
            Nats per sample (higher is better).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X is not valid input for the fitted model, or y is None or
            holds labels not seen in ``fit``.
        """
        return super().elbo(X, y)

    def transform(self, X):
        """Gate probabilities p(z = k | x), the soft assignment to experts.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        gates : ndarray of shape (n_samples, n_problems * n_components)
            softmax(eta^T x) at the posterior means (averaged over samples
            for "mcmc"); rows sum to 1 per block of ``n_components`` columns
            (one block per one-vs-rest problem, a single block for two
            classes). Output names: ``get_feature_names_out``; pandas output
            with ``set_output(transform="pandas")``.
        """
        Xd = self._check_X(X)
        return np.hstack([gate_proba_samples(Xd, g) for g in self._gates])

    @property
    def _n_features_out(self):
        return len(self._gates) * self.n_components

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = True
        return tags
