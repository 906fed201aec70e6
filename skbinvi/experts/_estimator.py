"""DiversityMixtureOfExperts: the Bayesian mixture of experts with a mutual angular prior."""

import time
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._angular import mutual_angles
from ._mcmc import predict_proba_samples, run_metropolis_hastings, run_monte_carlo_em
from ._variational import _mean_directions, fit_gaussian_variational, fit_variational

# burn-in is run in blocks of this many sweeps; after each block the proposal
# scales are adapted towards the target acceptance rate (burn-in only)
_ADAPT_BLOCK = 25
_TARGET_ACCEPTANCE = 0.3
# iterations of the BMEM-G variational fit that gives the chain its start
_MCMC_INIT_ITER = 20


def _posterior_mean_vectors(params):
    """E[a_k] = (r_k / s_k) A_p(kappa_k) mu_k of a vMF x Gamma q, (K, p)."""
    return (params.r / params.s)[:, None] * _mean_directions(params)


def _adapt_factor(rate):
    """Multiplicative step-size change from acceptance rates (> 1: bigger moves)."""
    rate = np.nan_to_num(np.asarray(rate, dtype=np.float64), nan=_TARGET_ACCEPTANCE)
    return np.exp(2.0 * np.clip(rate - _TARGET_ACCEPTANCE, -0.5, 0.5))


def _angle_summary(A):
    """Mean and variance of the K (K - 1) / 2 pairwise non-obtuse angles (radians)."""
    K = A.shape[0]
    if K < 2 or np.any(np.linalg.norm(A, axis=1) == 0):
        return np.nan, np.nan
    theta = mutual_angles(A)[np.triu_indices(K, k=1)]
    return float(theta.mean()), float(theta.var())


def _gate_proba(X, gates):
    """softmax(eta_k^T x) averaged over S gate sets (S, K, p) -> (n, K)."""
    out = np.zeros((X.shape[0], gates.shape[1]))
    for e in gates:
        out += special.softmax(np.asarray(X @ e.T), axis=1)
    return out / len(gates)


class DiversityMixtureOfExperts(ClassifierMixin, TransformerMixin, BaseEstimator):
    r"""Bayesian mixture of experts with a diversity-promoting (mutual angular) prior.

    K logistic-regression experts and a softmax gate ([1]_, BMEM):

    .. math::

        p(z = k \mid x) = \mathrm{softmax}_k(\eta^\top x), \qquad
        p(y = 1 \mid x, z = k) = \sigma(\beta_k^\top x).

    Every expert vector :math:`\beta_k` and gate vector :math:`\eta_k` is a
    magnitude times a direction, :math:`a = g\,\tilde a` with
    :math:`g \sim \mathrm{Gamma}(\alpha_1, \alpha_2)`, and the directions of
    each set follow the mutual angular Bayesian network (MABN): direction i
    is drawn from a von Mises-Fisher distribution pointing away from the sum
    of the earlier ones, so the experts (and gates) are pushed apart with
    strength :math:`\kappa` (``diversity_strength``). Binary classification;
    more classes are handled one-vs-rest inside the estimator (one mixture
    per class, probabilities normalized over classes).

    Parameters
    ----------
    n_components : int, default=10
        Number of experts K (and gate vectors).
    inference : {"vi", "mcmc", "pr"}, default="vi"
        - "vi": variational inference with the Type II MABN prior ([1]_
          supplement section 2): q = vMF x Gamma for every vector, the
          bounds of the user guide, coordinate ascent.
        - "mcmc": Metropolis-Hastings with the Type I MABN prior ([1]_
          supplement section 3): vMF random-walk proposals for the
          directions, positive-truncated normal proposals for the
          magnitudes; predictions average over the kept samples.
        - "pr": posterior regularization ([1]_ supplement section 4): the
          variational family of "vi" with independent priors (uniform
          directions, Gamma magnitudes) plus lambda_1 Omega(experts) +
          lambda_2 Omega(gates), Omega the mutual angular regularizer and
          lambda_1, lambda_2 = ``expert_regularization``,
          ``gate_regularization``.
    prior : {"mabn", "gaussian"}, default="mabn"
        "gaussian" is the paper's BMEM-G baseline without diversity: every
        vector ~ N(0, sigma^2 I), sigma = ``prior_std``. With inference="vi"
        it is fitted by closed-form variational Bayes (Gaussian q), with
        "mcmc" by a Gaussian random walk. Not available with inference="pr".
    diversity_strength : float, default=1.0
        kappa >= 0 of the MABN prior ("vi", "mcmc"); 0 means uniform,
        independent directions. Tune it by cross-validation ([1]_).
    expert_regularization, gate_regularization : float, default=1.0
        lambda_1, lambda_2 >= 0 of "pr" (nats per radian of Omega).
    angle_variance_weight : float, default=0.0
        gamma >= 0 of Omega = mean(angles) - gamma var(angles) ("pr").
    magnitude_shape, magnitude_rate : float, default=2.0, 0.5
        alpha_1, alpha_2 > 0: Gamma(shape, rate) prior of every magnitude g
        (prior mean alpha_1 / alpha_2 = 4).
    prior_std : float, default=1.0
        sigma > 0 of the Gaussian prior (prior="gaussian").
    fit_intercept : bool, default=True
        Append a constant feature to X, so that every expert and gate has an
        intercept (it is part of the vector the prior acts on). The root of
        the MABN points along this constant feature.
    max_iter : int, default=100
        Outer iterations of "vi" / "pr" / Gaussian "vi" (each re-optimizes
        the bounds' auxiliary parameters, then ascends q).
    tol : float, default=1e-6
        Stop when the objective's relative increase over one outer iteration
        is below tol.
    inner_max_iter : int, default=10
        Rounds of blockwise gradient steps on q per outer iteration ("vi", "pr").
    init_concentration : float, default=10.0
        Initial variational vMF concentration ("vi", "pr").
    n_samples : int, default=200
        Kept MCMC samples ("mcmc").
    burn_in : int, default=300
        MCMC sweeps discarded first; during burn-in the proposal scales of
        every vector (direction concentration, magnitude or random-walk step)
        are adapted every 25 sweeps towards an acceptance rate of 0.3 from
        that vector's own acceptance rate, then frozen.
    thin : int, default=1
        Keep every ``thin``-th sweep after burn-in.
    proposal_concentration : float, default=200.0
        Initial concentration of the vMF direction proposal ("mcmc", MABN).
    proposal_scale : float, default=0.1
        Initial standard deviation of the magnitude proposal (MABN) or of the
        Gaussian random walk (prior="gaussian").
    n_em_iter : int, default=0
        "mcmc" with the MABN prior: after the burn-in, learn the root
        direction mu_0 and the Gamma prior (``magnitude_shape``,
        ``magnitude_rate`` are then the starting values) by this many Monte
        Carlo EM iterations of 50 sweeps each ([1]_ supplement section 3;
        :func:`~skbinvi.experts._mcmc.run_monte_carlo_em`), then sample with
        the learned values after 25 more burn-in sweeps. 0: fixed
        hyper-parameters. Ignored by the other settings.
    random_state : int, RandomState instance or None, default=None
        Seed of the initial q ("vi", "pr") and of the chain ("mcmc").
    verbose : int, default=0
        Print the objective per iteration (>= 1) and per-problem timings.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of features seen during fit.
    expert_coef_ : ndarray of shape (K, n_features) or (n_classes, K, n_features)
        Posterior means of the expert weights beta_k (without the intercept);
        one block per class when there are more than two classes.
    expert_intercept_ : ndarray of shape (K,) or (n_classes, K)
        Their intercepts (zero without ``fit_intercept``).
    gate_coef_ : ndarray, same shape as ``expert_coef_``
        Posterior means of the gate vectors eta_k.
    gate_intercept_ : ndarray, same shape as ``expert_intercept_``
    expert_angle_mean_, expert_angle_var_ : float or ndarray of shape (n_classes,)
        Mean and variance of the pairwise non-obtuse angles (radians, in
        [0, pi/2]) between the posterior mean expert vectors (intercept
        included); NaN for K = 1.
    gate_angle_mean_, gate_angle_var_ : float or ndarray of shape (n_classes,)
        The same for the gate vectors.
    elbo_history_ : ndarray of shape (``n_iter_`` + 1,) or list of them
        "vi": the ELBO lower bound (nats, total over training samples) at the
        start and after every iteration, non-decreasing. "pr": the
        posterior-regularized objective (the ELBO with independent priors
        plus the weighted Omega terms). Absent for "mcmc".
    log_posterior_trace_ : ndarray of shape (n_sweeps,) or list of them
        "mcmc": the log joint density (nats) after every sweep.
    acceptance_rates_ : dict or list of dict
        "mcmc": acceptance rate per move type over the kept sweeps.
    expert_samples_, gate_samples_ : ndarray of shape (n_samples, K, n_features + fit_intercept)
        "mcmc": the kept samples (intercept last); a leading class axis for
        more than two classes.
    prior_hyperparameters_ : dict or list of dict
        "mcmc" with ``n_em_iter > 0``: the learned ``mu0`` (unit vector of
        length n_features + fit_intercept), ``magnitude_shape`` and
        ``magnitude_rate``.
    n_iter_ : int
        Iterations ("vi", "pr") or sweeps ("mcmc") run (the maximum over
        classes).
    fit_time_ : float
        Wall-clock training time in seconds.

    See Also
    --------
    sklearn.linear_model.LogisticRegression : one expert.

    Notes
    -----
    Costs per outer iteration of "vi" / "pr" on sparse X: O(sum_n nnz_n^2 K)
    to form the bounds' sufficient statistics, then O(K p^2) per inner
    evaluation; memory O(K p^2 + n K). "mcmc": O(nnz(X) + n K) per
    proposal, 4 K proposals per sweep. Features should be on a common scale
    (binary, or standardized): the prior is isotropic.

    Errors in the printed equations of [1]_ and how the code handles them
    are listed in the user guide; the Type II log-normalizer bound of the
    supplement (Lemma 1) is not a valid bound for p >= 19 and is replaced by
    a valid convex chord bound.

    References
    ----------
    .. [1] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning
       of Latent Variable Models", ICML 2016, and its supplementary material.

    Examples
    --------
    >>> from skbinvi import DiversityMixtureOfExperts
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(200, 5, random_state=0)
    >>> model = DiversityMixtureOfExperts(3, max_iter=20, random_state=0).fit(X, y)
    >>> model.predict_proba(X[:2]).shape
    (2, 2)
    >>> model.transform(X[:2]).shape
    (2, 3)
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "inference": [StrOptions({"vi", "mcmc", "pr"})],
        "prior": [StrOptions({"mabn", "gaussian"})],
        "diversity_strength": [Interval(Real, 0, None, closed="left")],
        "expert_regularization": [Interval(Real, 0, None, closed="left")],
        "gate_regularization": [Interval(Real, 0, None, closed="left")],
        "angle_variance_weight": [Interval(Real, 0, None, closed="left")],
        "magnitude_shape": [Interval(Real, 0, None, closed="neither")],
        "magnitude_rate": [Interval(Real, 0, None, closed="neither")],
        "prior_std": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "inner_max_iter": [Interval(Integral, 1, None, closed="left")],
        "init_concentration": [Interval(Real, 0, None, closed="neither")],
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "burn_in": [Interval(Integral, 0, None, closed="left")],
        "thin": [Interval(Integral, 1, None, closed="left")],
        "proposal_concentration": [Interval(Real, 0, None, closed="left")],
        "proposal_scale": [Interval(Real, 0, None, closed="neither")],
        "n_em_iter": [Interval(Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
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
        angle_variance_weight=0.0,
        magnitude_shape=2.0,
        magnitude_rate=0.5,
        prior_std=1.0,
        fit_intercept=True,
        max_iter=100,
        tol=1e-6,
        inner_max_iter=10,
        init_concentration=10.0,
        n_samples=200,
        burn_in=300,
        thin=1,
        proposal_concentration=200.0,
        proposal_scale=0.1,
        n_em_iter=0,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.inference = inference
        self.prior = prior
        self.diversity_strength = diversity_strength
        self.expert_regularization = expert_regularization
        self.gate_regularization = gate_regularization
        self.angle_variance_weight = angle_variance_weight
        self.magnitude_shape = magnitude_shape
        self.magnitude_rate = magnitude_rate
        self.prior_std = prior_std
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.inner_max_iter = inner_max_iter
        self.init_concentration = init_concentration
        self.n_samples = n_samples
        self.burn_in = burn_in
        self.thin = thin
        self.proposal_concentration = proposal_concentration
        self.proposal_scale = proposal_scale
        self.n_em_iter = n_em_iter
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _design(self, X):
        """X with the constant column appended (CSR stays CSR)."""
        if not self.fit_intercept:
            return X
        ones = np.ones((X.shape[0], 1))
        if sp.issparse(X):
            return sp.hstack([X, sp.csr_matrix(ones)], format="csr")
        return np.hstack([X, ones])

    def _mu0(self, p):
        mu0 = np.zeros(p)
        mu0[-1 if self.fit_intercept else 0] = 1.0
        return mu0

    # -------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the posterior over the expert and gate vectors.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training inputs (finite; dense or CSR/CSC, converted to float64 CSR).
        y : array-like of shape (n_samples,)
            Class labels, at least two classes.

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, holds NaN or infinity, has a shape that does not
            match y, if y is continuous or has one class only, if
            inference="pr" is combined with prior="gaussian", or if a
            parameter is out of range.

        Warns
        -----
        ConvergenceWarning
            If a variational fit stops at ``max_iter`` before meeting ``tol``.
        """
        if self.inference == "pr" and self.prior == "gaussian":
            raise ValueError(
                "inference='pr' regularizes the vMF x Gamma posterior of the MABN "
                "model; prior='gaussian' (the BMEM-G baseline) has no diversity term. "
                "Use inference='vi' or 'mcmc' with prior='gaussian'."
            )
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             ensure_min_samples=2)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least two classes in y; got only "
                f"{self.classes_[0]!r}."
            )
        Xd = self._design(X)
        rng = check_random_state(self.random_state)
        targets = ([self.classes_[1]] if self.classes_.size == 2 else list(self.classes_))
        start = time.perf_counter()
        fits = []
        for c in targets:
            yc = (y == c).astype(np.float64)
            seed = rng.randint(np.iinfo(np.int32).max)
            tick = time.perf_counter()
            fits.append(self._fit_binary(Xd, yc, seed))
            if self.verbose:
                print(f"[{type(self).__name__}] class {c!r}: "
                      f"{time.perf_counter() - tick:.2f} s")
        self.fit_time_ = time.perf_counter() - start
        self._store(fits)
        return self

    def _fit_binary(self, X, y, seed):
        """One binary mixture; returns a dict of arrays (vectors with intercept last)."""
        K = self.n_components
        if self.inference == "mcmc":
            return self._fit_mcmc(X, y, seed)
        if self.prior == "gaussian":
            res = fit_gaussian_variational(X, y, K, sigma=self.prior_std,
                                           max_iter=self.max_iter, tol=self.tol,
                                           random_state=seed, verbose=self.verbose)
            experts, gates = res.beta_mean, res.eta_mean
        else:
            res = fit_variational(
                X, y, K, method=self.inference,
                kappa_prior=(self.diversity_strength if self.inference == "vi" else 0.0),
                mu0=self._mu0(X.shape[1]), alpha1=self.magnitude_shape,
                alpha2=self.magnitude_rate,
                pr_weights=(self.expert_regularization, self.gate_regularization),
                pr_gamma=self.angle_variance_weight, max_iter=self.max_iter,
                tol=self.tol, inner_max_iter=self.inner_max_iter,
                kappa_init=self.init_concentration, random_state=seed,
                verbose=self.verbose)
            experts = _posterior_mean_vectors(res.beta)
            gates = _posterior_mean_vectors(res.eta)
        if not res.converged:
            warnings.warn(
                f"{type(self).__name__}: maximum number of iterations "
                f"({self.max_iter}) reached before the objective's relative "
                f"increase fell below tol={self.tol}. Consider increasing max_iter.",
                ConvergenceWarning, stacklevel=3)
        return dict(experts=experts[None], gates=gates[None],
                    history=res.objective_history, n_iter=res.n_iter)

    def _fit_mcmc(self, X, y, seed):
        K, p = self.n_components, X.shape[1]
        rng = check_random_state(seed)
        # start the chain near the posterior mode: a short BMEM-G variational fit
        start = fit_gaussian_variational(X, y, K, sigma=self.prior_std,
                                         max_iter=_MCMC_INIT_ITER, tol=self.tol,
                                         random_state=rng.randint(2**31 - 1))
        init = {"beta": start.beta_mean, "eta": start.eta_mean}
        for v in init.values():  # MABN directions need non-zero vectors
            v[np.linalg.norm(v, axis=1) == 0, -1] = 1e-3
        common = dict(prior=self.prior, kappa=self.diversity_strength, mu0=self._mu0(p),
                      alpha1=self.magnitude_shape, alpha2=self.magnitude_rate,
                      sigma=self.prior_std)
        # one proposal scale per vector (row 0 experts, row 1 gates): unused
        # experts, whose direction the data do not constrain, must not drag
        # the scales of the others
        kappa_hat = np.full((2, K), float(self.proposal_concentration))
        scale = np.full((2, K), float(self.proposal_scale))
        traces = []
        done = 0
        while done < self.burn_in:  # adaptive burn-in (discarded)
            block = min(_ADAPT_BLOCK, self.burn_in - done)
            res = run_metropolis_hastings(
                X, y, K, n_samples=1, burn_in=block - 1, thin=1,
                direction_concentration=kappa_hat, magnitude_scale=scale,
                gaussian_scale=scale, random_state=rng, init=init, **common)
            init = {"beta": res.beta_samples[-1], "eta": res.eta_samples[-1]}
            traces.append(res.log_posterior)
            rates = res.vector_acceptance_rates  # (2, K, moves)
            # larger kappa_hat / smaller scale = smaller moves = higher acceptance
            if self.prior == "mabn":
                kappa_hat = np.clip(kappa_hat * _adapt_factor(rates[..., 0]) ** -2,
                                    1.0, 1e8)
            scale = np.clip(scale * _adapt_factor(rates[..., -1]), 1e-6, 1e3)
            done += block
        learned = None
        if self.n_em_iter > 0 and self.prior == "mabn":
            res = run_monte_carlo_em(
                X, y, K, kappa=self.diversity_strength, mu0=common["mu0"],
                alpha1=self.magnitude_shape, alpha2=self.magnitude_rate,
                n_em_iter=self.n_em_iter, sweeps_per_em_iter=2 * _ADAPT_BLOCK,
                burn_in=_ADAPT_BLOCK, n_samples=self.n_samples, thin=self.thin,
                direction_concentration=kappa_hat, magnitude_scale=scale,
                random_state=rng, init=init)
            learned = dict(mu0=res.mu0, magnitude_shape=res.alpha1,
                           magnitude_rate=res.alpha2)
            extra = _ADAPT_BLOCK * (2 + 2 * self.n_em_iter)
        else:
            res = run_metropolis_hastings(
                X, y, K, n_samples=self.n_samples, burn_in=0, thin=self.thin,
                direction_concentration=kappa_hat, magnitude_scale=scale,
                gaussian_scale=scale, random_state=rng, init=init, **common)
            extra = 0
        traces.append(res.log_posterior)
        return dict(experts=res.beta_samples, gates=res.eta_samples,
                    trace=np.concatenate(traces), rates=res.acceptance_rates,
                    n_iter=self.burn_in + extra + self.n_samples * self.thin,
                    proposal=(kappa_hat, scale), learned=learned,
                    vector_rates=res.vector_acceptance_rates)

    def _store(self, fits):
        """Public attributes from the per-problem fits."""
        binary = len(fits) == 1
        self._experts = [f["experts"] for f in fits]  # (S, K, p + intercept) each
        self._gates = [f["gates"] for f in fits]

        def pick(values):
            return values[0] if binary else values

        mean_e = [e.mean(axis=0) for e in self._experts]
        mean_g = [g.mean(axis=0) for g in self._gates]
        d = self.n_features_in_
        self.expert_coef_ = pick(np.stack([m[:, :d] for m in mean_e]))
        self.gate_coef_ = pick(np.stack([m[:, :d] for m in mean_g]))
        # the intercept is the appended last column; zero without fit_intercept
        self.expert_intercept_ = pick(np.stack(
            [m[:, -1] * self.fit_intercept for m in mean_e]))
        self.gate_intercept_ = pick(np.stack(
            [m[:, -1] * self.fit_intercept for m in mean_g]))
        ea = np.array([_angle_summary(m) for m in mean_e])
        ga = np.array([_angle_summary(m) for m in mean_g])
        self.expert_angle_mean_, self.expert_angle_var_ = pick(ea[:, 0]), pick(ea[:, 1])
        self.gate_angle_mean_, self.gate_angle_var_ = pick(ga[:, 0]), pick(ga[:, 1])
        self.n_iter_ = int(max(f["n_iter"] for f in fits))
        for name in ("elbo_history_", "log_posterior_trace_", "acceptance_rates_",
                     "expert_samples_", "gate_samples_", "prior_hyperparameters_"):
            if hasattr(self, name):
                delattr(self, name)
        if self.inference == "mcmc":
            self.log_posterior_trace_ = pick([f["trace"] for f in fits])
            self.acceptance_rates_ = pick([f["rates"] for f in fits])
            self.expert_samples_ = pick(np.stack(self._experts))
            self.gate_samples_ = pick(np.stack(self._gates))
            if fits[0]["learned"] is not None:
                self.prior_hyperparameters_ = pick([f["learned"] for f in fits])
        else:
            self.elbo_history_ = pick([f["history"] for f in fits])

    # ---------------------------------------------------------------- predict
    def _check_X(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
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
            samples ("mcmc") ([Xie], METHODS.md section 3); columns in the
            order of ``classes_``. More classes: the one-vs-rest
            probabilities normalized to sum to one.

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

    def transform(self, X):
        """Gate probabilities p(z = k | x), the soft assignment to experts.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        gates : ndarray of shape (n_samples, n_components) or (n_samples, n_classes * n_components)
            softmax(eta^T x) at the posterior means (averaged over samples
            for "mcmc"); rows sum to 1 (per class block for more than two
            classes).
        """
        Xd = self._check_X(X)
        return np.hstack([_gate_proba(Xd, g) for g in self._gates])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = True
        return tags
