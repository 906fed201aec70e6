"""LatentFeatureRelational: link prediction with binary latent features and a probit link."""

import time
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import expit, logit, ndtr, ndtri
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _kernels

# Logits are kept in [-_MAX_LOGIT, _MAX_LOGIT] so that log q and log(1 - q)
# stay finite (q within 1e-13 of 0 or 1 at worst); cavi_sweep uses the same.
_MAX_LOGIT = _kernels.MAX_LOGIT


class LatentFeatureRelational(ClassifierMixin, TransformerMixin, BaseEstimator):
    r"""Latent feature relational model: link prediction with binary features.

    Every entity i (a person, a protein, a web page) has D binary latent
    features :math:`z_{id} \sim \mathrm{Bernoulli}(\rho)`, and the link
    between two entities follows a probit model of the features they share
    ([1]_ supplement, a finite, diagonal-weight version of [2]_):

    .. math::

        p(x_{ij} = 1 \mid z) = \Phi(\eta_{ij}), \qquad
        \eta_{ij} = w_0 + \sum_{d=1}^D w_d z_{id} z_{jd},

    with :math:`\Phi` the standard normal CDF. The model is undirected:
    :math:`\eta_{ij} = \eta_{ji}`. The posterior is approximated by mean
    field, :math:`q(z) = \prod_{id} \mathrm{Bernoulli}(q_{id})`
    (``latent_features_``), and the weights (``intercept_``, ``weights_``)
    are point estimates. Every method maximizes, and reports in
    ``elbo_history_``, the true ELBO ([1]_ Eq. A.1)

    .. math::

        \mathcal{L}(q, w) = \sum_{(i, j) \in \mathcal{O}}
            \mathbb{E}_q\big[x_{ij} \log \Phi(\eta_{ij})
            + (1 - x_{ij}) \log \Phi(-\eta_{ij})\big]
            - \sum_{i, d} \mathrm{KL}\big(\mathrm{Bern}(q_{id})
            \,\|\, \mathrm{Bern}(\rho)\big)

    over the observed pairs :math:`\mathcal{O}` (the rows of X in
    :meth:`fit`); pairs that are not given do not enter it. One iteration
    updates q, then w:

    - ``inference="mcvi"`` (Monte Carlo VI with each binary variable summed
      out, [1]_, [3]_): for every (i, d) at once, from the same
      ``n_mc_samples`` joint samples of q, the mean of
      :math:`\Delta_{id}(z) = \log p(x, z_{id}{=}1, z_{-id}) - \log p(x,
      z_{id}{=}0, z_{-id})` with :math:`z_{id}` summed out exactly, and the
      natural-gradient step :math:`\lambda \leftarrow (1 - r_t)\lambda + r_t
      \bar\Delta` on the logits :math:`\lambda = \operatorname{logit} q`
      (with the exact expectation and :math:`r_t = 1`, coordinate ascent).
      The w step is a pass of coordinate ascent on the EM (minorize-
      maximize) bound of the true ELBO, its right-hand side estimated with
      the same samples, damped with the same step size :math:`r_t`.
    - ``inference="cavi"`` (data-augmented coordinate ascent, [1]_ A.2-A.4,
      [4]_): auxiliary :math:`y_{ij} \sim N(\eta_{ij}, 1)`, :math:`x_{ij} =
      1\{y_{ij} \ge 0\}`; truncated-normal q(y), a sweep of closed-form
      updates :math:`\operatorname{logit} q_{id} = \operatorname{logit}\rho
      + \sum_j q_{jd} w_d (\mathbb{E}[y_{ij}] - w_0 - w_d/2 - \sum_{e \ne d}
      w_e q_{ie} q_{je})` (the supplement's A.4 with its two typos
      corrected, see the User Guide) and a w step, each maximizing the
      looser augmented bound, which never decreases.
    - ``inference="score"`` (baseline): Rao-Blackwellized score-function
      (REINFORCE) gradient of the true ELBO with a control variate, from the
      same ``n_mc_samples`` samples, and natural-gradient steps of size
      :math:`r_t`; w as for "mcvi". For comparison with "mcvi".

    The Monte Carlo methods use the step sizes :math:`r_t = (t +
    \text{learning\_offset})^{-\text{learning\_decay}}` (Robbins-Monro:
    :math:`\sum r_t = \infty`, :math:`\sum r_t^2 < \infty` for a decay in
    (0.5, 1]), t counting iterations from 0.

    Pairs are rows of X, entity ids (i, j); y is the link (two classes, the
    second one of ``classes_`` is "linked"). Scikit-learn's cross-validation
    and :class:`~sklearn.model_selection.GridSearchCV` split the pairs, so
    held-out pairs are exactly the unobserved ones of the model.

    Read more in the :ref:`User Guide <relational>`.

    Parameters
    ----------
    n_components : int, default=10
        Number of latent features D.
    inference : {"mcvi", "cavi", "score"}, default="mcvi"
        Inference method (see above).
    feature_prior : float in (0, 1), default=0.5
        Prior probability rho of each feature, :math:`p(z_{id} = 1)`.
    alpha : float >= 0, default=1.0
        Precision of a Gaussian prior :math:`N(0, 1/\alpha)` on each weight
        w_1..w_D, that is a ridge penalty :math:`\tfrac{\alpha}{2}\sum_d
        w_d^2` on the w step (the probit's latent noise has unit variance,
        as in :class:`~sklearn.linear_model.Ridge`). 0 is the unpenalized
        maximum likelihood step of [1]_; the intercept is never penalized.
    n_mc_samples : int, default=10
        "mcvi" and "score": joint samples of q per iteration (S).
    learning_offset : float >= 1, default=1.0
        "mcvi" and "score": offset of the step-size schedule (above); 1
        makes the first step a full one.
    learning_decay : float in (0.5, 1], default=0.55
        "mcvi" and "score": decay exponent of the step-size schedule.
    max_iter : int, default=300
        Maximum number of iterations (one w step and one update of q each;
        one sweep over all entities and features).
    tol : float >= 0, default=1e-4
        Tolerance in nats per observed pair: training stops when the true
        ELBO has not improved by more than ``tol`` times the number of
        observed pairs for ``n_iter_no_change`` consecutive evaluations.
    n_iter_no_change : int, default=10
        Number of evaluations without improvement before stopping.
    evaluate_every : int, default=1
        Evaluate the true ELBO every ``evaluate_every`` iterations (and after
        the last one). 0 or negative: never during training (``tol`` is not
        used, ``max_iter`` iterations run), as in
        :class:`~sklearn.decomposition.LatentDirichletAllocation`. With
        the defaults an evaluation costs about one "cavi" sweep, or a fifth
        of an "mcvi" iteration (measured).
    n_elbo_samples : int, default=32
        Monte Carlo samples of the true ELBO per pair (common random numbers
        drawn once in ``fit``, so it is a deterministic function of q and w).
    n_entities : int or None, default=None
        Number of entities; ids must lie in [0, n_entities). None: the
        largest id seen in ``fit`` plus one, and ids beyond it in
        :meth:`predict_proba` or :meth:`transform` are entities never seen,
        which get the prior (as do ids below it that appear in no training
        pair).
    warm_start : bool, default=False
        If True and the estimator is fitted, ``fit`` continues from the
        fitted q and w, the step-size schedule where it stopped, and appends
        to ``elbo_history_``. See :term:`the Glossary <warm_start>`.
    random_state : int, RandomState instance or None, default=None
        Controls the initial q, the Monte Carlo samples and the common random
        numbers of the ELBO. Pass an int for reproducible results. See
        :term:`Glossary <random_state>`.
    verbose : int, default=0
        If positive, print the true ELBO and the time of every evaluation.

    Attributes
    ----------
    latent_features_ : ndarray of shape (``n_entities_``, n_components)
        Posterior probabilities q(z_id = 1), float64.
    weights_ : ndarray of shape (n_components,)
        Feature weights w_1..w_D.
    intercept_ : float
        Intercept w_0.
    classes_ : ndarray of shape (2,)
        The two labels of y; ``classes_[1]`` means "linked".
    elbo_history_ : ndarray of shape (n_evaluations,)
        True ELBO after every evaluation (see ``evaluate_every``), in nats,
        summed over the observed pairs (not per pair), without the ridge
        penalty on w. Estimated with ``n_elbo_samples`` common random numbers
        per pair; the same objective for every inference method.
    n_iter_ : int
        Number of iterations run (over all ``fit`` calls with
        ``warm_start``).
    n_entities_ : int
        Number of entities of ``latent_features_``.
    n_features_in_ : int
        Number of columns of X seen in :term:`fit`, always 2.

    See Also
    --------
    skbinvi.NoisyORFactorizer : Binary latent causes of binary rows.

    Notes
    -----
    **Directed data.** The model is symmetric, :math:`p(x_{ij}) = p(x_{ji})`.
    Each row of X is one observation: a pair given in both orders counts
    twice, so on directed data (``(i, j)`` and ``(j, i)`` with possibly
    different links) the model fits one probability for both directions,
    the average, and predicts the same for both. Self-pairs (i, i) are
    rejected.

    **Prediction.** :meth:`predict_proba` uses the probit-Gaussian
    approximation :math:`p(x_{ij} = 1) = \mathbb{E}_q \Phi(\eta_{ij})
    \approx \Phi(m / \sqrt{1 + v})`, :math:`m = w_0 + \sum_d w_d p_d`,
    :math:`v = \sum_d w_d^2 p_d (1 - p_d)`, :math:`p_d = q_{id} q_{jd}`
    (exact when the products are Gaussian); :meth:`decision_function`
    returns :math:`m / \sqrt{1 + v}`.

    **Cost.** An iteration costs O(P D) for "cavi" and O(S P D) evaluations
    of log Phi for "mcvi" and "score" (P observed pairs, at most N(N-1)/2);
    memory is O(P + N D + S N D), never N x N x D.

    References
    ----------
    .. [1] G. Ji, E. B. Sudderth, "Effective Monte Carlo Variational
       Inference for Binary-Variable Probabilistic Programs" (supplement).
    .. [2] K. Miller, T. Griffiths, M. Jordan, "Nonparametric latent feature
       models for link prediction", NIPS 2009.
    .. [3] G. Ji, D. Sujono, E. B. Sudderth, "Marginalized Stochastic Natural
       Gradients for Black-Box Variational Inference", ICML 2021.
    .. [4] J. Albert, S. Chib, "Bayesian analysis of binary and polychotomous
       response data", JASA 88, 1993.

    Examples
    --------
    >>> from skbinvi import LatentFeatureRelational
    >>> from skbinvi.datasets import make_relational
    >>> X, y, truth = make_relational(60, 3, random_state=0)
    >>> model = LatentFeatureRelational(n_components=3, random_state=0).fit(X, y)
    >>> model.predict_proba(X[:2]).shape
    (2, 2)
    >>> model.transform(X[:2]).shape
    (2, 3)
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "inference": [StrOptions({"mcvi", "cavi", "score"})],
        "feature_prior": [Interval(Real, 0, 1, closed="neither")],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "n_mc_samples": [Interval(Integral, 1, None, closed="left")],
        "learning_offset": [Interval(Real, 1, None, closed="left")],
        "learning_decay": [Interval(Real, 0.5, 1, closed="right")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "evaluate_every": [Integral],
        "n_elbo_samples": [Interval(Integral, 1, None, closed="left")],
        "n_entities": [None, Interval(Integral, 2, None, closed="left")],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components=10,
        *,
        inference="mcvi",
        feature_prior=0.5,
        alpha=1.0,
        n_mc_samples=10,
        learning_offset=1.0,
        learning_decay=0.55,
        max_iter=300,
        tol=1e-4,
        n_iter_no_change=10,
        evaluate_every=1,
        n_elbo_samples=32,
        n_entities=None,
        warm_start=False,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.inference = inference
        self.feature_prior = feature_prior
        self.alpha = alpha
        self.n_mc_samples = n_mc_samples
        self.learning_offset = learning_offset
        self.learning_decay = learning_decay
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.evaluate_every = evaluate_every
        self.n_elbo_samples = n_elbo_samples
        self.n_entities = n_entities
        self.warm_start = warm_start
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _check_pairs(self, X, *, reset, y=None):
        """Validate X (and y); return int64 rows, cols (and the 0/1 links)."""
        if y is None:
            X = validate_data(self, X, reset=reset, dtype="numeric")
        else:
            X, y = validate_data(self, X, y, reset=reset, dtype="numeric")
            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            if y_type != "binary":
                raise ValueError(
                    "Only binary classification is supported (link or no link). The "
                    f"type of the target is {y_type}."
                )
            classes = np.unique(y)
            if classes.size != 2:
                raise ValueError(
                    "y holds one class only; link prediction needs pairs of both "
                    f"classes (links and non-links); got only {classes[0]!r}."
                )
        if X.shape[1] != 2:
            raise ValueError(
                f"{type(self).__name__} expects X of shape (n_pairs, 2): one pair of "
                f"entity ids (i, j) per row; got {X.shape[1]} columns."
            )
        if np.issubdtype(X.dtype, np.bool_):
            raise ValueError("X must contain integer entity ids; got booleans.")
        if not np.issubdtype(X.dtype, np.integer):
            fractional = X != np.round(X)
            if np.any(fractional):
                raise ValueError(
                    "X must contain integer entity ids; got non-integer values such "
                    f"as {X[fractional].flat[0]!r}."
                )
        if X.min() < 0:
            raise ValueError(
                f"Negative values in data passed to {type(self).__name__}: entity ids "
                f"must be non-negative; got {X.min()!r}."
            )
        if self.n_entities is not None and X.max() >= self.n_entities:
            raise ValueError(
                "Entity ids must be smaller than n_entities="
                f"{self.n_entities}; got {X.max()!r}."
            )
        rows = X[:, 0].astype(np.int64)
        cols = X[:, 1].astype(np.int64)
        if np.any(rows == cols):
            raise ValueError(
                "X contains self-pairs (i, i), which are not part of the model "
                f"(first at row {int(np.flatnonzero(rows == cols)[0])})."
            )
        if y is None:
            return rows, cols
        if reset or not hasattr(self, "classes_"):
            self.classes_ = classes
        elif not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"y has classes {classes!r}, but the fitted model has {self.classes_!r}."
            )
        x = (y == self.classes_[1]).astype(np.float64)
        return rows, cols, x

    # ------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the posterior over the entities' features and the link weights.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Observed pairs of entity ids (non-negative integers, any integer
            or integral float dtype); i != j. Every row is one observation.
        y : array-like of shape (n_pairs,)
            Link of each pair: two classes (typically 0 = no link, 1 = link;
            ``classes_[1]`` is "linked").

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, not of shape (n_pairs, 2), contains NaN or
            infinity, non-integer or negative ids, ids >= ``n_entities``, or
            self-pairs, or strings; if y is None, continuous, or does not
            hold exactly two classes (or, with ``warm_start``, other classes
            than before).

        Warns
        -----
        ConvergenceWarning
            If ``max_iter`` iterations ran without meeting the ``tol`` rule
            (only when the ELBO is evaluated).
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        warm = self.warm_start and hasattr(self, "latent_features_")
        rows, cols, x = self._check_pairs(X, reset=not warm, y=y)
        n_seen = int(max(rows.max(), cols.max())) + 1
        n_entities = self.n_entities if self.n_entities is not None else n_seen
        D = self.n_components
        if warm:
            if self.latent_features_.shape[1] != D:
                raise ValueError(
                    f"warm_start: n_components={D} but the fitted model has "
                    f"{self.latent_features_.shape[1]}."
                )
            rng = self.random_state_
            extra = n_entities - self.latent_features_.shape[0]
            logits = logit(self.latent_features_)
            if extra > 0:  # new entities start at the prior
                logits = np.vstack(
                    [logits, np.full((extra, D), logit(self.feature_prior))]
                )
            w = np.concatenate([[self.intercept_], self.weights_])
            history = list(self.elbo_history_)
        else:
            rng = check_random_state(self.random_state)
            logits = logit(rng.uniform(0.05, 0.95, size=(n_entities, D)))
            w = np.zeros(D + 1)
            # every feature starts assortative (w_d = 1; a random-sign start
            # measured worse on kinship data) and the intercept matches the
            # link frequency at the mean initial product q_id q_jd = 1/4
            w[1:] = 1.0
            w[0] = ndtri(np.clip(x.mean(), 1e-3, 1 - 1e-3)) - 0.25 * D
            self._elbo_uniforms = rng.random_sample((self.n_elbo_samples, D))
            self.n_iter_ = 0
            history = []
        n_entities = logits.shape[0]
        inc = (
            _kernels.incidence(rows, cols, n_entities)
            if self.inference == "cavi"
            else None
        )
        # entities in no observed pair have the prior as posterior
        degree = np.bincount(rows, minlength=n_entities) + np.bincount(
            cols, minlength=n_entities
        )
        logits[degree == 0] = logit(self.feature_prior)
        np.clip(logits, -_MAX_LOGIT, _MAX_LOGIT, out=logits)
        self.n_entities_ = n_entities
        self.random_state_ = rng

        converged = self._train(rows, cols, x, inc, logits, w, history, rng)
        if not converged and self.evaluate_every > 0:
            warnings.warn(
                f"{type(self).__name__}: maximum number of iterations "
                f"({self.max_iter}) reached and the ELBO is still improving. "
                "Consider increasing max_iter.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _train(self, rows, cols, x, inc, logits, w, history, rng):
        """Run up to max_iter iterations; return True if the tol rule was met."""
        N, D = logits.shape
        P = rows.size
        logit_rho = float(logit(self.feature_prior))
        q = expit(logits)
        m = np.empty(P)
        mean_y = np.empty(P)
        rhs = np.empty(D + 1)
        step_out = np.empty((N, D))
        best, no_change, converged = -np.inf, 0, False
        if self.inference == "cavi":
            # the pair means; cavi_sweep and weight_pass keep them up to date
            _kernels.pair_means(rows, cols, q, w[0], w[1:], m)
        tic = time.perf_counter()
        for it in range(self.max_iter):
            if self.inference == "cavi":
                # q(y) at its optimal location, one sweep over q(z), then w
                _kernels.truncated_normal_means(x, m, mean_y)
                _kernels.cavi_sweep(*inc, q, logit_rho, w[0], w[1:], mean_y, m)
                _kernels.augmented_weight_rhs(rows, cols, q, mean_y, rhs)
                _kernels.weight_pass(rows, cols, q, rhs, self.alpha, w, m)
            else:
                uniforms = rng.random_sample((self.n_mc_samples, N, D))
                r = (self.n_iter_ + self.learning_offset) ** (-self.learning_decay)
                if self.inference == "mcvi":
                    _kernels.mcvi_mean_deltas(
                        rows, cols, x, q, logit_rho, w[0], w[1:], uniforms, step_out
                    )
                    logits *= 1.0 - r
                    logits += r * step_out
                else:
                    _kernels.score_function_gradient(
                        rows, cols, x, q, logit_rho, w[0], w[1:], uniforms, step_out
                    )
                    logits += r * step_out / (q * (1.0 - q))
                np.clip(logits, -_MAX_LOGIT, _MAX_LOGIT, out=logits)
                q = expit(logits)
                # EM step of w on the true ELBO with a Monte Carlo right-hand
                # side, damped with the same Robbins-Monro step size (a full
                # step lets the noise of few samples move w far; measured)
                _kernels.mc_weight_rhs(rows, cols, x, q, w[0], w[1:], uniforms, rhs)
                _kernels.pair_means(rows, cols, q, w[0], w[1:], m)
                w_old = w.copy()
                _kernels.weight_pass(rows, cols, q, rhs, self.alpha, w, m)
                w *= r
                w += (1.0 - r) * w_old
            self.n_iter_ += 1
            last = it == self.max_iter - 1
            if self.evaluate_every > 0 and (
                (it + 1) % self.evaluate_every == 0 or last
            ):
                elbo = self._elbo(rows, cols, x, q, w[0], w[1:])
                history.append(elbo)
                if self.verbose:
                    print(
                        f"Iteration {self.n_iter_}, true ELBO = {elbo:.4f} nats "
                        f"({elbo / P:.5f} per pair), time = "
                        f"{time.perf_counter() - tic:.2f}s"
                    )
                if elbo > best + self.tol * P:
                    no_change = 0
                else:
                    no_change += 1
                best = max(best, elbo)
                if no_change >= self.n_iter_no_change:
                    converged = True
                    if self.verbose:
                        print(
                            f"ELBO did not improve by more than tol={self.tol} nats "
                            f"per pair for {self.n_iter_no_change} evaluations. "
                            "Stopping."
                        )
                    break
        self.latent_features_ = q
        self.intercept_ = float(w[0])
        self.weights_ = w[1:].copy()
        self.elbo_history_ = np.asarray(history, dtype=np.float64)
        return converged

    def _elbo(self, rows, cols, x, q, w0, w, q_kl=None):
        """True ELBO: expected log-likelihood of the pairs minus the KL of ``q_kl``.

        ``q`` gives the features of the pairs' entities, ``q_kl`` (default
        ``q``) the posterior whose KL from the prior is subtracted.
        """
        out = np.empty(rows.size)
        _kernels.expected_pair_log_likelihood(
            rows, cols, x, q, w0, w, self._elbo_uniforms, out
        )
        q_kl = q if q_kl is None else q_kl
        return float(out.sum() - _kernels.kl_features(q_kl, self.feature_prior))

    # ----------------------------------------------------------- prediction
    def _pair_features(self, X):
        """q_i, q_j (n_pairs, D) of validated pairs; unseen ids get the prior."""
        check_is_fitted(self)
        rows, cols = self._check_pairs(X, reset=False)
        q, rows, cols = self._with_prior_row(rows, cols)
        return q[rows], q[cols]

    def transform(self, X):
        """Posterior interaction features E_q[z_id z_jd] = q_id q_jd of each pair.

        The link's linear predictor is linear in them, eta_ij = w_0 +
        sum_d w_d z_id z_jd, so they feed a downstream linear model.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.

        Returns
        -------
        features : ndarray of shape (n_pairs, n_components), float64
            Values in [0, 1].

        Raises
        ------
        ValueError
            As :meth:`fit` for X.
        """
        qi, qj = self._pair_features(X)
        return qi * qj

    def decision_function(self, X):
        """Probit score m / sqrt(1 + v) of each pair (positive: link more likely).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.

        Returns
        -------
        scores : ndarray of shape (n_pairs,), float64
            ``Phi(scores)`` is the link probability of :meth:`predict_proba`.

        Raises
        ------
        ValueError
            As :meth:`fit` for X.
        """
        check_is_fitted(self)
        rows, cols = self._check_pairs(X, reset=False)
        q, rows, cols = self._with_prior_row(rows, cols)
        mean, var = np.empty(rows.size), np.empty(rows.size)
        _kernels.pair_mean_and_variance(
            rows, cols, q, self.intercept_, self.weights_, mean, var
        )
        return mean / np.sqrt(1.0 + var)

    def predict_proba(self, X):
        """Posterior predictive probability of no link and of a link for each pair.

        ``p(x_ij = 1) = E_q Phi(eta_ij) ~ Phi(m / sqrt(1 + v))`` (probit-Gaussian
        approximation, see Notes of the class).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_pairs, 2), float64
            Columns ordered as ``classes_``.

        Raises
        ------
        ValueError
            As :meth:`fit` for X.
        """
        score = self.decision_function(X)
        return np.column_stack([ndtr(-score), ndtr(score)])

    def predict(self, X):
        """Most probable label of each pair.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_pairs,)
            ``classes_[1]`` where the link probability exceeds 1/2.

        Raises
        ------
        ValueError
            As :meth:`fit` for X.
        """
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of :meth:`predict` on the pairs (X, y).

        For link prediction the area under the ROC curve of
        ``predict_proba(X)[:, 1]`` is usually more informative (pass
        ``scoring="roc_auc"`` to model selection tools).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.
        y : array-like of shape (n_pairs,)
            True links, labels of ``classes_``.
        sample_weight : array-like of shape (n_pairs,), default=None
            Weights of the pairs.

        Returns
        -------
        score : float
            Fraction of pairs predicted correctly.

        Raises
        ------
        ValueError
            As :meth:`fit` for X.
        """
        return super().score(X, y, sample_weight=sample_weight)

    def elbo(self, X, y):
        """True ELBO of the fitted posterior and weights on the pairs (X, y), nats.

        ``sum over the given pairs of E_q[log p(x_ij | z)]`` minus the KL
        divergence of q from the prior over all ``n_entities_`` entities
        (Eq. A.1 of the supplement of Ji and Sudderth), with the ``n_elbo_samples`` common random numbers of
        ``fit``: on the training pairs it equals the last value of
        ``elbo_history_``. Entities not in ``latent_features_`` get the prior.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2)
            Pairs of entity ids, as in :meth:`fit`.
        y : array-like of shape (n_pairs,)
            Their links, labels of ``classes_``.

        Returns
        -------
        elbo : float
            Nats, summed over the pairs (not per pair).

        Raises
        ------
        ValueError
            As :meth:`fit`.
        """
        check_is_fitted(self)
        rows, cols, x = self._check_pairs(X, reset=False, y=y)
        q, rows, cols = self._with_prior_row(rows, cols)
        return self._elbo(rows, cols, x, q, self.intercept_, self.weights_,
                          q_kl=self.latent_features_)

    def _with_prior_row(self, rows, cols):
        """q with one extra row, the prior, and the ids of unseen entities mapped to it.

        Returns ``(q_ext, rows, cols)``: O(N D + P) memory, no (P, D) copies.
        """
        q = self.latent_features_
        N = q.shape[0]
        q_ext = np.vstack([q, np.full((1, q.shape[1]), self.feature_prior)])
        return q_ext, np.minimum(rows, N), np.minimum(cols, N)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.classifier_tags.multi_class = False
        return tags
