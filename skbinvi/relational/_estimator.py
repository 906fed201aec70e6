"""LatentFeatureRelational: link prediction with binary latent features, probit link."""

import os
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_ndtr, logit, ndtr, ndtri
from sklearn.base import ClassifierMixin, TransformerMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import validate_data

from .._base import (
    FIT_LOOP_CONSTRAINTS,
    BaseVariational,
    StoppingRule,
    single_threaded_blas,
)
from .._numba import sparse_dot
from .._validation import IntInterval
from . import _kernels

# Logits are kept in [-_MAX_LOGIT, _MAX_LOGIT] so that log q and log(1 - q)
# stay finite (q within 1e-13 of 0 or 1 at worst); cavi_sweep uses the same.
_MAX_LOGIT = _kernels.MAX_LOGIT

# Without n_entities, latent_features_ has (largest id + 1) rows; ids this much
# sparser than the distinct ids seen are refused (memory must follow the data).
_ID_SLACK = 100_000
# ... and relation ids (each unused relation id below the largest costs a
# weight matrix and, with full weights, a (1 + D^2)^2 weight system)
_RELATION_SLACK = 100
# A feature is "in use" when it separates entities: its probability q_id
# differs by at least this much between two entities that have pairs. A
# feature left at (or near) the same value for every entity, such as the
# prior 1/2 of a fit that collapsed, carries no information about any pair.
_FEATURE_SPREAD = 0.5
# share of |best ELBO| below the best beyond which a full-sweep iteration
# restarts the patience of the tol rule (see _stopping_rule)
_PLATEAU_FRACTION = 0.1
# alpha="auto": the ridge is 1 while every weight has at least this many
# training pairs per relation (pairs per relation / weights per relation),
# and grows as 1 / (pairs per weight) below (see _auto_alpha)
_AUTO_PAIRS_PER_WEIGHT = 10.0
# ... and while every weight has at least this many training links per
# relation: a sparse relation's few links, not its many easy non-links,
# carry what the weights learn (see _auto_alpha)
_AUTO_LINKS_PER_WEIGHT = 1.0

# Advanced settings (User Guide, "Advanced settings"). Module constants, read
# at every fit, partial_fit and scoring call: tests patch them with
# monkeypatch.setattr.
#
# Step sizes of "mcvi" and "score", r_t = (t + offset) ** -decay: for full
# sweeps at iteration t with offset _LEARNING_OFFSET (1: the first step is a
# full one) and decay _SWEEP_LEARNING_DECAY; for stochastic steps (an
# entity's t-th visit for its logits, step t for the weights) with offset
# _STOCHASTIC_OFFSET and the Robbins-Monro decay _LEARNING_DECAY: a decay in
# (0.5, 1] gives sum r_t = inf and sum r_t^2 < inf. With the offset of 20
# visits, a decay of 0.55 hardly shrinks the steps over the tens of epochs a
# large network is trained for (the 12th visit's step is 0.77 times the
# first's), so the sampled non-links' noise kept moving the features: on
# 100,000 entities the ELBO and held-out AUC fell and recovered from epoch
# to epoch. At 0.8 (0.69 times the first's at the 12th visit, and falling
# faster after) the fit settles (bench_relational.py --sections sparse).
_LEARNING_OFFSET = 1.0
_LEARNING_DECAY = 0.8
# Offset of the stochastic steps (an entity's logits at its t-th visit, the
# weights at step t): the first visit moves the logits a share
# _STOCHASTIC_OFFSET ** -_LEARNING_DECAY of the way to their Monte Carlo
# target, not all of it. A full first step replaces a good start (every
# feature found) by one noisy estimate made with the start's weights, which
# the fuzzy start's q make too weak: the features then blur and recover
# over many epochs.
_STOCHASTIC_OFFSET = 20.0
# Decay of the step size of the full sweeps ("mcvi" and "score" with
# batch_size=None), r_t = (t + _LEARNING_OFFSET) ** -_SWEEP_LEARNING_DECAY.
# A sweep averages every step over all pairs and S joint samples with each
# binary variable summed out, so its noise is small and the schedule mostly
# damps the parallel (Jacobi) update of all logits at once: a slower decay
# than the Robbins-Monro range (0.5, 1] reaches the same ELBO in fewer
# iterations, and the tol rule ends the run. A constant step (0) oscillates.
_SWEEP_LEARNING_DECAY = 0.3
# Deterministic annealing of the full "mcvi" sweeps of a model of R > 1
# relations: sweep t's feature step tempers the likelihood by beta_t =
# 1/R + (1 - 1/R) t / T, T = min(_TEMPERING_ITERATIONS, max_iter // 2), and
# the stopping rule waits for beta = 1. An entity's natural-parameter
# target sums the evidence of its pairs in every relation, R times that of
# one relation: untempered, the first sweep drives almost every logit to
# +-MAX_LOGIT (kinship, 25 relations: every entity's features fixed in all
# samples by the third sweep), and coordinate ascent then only refines the
# start's features. Starting from one relation's worth of evidence keeps q
# soft while the weights of all relations take shape (User Guide,
# "Tempering"); one relation is never tempered.
_TEMPERING_ITERATIONS = 100
# Monte Carlo samples per pair of the reported true ELBO (common random
# numbers): elbo_, elbo_history_, elbo() and the stopping rule, not the updates.
_N_ELBO_SAMPLES = 32
# unlisted_pairs="nonlinks": non-links sampled per entity and role (sender,
# receiver) in a stochastic step, each weighted by (the entity's non-links) /
# _N_NONLINK_SAMPLES.
_N_NONLINK_SAMPLES = 50
# ... but with at most this many features, the features' sums over the
# non-links are exact over one joint sample of every entity's features
# (_PatternNonlinks: at most 2^D patterns); the sampled non-links then serve
# the weights' steps only. Its tables are recomputed after the weights have
# moved by this much (the sum of the steps' largest changes).
_PATTERN_MAX_FEATURES = 16
_PATTERN_REFRESH_MOVE = 0.05
# ... and while the entities hold at most this many distinct patterns (the
# tables cost O(patterns^2 R D)); with more, the steps sample non-links
_PATTERN_MAX_PATTERNS = 1024
# ... rows of q per block of the epoch's first draw of every entity's pattern
_PATTERN_DRAW_ROWS = 65_536
# ... and the most of a step's sampled non-links on which the quadratic of
# their control variate is fitted (for the next step)
_CV_FIT_PAIRS = 10_000
# ... whose weights W_r are gathered at most this many entries (32 MB) at a time
_CV_GATHER_ENTRIES = 2**22


class _Pairs:
    """Validated pairs and the index structures the kernels need (built once)."""

    def __init__(self, snd, rcv, rel, x, n_entities):
        self.snd, self.rcv, self.rel, self.x = snd, rcv, rel, x
        self.skeys = _kernels.pair_keys(snd, rel, n_entities)
        self.rkeys = _kernels.pair_keys(rcv, rel, n_entities)
        self._incidence = None
        self.n_entities = n_entities

    def keyed(self):
        """The pair and key arrays of the Monte Carlo kernels, in their order."""
        return (self.snd, self.rcv, self.rel, *self.skeys, *self.rkeys)

    def incidence(self):
        if self._incidence is None:
            self._incidence = _kernels.incidence(self.snd, self.rcv, self.n_entities)
        return self._incidence


class _PairStore:
    """Training pairs indexed by sender and by receiver, for stochastic steps.

    With ``nonlinks`` only the links are kept (the other pairs are
    non-links), with their sorted codes for membership tests. With
    ``keep_last`` a pair listed twice keeps its last label (``partial_fit``:
    a pair listed again takes its new label; "nonlinks": the links are a
    set); otherwise every row is one observation, as in the full sweeps.
    Memory O(pairs kept + N).
    """

    @classmethod
    def build(cls, triples, x, N, R, nonlinks, previous=None, keep_last=True):
        snd, rcv, rel = triples[:, 0], triples[:, 1], triples[:, 2]
        if previous is not None:
            snd = np.concatenate([previous.snd, snd])
            rcv = np.concatenate([previous.rcv, rcv])
            rel = np.concatenate([previous.rel, rel])
            x = np.concatenate([previous.x, x])
        if keep_last or nonlinks:
            code = (snd * np.int64(N) + rcv) * np.int64(R) + rel
            # the last occurrence of every code
            _, last = np.unique(code[::-1], return_index=True)
            keep = np.sort(code.size - 1 - last)
        else:
            keep = np.arange(x.size)
        if nonlinks:
            keep = keep[x[keep] > 0.5]
        self = cls()
        self.snd = np.ascontiguousarray(snd[keep])
        self.rcv = np.ascontiguousarray(rcv[keep])
        self.rel = np.ascontiguousarray(rel[keep])
        self.x = np.ascontiguousarray(x[keep], dtype=np.float64)
        self.n_entities, self.n_relations, self.nonlinks = N, R, nonlinks
        self.keys = _kernels.link_keys(self.snd, self.rcv, self.rel, N, R)
        self.out_deg = np.bincount(self.snd, minlength=N)
        self.in_deg = np.bincount(self.rcv, minlength=N)
        self.out_ptr = np.concatenate([[0], np.cumsum(self.out_deg)]).astype(np.int64)
        self.in_ptr = np.concatenate([[0], np.cumsum(self.in_deg)]).astype(np.int64)
        self.out_order = np.argsort(self.snd, kind="stable").astype(np.int64)
        self.in_order = np.argsort(self.rcv, kind="stable").astype(np.int64)
        self.source = triples
        return self

    @property
    def n_rows(self):
        return self.x.size


class LatentFeatureRelational(ClassifierMixin, TransformerMixin, BaseVariational):
    r"""Latent feature relational model: link prediction with binary features.

    Every entity i (a person, a protein, a web page) has D binary latent
    features :math:`z_{id} \sim \mathrm{Bernoulli}(\rho)`, and a directed link
    from sender i to receiver j in relation r follows a probit model of their
    features (the finite latent feature relational model of [2]_; [1]_ for
    the diagonal form):

    .. math::

        p(x_{ijr} = 1 \mid z) = \Phi(\eta_{ijr}), \qquad
        \eta_{ijr} = b_r + z_i^\top W_r z_j,

    with :math:`\Phi` the standard normal CDF, a bias :math:`b_r`
    (``intercept_``) and a weight matrix :math:`W_r` (``weights_``) per
    relation, full or diagonal (``weights``). All relations share the
    entities' features. The posterior is approximated by mean field,
    :math:`q(z) = \prod_{id} \mathrm{Bernoulli}(q_{id})`
    (``latent_features_``); the weights are point estimates with a Gaussian
    (ridge) prior of precision ``alpha_``. Every inference method maximizes,
    and reports, the true ELBO ([1]_ Eq. A.1)

    .. math::

        \mathcal{L}(q, b, W) = \sum_{(i, j, r) \in \mathcal{O}}
            \mathbb{E}_q\big[x \log \Phi(\eta_{ijr})
            + (1 - x) \log \Phi(-\eta_{ijr})\big]
            - \sum_{i, d} \mathrm{KL}\big(\mathrm{Bern}(q_{id})
            \,\|\, \mathrm{Bern}(\rho)\big)

    over the observed triples :math:`\mathcal{O}` (the rows of X), divided by
    their number (nats per pair). Pairs that X does not list do not enter it,
    unless ``unlisted_pairs="nonlinks"``. One iteration updates q, then
    (b, W):

    - ``"mcvi"``: Monte Carlo natural-gradient steps on the logits of q with
      each binary variable summed out exactly ([1]_, [3]_), step size
      :math:`r_t = (t + 1)^{-0.3}` at iteration t (:math:`(t + 20)^{-0.8}`
      for stochastic steps; User Guide); the weights take a damped EM
      (minorize-maximize) step of the true ELBO. With R > 1 relations the
      first sweeps temper the likelihood, from one relation's worth of
      evidence (a factor 1/R) to all of it after min(100, max_iter // 2)
      sweeps (deterministic annealing [6]_; User Guide, "Tempering").
    - ``"cavi"``: coordinate ascent on the data-augmented bound ([1]_ Eqs.
      A.2-A.4 with two typos corrected, [4]_; extended to full W in the
      User Guide), a looser bound than :math:`\mathcal{L}`, and its exact
      weight step. Deterministic given the start.
    - ``"score"``: Rao-Blackwellized score-function gradient with a control
      variate, the baseline of [1]_; same steps and weight update as "mcvi".

    Rows of X are the samples: (sender, receiver) or (sender, receiver,
    relation) ids, with y the link. Cross-validation and
    :class:`~sklearn.model_selection.GridSearchCV` split the pairs, so the
    held-out pairs are exactly the unobserved ones of the model.

    Read more in the :ref:`User Guide <relational>`.

    Parameters
    ----------
    n_components : int, default=10
        Number of latent features D.
    weights : {"full", "diagonal"}, default="full"
        Form of W_r. "full": a D x D matrix, directed ("senders with feature
        d link to receivers with feature e", [2]_); its weight step solves
        1 + D^2 unknowns per relation, O(R D^4) memory and O(R D^6) time per
        iteration (``fit`` refuses a D that cannot fit in memory).
        "diagonal": D weights, :math:`\eta = b_r + \sum_d w_{rd} z_{id}
        z_{jd}`, symmetric in i and j ([1]_), O(R D^2). Use "full" for
        directed or multi-relational data, "diagonal" for large D on
        undirected, community-like networks.
    inference : {"mcvi", "cavi", "score"}, default="mcvi"
        Inference method (see above). Stochastic training (an integer
        ``batch_size``, ``unlisted_pairs="nonlinks"``, :meth:`partial_fit`)
        needs "mcvi".
    init : {"auto", "spectral", "nmf", "random"}, default="auto"
        Start of q. "spectral": k-means clusters of a truncated SVD of every
        entity's out-, in- and either-way links (q = 0.9 for the entity's
        cluster, 0.1 elsewhere), then three EM weight steps. "nmf": q
        monotone in the loadings of a non-negative matrix factorization of
        the same links (overlapping features). "random": q uniform in
        [0.05, 0.95], W_r the identity and b_r matched to the link rate.
        With ``unlisted_pairs="nonlinks"``, "nmf" factorizes the links plus
        a tenth of the two-hop paths (User Guide). "auto": "spectral" for
        ``weights="full"``, "nmf" for "full" with "nonlinks", "random" for
        "diagonal".
        Entities without pairs start, and stay, at the prior.
    feature_prior : float in (0, 1), default=0.5
        Prior probability rho of each feature, :math:`p(z_{id} = 1)`.
    alpha : float >= 0 or "auto", default="auto"
        Precision of the Gaussian prior :math:`N(0, 1/\alpha)` on every
        weight (entries of W_r), a ridge penalty; the biases b_r are not
        penalized. "auto", for each relation: 1 while its number of
        training pairs is at least 10 times the number of weights per
        relation (D^2 for full W, D for diagonal) and its number of training
        links at least that number, ``max(10 * weights / pairs, weights /
        links)`` below (``alpha_``, one value per relation): few entities
        with many relations, where every weight of W_r rests on a few pairs,
        and sparse relations, where it rests on a few links, get a stronger
        ridge, each relation the one a model of it alone would get. Tune it
        with ``n_components`` by cross-validation.
    n_mc_samples : int, default=10
        "mcvi" and "score": joint samples of q per iteration (or stochastic
        step). The variance of a step falls as 1 / ``n_mc_samples``; the cost
        grows in proportion.
    n_entities : int or None, default=None
        Number of entities; ids must lie in [0, n_entities) in ``fit`` and in
        prediction. None: the largest id seen in ``fit`` plus one (ids must
        then not be much sparser than the distinct ids seen), and larger ids
        in prediction are entities never seen, which get the prior.
    unlisted_pairs : {"unobserved", "nonlinks"}, default="unobserved"
        What the pairs that X does not list are. "unobserved": missing data,
        they do not enter the model (cross-validation holds pairs out this
        way). "nonlinks": a complete network given by its links: every triple
        (i, j, r), i != j, of ``n_entities_`` entities and ``n_relations_``
        relations that X does not list as a link is a non-link. X may then
        list the links only (y all 1), training is stochastic and memory is
        O(links + N D), never O(N^2). Pass ``n_entities``.
    batch_size : int, "auto" or None, default="auto"
        Entities per stochastic step ("mcvi" only). Each iteration (epoch)
        visits every entity once in random minibatches; a visited entity's
        logits step towards a Monte Carlo estimate of their coordinate
        optimum from its listed pairs (plus sampled, inverse-probability
        weighted non-links with "nonlinks", [5]_), and the weights take a
        damped Newton step on unbiased estimates from the minibatch. None:
        full sweeps over the listed pairs. "auto": None for "unobserved",
        ``min(1000, n_entities_)`` for "nonlinks".
    max_iter : int, default=300
        Maximum number of iterations (a sweep, or an epoch of stochastic
        steps).
    tol : float >= 0 or None, default=2e-3
        Stop when the true ELBO has not improved on its best by more than
        ``tol`` nats per training link for ``n_iter_no_change`` consecutive
        iterations: ``tol`` times (links / pairs) per pair, the unit of
        ``elbo_`` (per link with "nonlinks"). Counted per link, the rule
        does not stop early on a network whose rare links leave its ELBO
        per pair nearly flat while the links' part still rises. With full
        sweeps an iteration more than 10% (of its magnitude) below the best
        restarts the count: such a run is moving, not converged. With
        "nonlinks" (an ELBO estimated on a sample of the pairs) a gain
        within twice the estimate's standard error does not count either.
        None: no convergence test, every run takes ``max_iter`` iterations.
    n_iter_no_change : int, default=10
        Patience of the ``tol`` rule.
    n_init : int, default=1
        Number of runs from different starts; the run with the highest final
        ELBO is kept.
    warm_start : bool, default=False
        If True and fitted, ``fit`` continues from the fitted q and weights
        and the step-size schedule, and extends ``elbo_history_``. New
        entities and relations start at the prior. ``inference`` may change
        between warm fits; ``n_components`` and ``weights`` may not.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the pairs, monitor their ELBO and
        keep the best iteration. Not with ``unlisted_pairs="nonlinks"``.
    validation_fraction : float in (0, 1), default=0.1
        Share of the pairs held out by ``early_stopping``.
    random_state : int, RandomState instance or None, default=None
        Controls the start, the Monte Carlo samples and the common random
        numbers of the ELBO. Pass an int for reproducible results.
    verbose : int, default=0
        If positive, print the ELBO of every iteration (nats per pair) with
        the elapsed seconds, and the number of features in use at the end.

    Attributes
    ----------
    latent_features_ : ndarray of shape (``n_entities_``, n_components)
        Posterior probabilities q(z_id = 1), float64.
    n_active_components_ : int
        Number of features in use: whose probability differs by at least
        1/2 between two entities that have pairs. Fewer than
        ``n_components`` is normal (the prior and the data switch features
        off); 0 means the fit collapsed to the trivial fixed point where
        every entity has the same features and the predictions are those of
        the biases alone: right when the pairs carry no structure, a
        failure of the optimizer otherwise (refit with ``n_init > 1`` or
        another ``init``). Updated by :meth:`partial_fit` too.
    weights_ : ndarray of shape (``n_relations_``, D, D) or (``n_relations_``, D)
        W_r for ``weights="full"``; the diagonals w_r for "diagonal".
    intercept_ : ndarray of shape (``n_relations_``,)
        Biases b_r.
    alpha_ : ndarray of shape (``n_relations_``,)
        Ridge precision of each relation's weights: ``alpha``, or the values
        "auto" chose from each relation's pairs of the last :meth:`fit` (the
        pairs seen so far for :meth:`partial_fit`).
    classes_ : ndarray of shape (2,)
        The two labels of y; ``classes_[1]`` means "linked".
    elbo_ : float
        True ELBO of the training pairs at the end, nats per pair (Monte
        Carlo with common random numbers fixed per model, so a deterministic
        function of q and the weights; without the ridge penalty). With
        ``unlisted_pairs="nonlinks"`` the ELBO of the complete network,
        estimated on a fixed sample of links and non-links, per listed link.
    elbo_history_ : ndarray of shape (``n_iter_``,)
        True ELBO after every iteration, nats per pair.
    n_iter_ : int
        Number of iterations of the kept run.
    converged_ : bool
        Whether the ``tol`` rule was met before ``max_iter``.
    validation_scores_ : ndarray of shape (``n_iter_``,) or None
        Held-out ELBO per iteration with ``early_stopping``; NaN for
        iterations without one.
    best_validation_score_ : float or None
        Best of ``validation_scores_``.
    n_entities_ : int
        Number of rows of ``latent_features_``.
    n_relations_ : int
        Number of relations (largest relation id plus one; 1 for X with two
        columns).
    n_features_in_ : int
        Number of columns of X seen in :term:`fit` (2 or 3).

    See Also
    --------
    skbinvi.NoisyORFactorizer : Binary latent causes of binary rows.

    Notes
    -----
    :meth:`predict_proba` uses the probit-Gaussian approximation
    :math:`\mathbb{E}_q \Phi(\eta) \approx \Phi(m / \sqrt{1 + v})` with the
    exact mean m and variance v of :math:`\eta` under q.

    An "mcvi" or "score" iteration costs O(S (P D + K D^2)) for P pairs, K
    distinct (entity, relation) pairs and S = ``n_mc_samples``, plus the
    weight step, O(P D^2 + K D^4) for full W; a "cavi" sweep O(P D)
    (diagonal) or O(P D^2) (full). Memory is O(P + S N D + R D^4), never
    N x N. Fixed settings (the step-size schedule, the samples of the
    reported ELBO, the sampled non-links) are listed in the User Guide,
    "Advanced settings".

    References
    ----------
    .. [1] G. Ji, E. B. Sudderth, "Effective Monte Carlo Variational
       Inference for Binary-Variable Probabilistic Programs", supplement,
       section A (Eqs. A.1-A.4).
    .. [2] K. T. Miller, T. L. Griffiths, M. I. Jordan, "Nonparametric latent
       feature models for link prediction", NeurIPS 2009.
    .. [3] G. Ji, D. Sujono, E. B. Sudderth, "Marginalized Stochastic Natural
       Gradients for Black-Box Variational Inference", ICML 2021.
    .. [4] J. Albert, S. Chib, "Bayesian analysis of binary and polychotomous
       response data", JASA 88, 1993.
    .. [5] P. Gopalan, D. Mimno, S. Gerrish, M. Freedman, D. Blei, "Scalable
       inference of overlapping communities", NIPS 2012.
    .. [6] K. Katahira, K. Watanabe, M. Okada, "Deterministic annealing
       variant of variational Bayes method", Journal of Physics: Conference
       Series 95:012015, 2008.

    Examples
    --------
    >>> from skbinvi import LatentFeatureRelational
    >>> from skbinvi.datasets import make_relational
    >>> X, y, truth = make_relational(60, 3, random_state=0)
    >>> model = LatentFeatureRelational(n_components=3, random_state=0).fit(X, y)
    >>> model.converged_
    True
    >>> model.predict_proba(X[:2]).shape
    (2, 2)
    >>> model.weights_.shape
    (1, 3, 3)
    """

    _structural_params = ("n_components", "weights")
    _row_unit = "pair"  # one row of X is a pair of entities

    def _value_units(self, value, rule):
        text = super()._value_units(value, rule)
        if self.unlisted_pairs == "nonlinks" and hasattr(self, "_monitor_se"):
            # per listed pair (a link), estimated on the monitoring sample
            text += f" (standard error {self._monitor_se:.4f})"
        return text

    _parameter_constraints: dict = {
        **FIT_LOOP_CONSTRAINTS,
        "n_components": [IntInterval(1, None, closed="left")],
        "weights": [StrOptions({"full", "diagonal"})],
        "inference": [StrOptions({"mcvi", "cavi", "score"})],
        "init": [StrOptions({"auto", "spectral", "nmf", "random"})],
        "feature_prior": [Interval(Real, 0, 1, closed="neither")],
        "alpha": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
        "n_mc_samples": [IntInterval(1, None, closed="left")],
        "n_entities": [None, IntInterval(2, None, closed="left")],
        "unlisted_pairs": [StrOptions({"unobserved", "nonlinks"})],
        "batch_size": [
            None,
            StrOptions({"auto"}),
            IntInterval(1, None, closed="left"),
        ],
    }

    def __init__(
        self,
        n_components=10,
        *,
        weights="full",
        inference="mcvi",
        init="auto",
        feature_prior=0.5,
        alpha="auto",
        n_mc_samples=10,
        n_entities=None,
        unlisted_pairs="unobserved",
        batch_size="auto",
        max_iter=300,
        tol=2e-3,
        n_iter_no_change=10,
        n_init=1,
        warm_start=False,
        early_stopping=False,
        validation_fraction=0.1,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.weights = weights
        self.inference = inference
        self.init = init
        self.feature_prior = feature_prior
        self.alpha = alpha
        self.n_mc_samples = n_mc_samples
        self.n_entities = n_entities
        self.unlisted_pairs = unlisted_pairs
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.n_init = n_init
        self.warm_start = warm_start
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _check_pairs(self, X, *, reset, y=None, classes=None, grow=False):
        """Validate X (and y); return (P, 3) int64 triples (and the 0/1 links).

        ``classes`` (partial_fit): the two labels, when y may show only one.
        ``grow`` (a warm-started fit, partial_fit): new relation ids may
        occur; otherwise (prediction, elbo) every relation id must have been
        trained on.
        """
        if y is None:
            X = validate_data(self, X, reset=reset, dtype="numeric")
        else:
            X, y = validate_data(self, X, y, reset=reset, dtype="numeric")
            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            given = classes
            classes = np.unique(y)
            links_only = (
                self.unlisted_pairs == "nonlinks"
                and classes.size == 1
                and y_type in ("binary", "multiclass")
                and classes[0] in (1, True)
            )
            if given is not None:
                if not np.isin(classes, given).all():
                    raise ValueError(
                        f"y has labels {classes.tolist()!r} outside the classes "
                        f"{np.asarray(given).tolist()!r}."
                    )
                classes = given
            elif links_only:
                # only links listed: the unlisted pairs are the non-links
                classes = np.array([0, 1], dtype=y.dtype)
            elif y_type != "binary":
                raise ValueError(
                    "Only binary classification is supported (link or no link). The "
                    f"type of the target is {y_type}."
                )
            if classes.size != 2:
                raise ValueError(
                    "y holds one class only; link prediction needs pairs of both "
                    "classes (links and non-links); got only "
                    f"{classes[:1].tolist()[0]!r}."
                )
        name = type(self).__name__
        if X.shape[1] not in (2, 3):
            raise ValueError(
                f"{name} expects X of shape (n_pairs, 2), one pair of entity ids "
                "(i, j) per row, or (n_pairs, 3), (sender, receiver, relation); "
                f"got {X.shape[1]} columns."
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
                f"Negative values in data passed to {name}: entity and relation ids "
                f"must be non-negative; got {X.min()!r}."
            )
        # (compared as Python numbers: 2**62 overflows a float16 X's dtype)
        if int(X.max()) >= 2**62:
            raise ValueError(
                f"Ids must be smaller than 2**62; got {X.max()!r}. Remap them to "
                "0, 1, 2, ... first, e.g. with ids, inverse = np.unique(X[:, :2], "
                "return_inverse=True)."
            )
        snd = X[:, 0].astype(np.int64)
        rcv = X[:, 1].astype(np.int64)
        rel = X[:, 2].astype(np.int64) if X.shape[1] == 3 else np.zeros_like(snd)
        if self.n_entities is not None and max(snd.max(), rcv.max()) >= self.n_entities:
            raise ValueError(
                "Entity ids must be smaller than n_entities="
                f"{self.n_entities}; got {max(snd.max(), rcv.max())!r}."
            )
        if np.any(snd == rcv):
            raise ValueError(
                f"{name} got self-pairs (i, i), which are not part of the model "
                f"(first at row {int(np.flatnonzero(snd == rcv)[0])})."
            )
        if not reset and not grow:
            trained = self._trained_relations()
            known = rel < trained.size
            known[known] = trained[rel[known]]
            if not known.all():
                ids = np.flatnonzero(trained)
                raise ValueError(
                    f"Relation id {int(rel[~known][0])} was not seen in fit: it has "
                    f"no trained weights. The relations seen are {ids[:20].tolist()}"
                    f"{' ...' if ids.size > 20 else ''}."
                )
        triples = np.column_stack([snd, rcv, rel])
        if y is None:
            return triples
        if reset or not hasattr(self, "classes_"):
            self.classes_ = classes
        elif not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"y has classes {classes!r}, but the fitted model has "
                f"{self.classes_!r}."
            )
        return triples, (y == self.classes_[1]).astype(np.float64)

    def _trained_relations(self):
        """Boolean mask of the relation ids trained on (all, for older models)."""
        seen = getattr(self, "_seen_relations", None)
        return np.ones(self.n_relations_, bool) if seen is None else seen

    def _record_relations(self, rel, R, reset):
        """Remember which relation ids were trained on: those of the training
        rows, or with ``unlisted_pairs="nonlinks"`` all ``R`` of them (the
        network is complete, so a relation without a listed link is trained
        on its non-links)."""
        if self.unlisted_pairs == "nonlinks":
            self._seen_relations = np.ones(R, dtype=bool)
            return
        seen = np.bincount(rel, minlength=R) > 0
        if not reset:
            seen[: self._trained_relations().size] |= self._trained_relations()
        self._seen_relations = seen

    @staticmethod
    def _check_id_density(ids, what, column, slack):
        """Refuse ids so sparse that O(largest id) memory would not follow the data."""
        top = int(ids.max()) + 1
        distinct = np.unique(ids).size
        if top > 4 * distinct + slack:
            assign = ("inverse.reshape(len(X), -1)" if column == ":2"
                      else "inverse.ravel()")
            raise ValueError(
                f"{what} ids go up to {top - 1} but only {distinct} distinct ids "
                f"occur: the model would allocate {top} of them. Remap them to "
                f"consecutive ids from 0 first, e.g. ids, inverse = "
                f"np.unique(X[:, {column}], return_inverse=True) and "
                f"X[:, {column}] = {assign}, keeping ids to translate back."
            )
        return top

    # ------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the posterior over the entities' features and the link weights.

        The package's shared fit loop runs the iterations: ``max_iter``,
        ``tol`` with ``n_iter_no_change``, ``n_init``, ``warm_start`` and
        ``early_stopping`` mean the same for every estimator (User Guide).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Observed pairs of entity ids (sender i, receiver j), i != j, or
            triples (sender, receiver, relation); non-negative integers of
            any integer or integral float dtype. Every row is one observation.
        y : array-like of shape (n_pairs,)
            Link of each row: two classes (``classes_[1]`` is "linked").

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, not of shape (n_pairs, 2) or (n_pairs, 3), contains
            NaN or infinity, non-integer or negative ids, ids >= ``n_entities``,
            ids so sparse that memory would follow the largest id rather than
            the data (the message says how to remap them), or self-pairs; if y
            is None, continuous or does not hold exactly two classes; if
            ``weights="full"`` needs weight systems larger than the
            machine's physical memory; if training diverges.

        Warns
        -----
        ConvergenceWarning
            If ``max_iter`` iterations ran without meeting the ``tol`` rule.
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None."
            )
        self._check_modes()
        self._partial = False
        warm = self.warm_start and self._is_initialized()
        triples, x = self._check_pairs(X, reset=not warm, y=y, grow=warm)
        n_entities, n_relations = self._sizes(triples)
        if warm:
            self._check_warm_structure()
            n_entities = max(n_entities, self.n_entities_)
            n_relations = max(n_relations, self.n_relations_)
            self._grow(n_entities, n_relations, x)
            if self._stochastic and getattr(self, "_visits", None) is None:
                # from full sweeps to stochastic steps: every entity was
                # visited once per iteration, so the step sizes go on
                self._visits = np.full(n_entities, self.elbo_history_.size,
                                       dtype=np.int64)
        else:
            self._new_elbo_seed()
        self._record_relations(triples[:, 2], n_relations, reset=not warm)
        self.n_entities_ = n_entities
        self.n_relations_ = n_relations
        n_links = float(x.sum())
        self.alpha_ = self._auto_alpha(triples[:, 2], x)
        self._links_per_pair = max(n_links, 1.0) / x.size
        self._cache = {}
        self._store = None
        return self._fit_loop(triples, x)

    def _auto_alpha(self, rel, x):
        """The ridge precision of each relation's weights, shape
        (``n_relations_``,), from the training pairs' relations ``rel`` and
        labels ``x``.

        ``alpha`` if it is a number. "auto": ``max(1, c F / n_r, c_l F /
        l_r)`` for relation r, with F the weights per relation (D^2, or D
        for diagonal W), n_r and l_r the relation's training pairs and links
        (n_r = ``n_entities_ (n_entities_ - 1)`` with "nonlinks", every pair
        being observed), c = ``_AUTO_PAIRS_PER_WEIGHT`` and c_l =
        ``_AUTO_LINKS_PER_WEIGHT``. So 1 (the fit is that of ``alpha=1``)
        while every weight of W_r has c pairs and c_l links or more; below
        that the weights would fit the noise of a handful of pairs each (a
        global model of 14 entities and 55 relations has 146 pairs per
        relation in training for 100 weights each), or the few links of a
        sparse relation (a relation of 3 links among 14,000 pairs: the far
        non-links say little about W, the links everything), and the ridge
        grows in proportion. Each relation's is that of a model of the
        relation alone: the sparse relations of a global model get a strong
        ridge without weakening that of its dense ones.
        """
        R = self.n_relations_
        if self.alpha != "auto":
            return np.full(R, float(self.alpha))
        D = int(self.n_components)
        F = D if self._diag else D * D
        links = np.bincount(rel, weights=x, minlength=R)[:R]
        if self.unlisted_pairs == "nonlinks":
            pairs = np.full(R, self.n_entities_ * (self.n_entities_ - 1.0))
        else:
            pairs = np.bincount(rel, minlength=R)[:R].astype(np.float64)
        return np.maximum(1.0, np.maximum(
            _AUTO_PAIRS_PER_WEIGHT * F / np.maximum(pairs, 1.0),
            _AUTO_LINKS_PER_WEIGHT * F / np.maximum(links, 1.0)))

    def _sizes(self, triples):
        """(number of entities, number of relations) of validated triples."""
        if self.n_entities is not None:
            n_entities = self.n_entities
        else:
            n_entities = self._check_id_density(triples[:, :2], "Entity", ":2",
                                                _ID_SLACK)
        # a relation costs a (1 + D^2)^2 weight system, an entity a row of D
        n_relations = self._check_id_density(triples[:, 2], "Relation", "2",
                                             _RELATION_SLACK)
        self._check_weight_memory(n_relations)
        return n_entities, n_relations

    def _check_weight_memory(self, n_relations):
        """Refuse full weights whose systems cannot fit in the machine's memory.

        ``weights="full"`` holds a (1 + D^2) x (1 + D^2) system of float64 per
        relation; beyond the physical memory (where the platform reports it)
        the fit could only fail inside a kernel or be killed.
        """
        if self.weights != "full":
            return
        D = int(self.n_components)
        need = n_relations * (1.0 + D * D) ** 2 * 8.0
        try:
            have = float(os.sysconf("SC_PHYS_PAGES")) * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return
        if need > have:
            raise ValueError(
                f"weights='full' with n_components={D} needs weight systems of "
                f"(1 + D^2)^2 float64 per relation, {need / 2**30:,.1f} GiB for "
                f"{n_relations} relation(s), more than this machine's "
                f"{have / 2**30:,.1f} GiB of memory: use weights='diagonal' "
                "(O(R D^2) memory) or a smaller n_components."
            )

    def _new_elbo_seed(self):
        """The seed of the ELBO's common random numbers, drawn once per model.

        From ``random_state`` as scikit-learn reads it: an int gives the same
        seed at every fit, a ``RandomState`` instance its next draw (two
        equally seeded instances give the same fit), None fresh entropy.
        """
        seed_rng = check_random_state(self.random_state)
        self._elbo_seed = int(seed_rng.randint(2**31 - 1))

    def _check_modes(self):
        """Refuse combinations of parameters that have no algorithm."""
        stochastic = self.unlisted_pairs == "nonlinks" or isinstance(
            self.batch_size, Integral
        )
        if stochastic and self.inference != "mcvi":
            raise ValueError(
                "Stochastic training (unlisted_pairs='nonlinks' or an integer "
                f"batch_size) needs inference='mcvi'; got {self.inference!r}."
            )
        if self.unlisted_pairs == "nonlinks" and self.early_stopping:
            raise ValueError(
                "early_stopping=True holds listed pairs out, which "
                "unlisted_pairs='nonlinks' would count as non-links; hold out "
                "links yourself and use elbo(X, y) or predict_proba on them."
            )

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, classes=None):
        """Train on a chunk of pairs: one stochastic step per entity in it.

        The chunk's pairs join the pairs seen so far (a pair listed again
        takes its new label); every entity of the chunk then takes a
        stochastic step ("mcvi", as with an integer ``batch_size``, in
        minibatches of ``batch_size`` entities, or all at once when
        ``batch_size`` is None) from all its pairs seen so far, plus sampled
        non-links when ``unlisted_pairs="nonlinks"``, and the weights a
        step on the running averages of their statistics. So chunks of
        pairs streamed from disk, or the blocks of
        ``dask_ml.wrappers.Incremental``, train the model; repeated passes
        over the chunks refine it. Chunks should be random samples of the
        pairs (shuffle them): the weight step takes each chunk's entities as
        a random sample of all entities. Entity and relation ids may grow
        from chunk to chunk unless ``n_entities`` is set (new entities start
        at the prior); memory is O(pairs seen + N D), O(links + N D) with
        "nonlinks" (only links are kept).

        ``max_iter``, ``tol``, ``n_init`` and ``early_stopping`` do not
        apply; ``elbo_history_`` grows by one value per call (the ELBO of the
        pairs seen so far, nats per pair, estimated as for ``elbo_`` with
        "nonlinks").

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            A chunk of pairs or triples, as in :meth:`fit`.
        y : array-like of shape (n_pairs,)
            Their links; with "nonlinks" it may hold links only (all 1).
        classes : array-like of shape (2,) or None, default=None
            The two labels of y (as for scikit-learn's incremental
            classifiers); needed on the first call when its chunk holds one
            class only and the pairs are not "nonlinks". Later calls may
            omit it, and their chunks may hold one class only.

        Returns
        -------
        self : object
            The estimator.

        Raises
        ------
        ValueError
            As :meth:`fit`; if ``inference`` is not "mcvi"; if y's labels are
            outside the classes of earlier chunks; if the estimator was
            trained by :meth:`fit` (clone it to train by chunks).
        """
        self._check_modes()
        if self.inference != "mcvi":
            raise ValueError(
                f"partial_fit needs inference='mcvi'; got {self.inference!r}."
            )
        if y is None:
            raise ValueError("partial_fit(X, y) needs the links y of the pairs X.")
        first = not self._is_initialized()
        if classes is not None:
            classes = np.unique(np.asarray(classes))
            if classes.size != 2:
                raise ValueError(
                    f"classes must hold the two labels of y; got {classes!r}."
                )
            if not first and not np.array_equal(classes, self.classes_):
                raise ValueError(
                    f"classes={classes!r} differs from the classes of the first "
                    f"call, {self.classes_!r}."
                )
        if classes is None and not first:
            classes = self.classes_  # a later chunk may hold one class only
        triples, x = self._check_pairs(X, reset=first, y=y, classes=classes,
                                       grow=not first)
        N, R = self._sizes(triples)
        if first:
            self._new_elbo_seed()
            self._store = None
        else:
            if not getattr(self, "_partial", False) or self._store is None:
                raise ValueError(
                    "partial_fit cannot continue a model trained by fit; clone it "
                    "or start a new estimator."
                )
            N, R = max(N, self.n_entities_), max(R, self.n_relations_)
            self._grow(N, R, x)
        self._record_relations(triples[:, 2], R, reset=first)
        self.n_entities_, self.n_relations_ = N, R
        self._partial = True
        self._cache = {}
        store = _PairStore.build(
            triples, x, N, R, self.unlisted_pairs == "nonlinks", previous=self._store
        )
        store.source = triples
        self._store = store
        n_links = float(store.x.sum())
        self.alpha_ = self._auto_alpha(store.rel, store.x)
        self._links_per_pair = max(n_links, 1.0) / max(store.n_rows, 1)
        self._partial_fit_iteration(triples, x)
        # the iteration's value is the ELBO of the pairs seen so far, at the
        # state it leaves
        self.elbo_ = float(self.elbo_history_[-1])
        return self

    def _grow(self, N, R, x):
        """New entities (at the prior) and relations (no weight) of a warm start."""
        D = self.n_components
        extra = N - self._logits.shape[0]
        if extra > 0:
            self._logits = np.vstack(
                [self._logits, np.full((extra, D), logit(self.feature_prior))]
            )
            if getattr(self, "_visits", None) is not None:
                self._visits = np.concatenate(
                    [self._visits, np.zeros(extra, dtype=np.int64)]
                )
        extra = R - self._b.size
        if extra > 0:
            rate = np.clip(x.mean(), 1e-3, 1 - 1e-3)
            self._b = np.concatenate([self._b, np.full(extra, ndtri(rate))])
            self._W = np.concatenate([self._W, np.zeros((extra, D, D))])

    # ------------------------------------------------- hooks of the fit loop
    def _pairs(self, triples, x):
        """The cached :class:`_Pairs` of a validated array (built once per array)."""
        entry = self._cache.get(id(triples)) if hasattr(self, "_cache") else None
        if entry is not None and entry[0] is triples:
            return entry[1]
        pairs = _Pairs(
            np.ascontiguousarray(triples[:, 0]),
            np.ascontiguousarray(triples[:, 1]),
            np.ascontiguousarray(triples[:, 2]),
            np.ascontiguousarray(x, dtype=np.float64),
            self.n_entities_,
        )
        if not hasattr(self, "_cache") or len(self._cache) > 4:
            self._cache = {}
        self._cache[id(triples)] = (triples, pairs)
        return pairs

    def _ridge(self):
        """The ridge precision of each relation's weights in force, shape
        (R,): ``alpha_`` (a state without it, such as a model pickled before
        "auto" existed, has a numeric ``alpha``; 1 otherwise; a scalar
        ``alpha_`` of an older model applies to every relation)."""
        alpha = getattr(self, "alpha_", None)
        if alpha is None:
            alpha = 1.0 if self.alpha == "auto" else self.alpha
        return np.broadcast_to(np.asarray(alpha, dtype=np.float64),
                               (self._W.shape[0],))

    @property
    def _diag(self):
        return self.weights == "diagonal"

    @property
    def _stochastic(self):
        return (
            self.unlisted_pairs == "nonlinks"
            or isinstance(self.batch_size, Integral)
            or getattr(self, "_partial", False)
        )

    def _tempering(self, step):
        """beta of sweep ``step`` (0-based) of "mcvi": the factor of the
        likelihood's part of the feature step's target (1: untempered)."""
        R = getattr(self, "_tempered_relations", 1)
        ramp = min(_TEMPERING_ITERATIONS, self.max_iter // 2)
        if R <= 1 or ramp <= 0 or self.inference != "mcvi" or self._stochastic:
            return 1.0
        start = 1.0 / R
        return min(1.0, start + (1.0 - start) * step / ramp)

    def _may_stop(self):
        # not before a sweep has used the untempered likelihood
        return self._tempering(self._step - 1) >= 1.0

    def _batch(self):
        """Entities per stochastic step (None: all the step's entities at once)."""
        if self.batch_size == "auto":
            return min(1000, self.n_entities_)
        return self.batch_size

    def _get_store(self, X, y):
        """The :class:`_PairStore` of the training rows X (built once per array)."""
        store = getattr(self, "_store", None)
        if self._partial or (store is not None and store.source is X):
            return store
        self._store = _PairStore.build(
            X, y, self.n_entities_, self.n_relations_,
            self.unlisted_pairs == "nonlinks",
            keep_last=False,
        )
        return self._store

    def _initialize(self, X, y, rng):
        N, R, D = self.n_entities_, self.n_relations_, self.n_components
        if self._stochastic:
            pairs = self._get_store(X, y)
            self._visits = np.zeros(N, dtype=np.int64)
            self._cv_coef = None  # no control variate before a first step
        else:
            pairs = self._pairs(X, y)
        listed = np.bincount(pairs.rel, minlength=R)
        # relations with training pairs, the R of the tempering
        self._tempered_relations = int(np.count_nonzero(listed))
        if self.unlisted_pairs == "nonlinks":
            total = N * (N - 1.0)
            rate = listed / total
        else:
            rate = np.bincount(pairs.rel, weights=pairs.x, minlength=R) / np.maximum(
                listed, 1
            )
        floor = 1e-6 if self.unlisted_pairs == "nonlinks" else 1e-3
        rate = np.clip(
            np.where(
                listed > 0,
                rate,
                rate.mean() if self.unlisted_pairs == "nonlinks" else pairs.x.mean(),
            ),
            floor,
            1 - 1e-3,
        )
        degree = np.bincount(pairs.snd, minlength=N) + np.bincount(
            pairs.rcv, minlength=N
        )
        self._step = 0
        init = self.init
        if init == "auto":
            init = "random" if self._diag else "spectral"
            if self.unlisted_pairs == "nonlinks" and not self._diag:
                init = "nmf"
        if init in ("spectral", "nmf"):
            start = _spectral_start if init == "spectral" else _nmf_start
            if init == "nmf" and self.unlisted_pairs == "nonlinks":
                start = _two_hop_nmf_start
            q = start(pairs, N, R, D, rng)
            self._b = ndtri(rate)
            self._W = np.zeros((R, D, D))
        else:
            q = rng.uniform(0.05, 0.95, size=(N, D))
            # every feature starts assortative (W_r = I) and the bias matches
            # the link rate at the mean initial product q_id q_jd = 1/4
            self._b = ndtri(rate) - 0.25 * D
            self._W = np.tile(np.eye(D), (R, 1, 1))
        logits = logit(q)
        logits[degree == 0] = logit(self.feature_prior)  # no pair: the prior
        np.clip(logits, -_MAX_LOGIT, _MAX_LOGIT, out=logits)
        self._logits = logits
        if init in ("spectral", "nmf"):
            q = expit(logits)
            with single_threaded_blas():
                if self._stochastic:
                    self._start_weights(pairs, rng)
                for _ in range(0 if self._stochastic else 3):  # EM weight steps
                    uniforms = rng.random_sample((self.n_mc_samples, N, D))
                    self._weight_step(pairs, q, uniforms, 1.0)
        self._set_public()

    def _weight_step(self, pairs, q, uniforms, r):
        """EM weight step with a Monte Carlo right-hand side, damped by r."""
        R, D = self._W.shape[0], self.n_components
        rhs0, rhsW = np.empty(R), np.empty((R, D, D))
        _kernels.mc_weight_rhs(
            *pairs.keyed(),
            pairs.x,
            q,
            self._b,
            self._W,
            self._diag,
            uniforms,
            _kernels.NO_WEIGHT,
            False,
            rhs0,
            rhsW,
        )
        self._solve(pairs, q, rhs0, rhsW, r)

    def _solve(self, pairs, q, rhs0, rhsW, r):
        A = _kernels.weight_system(
            pairs.snd,
            pairs.rcv,
            pairs.rel,
            q,
            self._W.shape[0],
            self._diag,
            pairs.skeys,
        )
        b, W = self._b.copy(), self._W.copy()
        _kernels.solve_weights(A, rhs0, rhsW, self._ridge(), self._diag, b, W)
        self._b = (1.0 - r) * self._b + r * b
        self._W = (1.0 - r) * self._W + r * W

    def _iterate(self, X, y, rng, partial=False):
        # the weight systems are small (D^2 + 1 unknowns): threaded BLAS only
        # adds overhead on busy cores (a 101 x 101 solve took 0.3 s, measured)
        with single_threaded_blas():
            return self._iterate_once(X, y, rng, partial)

    def _iterate_once(self, X, y, rng, partial):
        # the pairs to which _elbo_pairs charges the KL term of the features
        self._n_train_rows = X.shape[0]
        if self._stochastic:
            store = self._get_store(X, y)
            # the pairs seen so far (partial_fit), not this chunk's
            self._n_train_rows = max(store.n_rows, 1)
            if partial:
                centers = np.unique(X[:, :2])
                rng.shuffle(centers)
            else:
                centers = self._pool(store, rng)
            # q of every entity and its moments, recomputed once per call and
            # then kept up to date step by step (_QMoments)
            self._q_moments = _QMoments(self._logits) if store.nonlinks else None
            # the non-links' exact sums over a sample of every entity's features
            # (few features: few patterns), else sampled non-links
            self._patterns = (
                _PatternNonlinks(self._q_moments.q, self._b, self._W, rng)
                if store.nonlinks and self.n_components <= _PATTERN_MAX_FEATURES
                else None
            )
            # the steps' large scratch arrays, reused from step to step
            self._scratch = _Scratch()
            B = self._batch() or centers.size
            try:
                for start in range(0, centers.size, B):
                    self._stochastic_step(
                        store, np.sort(centers[start : start + B]), rng
                    )
            finally:
                # (N, D) and scratch: not kept with the model
                self._q_moments = self._scratch = self._patterns = None
            self._set_public()
            return self._stochastic_elbo(store)
        pairs = self._pairs(X, y)
        N, D = self._logits.shape
        logit_rho = float(logit(self.feature_prior))
        q = expit(self._logits)
        if self.inference == "cavi":
            P = pairs.x.size
            m, mean_y = np.empty(P), np.empty(P)
            _kernels.pair_means(
                pairs.snd, pairs.rcv, pairs.rel, q, self._b, self._W, self._diag, m
            )
            _kernels.truncated_normal_means(pairs.x, m, mean_y)
            if self._diag:
                _kernels.cavi_sweep(
                    *pairs.incidence(), pairs.rel, q, logit_rho, self._b, self._W,
                    mean_y, m,
                )
            else:
                _kernels.cavi_sweep_full(
                    *pairs.incidence(), pairs.snd, pairs.rel, q, logit_rho, self._b,
                    self._W, mean_y, m,
                )
            R = self._W.shape[0]
            rhs0, rhsW = np.empty(R), np.empty((R, D, D))
            _kernels.augmented_weight_rhs(
                pairs.snd, pairs.rcv, pairs.rel, q, mean_y, rhs0, rhsW
            )
            self._solve(pairs, q, rhs0, rhsW, 1.0)
            self._logits = np.clip(logit(q), -_MAX_LOGIT, _MAX_LOGIT)
        else:
            uniforms = rng.random_sample((self.n_mc_samples, N, D))
            r = _step_size(self._step, _SWEEP_LEARNING_DECAY)
            out = np.empty((N, D))
            if self.inference == "mcvi":
                _kernels.mcvi_mean_deltas(
                    *pairs.keyed(),
                    pairs.x,
                    q,
                    logit_rho,
                    self._b,
                    self._W,
                    self._diag,
                    uniforms,
                    _kernels.NO_WEIGHT,
                    _kernels.NO_WEIGHT,
                    out,
                )
                beta = self._tempering(self._step)
                if beta < 1.0:  # the target's likelihood part, tempered
                    out -= logit_rho
                    out *= beta
                    out += logit_rho
                self._logits *= 1.0 - r
                self._logits += r * out
            else:
                _kernels.score_function_gradient(
                    pairs.snd,
                    pairs.rcv,
                    pairs.rel,
                    *pairs.rkeys,
                    pairs.x,
                    q,
                    logit_rho,
                    self._b,
                    self._W,
                    self._diag,
                    uniforms,
                    out,
                )
                self._logits += r * out / (q * (1.0 - q))
            np.clip(self._logits, -_MAX_LOGIT, _MAX_LOGIT, out=self._logits)
            # EM step of the weights on the true ELBO with a Monte Carlo
            # right-hand side, damped with the same Robbins-Monro step size
            self._weight_step(pairs, expit(self._logits), uniforms, r)
        self._step += 1
        self._set_public()
        return self._elbo_pairs(pairs)

    def _pool(self, store, rng):
        """The entities an epoch visits, in random order: every entity with
        "nonlinks", else those with listed pairs."""
        if store.nonlinks:
            return rng.permutation(store.n_entities)
        active = np.flatnonzero((store.out_deg + store.in_deg) > 0)
        return rng.permutation(active)

    def _local_pairs(self, store, centers, rng, sampled=False):
        """The pairs of a stochastic step, in local entity ids.

        Every listed pair of a center, once per end that is a center (weight
        1 for that end's sum, 0 for the other), plus, with "nonlinks",
        ``_N_NONLINK_SAMPLES`` sampled non-links per center and role with
        weight (the center's number of such non-links) / (number sampled).
        Returns ``lsnd, lrcv, rel, x, w_snd, w_rcv`` (P,), the entities
        ``ents`` behind the local ids and the local ids ``lcen`` of the
        centers; with ``sampled`` also, per role (sender, receiver), the
        sampled non-links ``(n_nonlinks (B,), local partners, relations)``
        for :func:`_kernels.nonlink_control_variate` (None without
        "nonlinks").
        """
        N, R = store.n_entities, store.n_relations
        io = _kernels.gather_ranges(store.out_ptr, store.out_order, centers)
        ii = _kernels.gather_ranges(store.in_ptr, store.in_order, centers)
        snd = [store.snd[io], store.snd[ii]]
        rcv = [store.rcv[io], store.rcv[ii]]
        rel = [store.rel[io], store.rel[ii]]
        x = [store.x[io], store.x[ii]]
        w_snd = [np.ones(io.size), np.zeros(ii.size)]
        w_rcv = [np.zeros(io.size), np.ones(ii.size)]
        if store.nonlinks:
            m = _N_NONLINK_SAMPLES
            c = np.repeat(centers, m)
            zeros = np.zeros(c.size)
            for as_sender, deg, links in (
                (True, store.out_deg, (store.out_ptr, store.out_order, store.rcv)),
                (False, store.in_deg, (store.in_ptr, store.in_order, store.snd)),
            ):
                n_non = (N - 1) * R - deg[centers]
                other, r = _kernels.sample_nonlinks(
                    centers, n_non, m, N, R, *links, store.rel,
                    int(rng.randint(2**31 - 1)),
                )
                weight = np.repeat(n_non / m, m)
                snd.append(c if as_sender else other)
                rcv.append(other if as_sender else c)
                rel.append(r)
                x.append(zeros)
                w_snd.append(weight if as_sender else zeros)
                w_rcv.append(zeros if as_sender else weight)
        snd, rcv, rel, x, w_snd, w_rcv = (
            np.ascontiguousarray(np.concatenate(a))
            for a in (snd, rcv, rel, x, w_snd, w_rcv)
        )
        P = snd.size
        # np.unique(..., return_inverse=True), in O(P + N) unless N >> P
        ents, inv = _kernels.unique_inverse(np.concatenate([snd, rcv, centers]), N)
        lsnd, lrcv, lcen = inv[:P], inv[P : 2 * P], inv[2 * P :]
        if not sampled:
            return lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen
        blocks = None
        if store.nonlinks:
            k = io.size + ii.size
            n = centers.size * _N_NONLINK_SAMPLES
            blocks = (
                ((N - 1) * R - store.out_deg[centers], lrcv[k : k + n],
                 rel[k : k + n]),
                ((N - 1) * R - store.in_deg[centers], lsnd[k + n : k + 2 * n],
                 rel[k + n : k + 2 * n]),
            )
        return lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen, blocks

    def _stochastic_step(self, store, centers, rng):
        """One stochastic step for the entities ``centers`` (sorted, distinct).

        Lists every listed pair of a center once per end that is a center
        (weight 1 for that end's sum, 0 for the other), plus
        ``_N_NONLINK_SAMPLES`` sampled non-links per center and role with
        weight (its number of non-links) / (number sampled); the Monte Carlo
        kernel of "mcvi" then estimates the centers' coordinate optima
        without bias. With few features (``_PatternNonlinks``) the
        features' estimates take the non-links' sums exactly over the
        population's feature patterns instead, and the sampled non-links
        serve the weights only. The weights then take a damped Newton step
        on the gradient and curvature estimated from the centers' sender
        pairs (:meth:`_weight_system`, :meth:`_newton_weights`).
        """
        D = self.n_components
        lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen, blocks = self._local_pairs(
            store, centers, rng, sampled=True
        )
        n_loc = ents.size
        moments = getattr(self, "_q_moments", None)
        # q of the step's entities: kept by the moments ("nonlinks"), the same
        # numbers as expit(self._logits[ents])
        q = expit(self._logits[ents]) if moments is None else moments.q[ents]
        # a step's uniforms (S n_loc D of them, millions on a large network)
        # come from a PCG64 generator seeded by rng: several times faster than
        # rng's own Mersenne Twister
        scratch = getattr(self, "_scratch", None) or _Scratch()
        uniforms = np.random.default_rng(rng.randint(2**31 - 1)).random(
            out=scratch.array("uniforms", (self.n_mc_samples, n_loc, D)))
        patterns = getattr(self, "_patterns", None)
        if patterns is not None:
            patterns.refresh_if_due(self._b, self._W)
        out = self._center_deltas(
            store, centers, (lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen, blocks),
            q, uniforms,
        )
        if blocks is not None and (patterns is None or not patterns.active):
            self._fit_control_variate(lsnd, lrcv, rel, x, q, uniforms)
        step = _step_size(self._visits[centers], offset=_STOCHASTIC_OFFSET)
        new = (1.0 - step[:, None]) * self._logits[centers] + step[:, None] * out[
            lcen
        ]
        self._logits[centers] = np.clip(new, -_MAX_LOGIT, _MAX_LOGIT)
        self._visits[centers] += 1
        q[lcen] = expit(self._logits[centers])
        if moments is not None:
            moments.update(centers, q[lcen])
        # a damped Newton step of the weights on this step's pairs
        system = self._weight_system(
            store, centers, (lsnd, lrcv, rel, x, w_snd), q, uniforms
        )
        moved = self._newton_weights(
            system, _step_size(self._step, offset=_STOCHASTIC_OFFSET))
        if patterns is not None:
            patterns.resample(centers, q[lcen])
            patterns.moved += moved
        self._step += 1

    def _center_deltas(self, store, centers, local, q, uniforms):
        """Monte Carlo estimates of the centers' coordinate optima E[Delta_id].

        :func:`_kernels.mcvi_mean_deltas` over the step's pairs (``local``,
        from :meth:`_local_pairs` with ``sampled=True``; ``q`` and
        ``uniforms`` of its local entities), plus, with "nonlinks" and a
        fitted control variate (``_cv_coef``), the zero-mean correction of
        :func:`_kernels.nonlink_control_variate` for each role; or, with the
        epoch's feature patterns (``_patterns``), the listed pairs through
        the kernel and the non-links' exact sums over the patterns
        (:meth:`_PatternNonlinks.add_nonlink_deltas`). Returns (n_loc, D);
        rows of the centers are the estimates.
        """
        lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen, blocks = local
        n_loc, D = q.shape
        out = np.empty((n_loc, D))
        patterns = getattr(self, "_patterns", None)
        if patterns is not None and not patterns.active:
            patterns = None  # too many patterns: the sampled non-links
        if patterns is not None:
            # the listed pairs only (they come first): the non-links' sums
            # are added below, exactly over the population's patterns
            k = lsnd.size - 2 * centers.size * _N_NONLINK_SAMPLES
            lsnd, lrcv, rel, x, w_snd, w_rcv = (
                a[:k] for a in (lsnd, lrcv, rel, x, w_snd, w_rcv))
        # the pairs in the order of their other end than the center's (each
        # is listed for one end): the kernel then reads the rows of the
        # other ends, spread over a large array, in order, and those of
        # the centers, a few, stay in cache
        R = self._b.size
        order = _kernels.counting_argsort(np.where(w_snd != 0.0, lrcv, lsnd), n_loc)
        ps, pr, pl = lsnd[order], lrcv[order], rel[order]
        _kernels.mcvi_mean_deltas(
            ps,
            pr,
            pl,
            *_kernels.pair_keys(ps, pl, n_loc, R),
            *_kernels.pair_keys(pr, pl, n_loc, R),
            x[order],
            q,
            float(logit(self.feature_prior)),
            self._b,
            self._W,
            self._diag,
            uniforms,
            w_snd[order],
            w_rcv[order],
            out,
            (getattr(self, "_scratch", None) or _Scratch()).array(
                "partial", uniforms.shape),
        )
        if patterns is not None:
            patterns.add_nonlink_deltas(
                store, centers, lcen, uniforms[:, lcen] < q[lcen], out)
            return out
        coef = getattr(self, "_cv_coef", None)
        if blocks is None or coef is None:
            return out
        moments = getattr(self, "_q_moments", None)
        if moments is None:
            moments = _QMoments(self._logits)
        q_all, q_sum, m_sum = moments.q, moments.q_sum, moments.m_sum
        W = np.ascontiguousarray(self._W)
        links = (
            (store.out_ptr, store.out_order, store.rcv, W),
            (store.in_ptr, store.in_order, store.snd,
             np.ascontiguousarray(W.transpose(0, 2, 1))),
        )
        zs = _kernels.sample_codes(uniforms, q)  # the samples, for both roles
        for (n_non, partners, prel), (ptr, order, other, V) in zip(
            blocks, links, strict=True
        ):
            _kernels.nonlink_control_variate(
                centers, lcen, n_non.astype(np.float64), partners, prel, q_all,
                q_sum, m_sum, ptr, order, other, store.rel, q, uniforms, self._b,
                V, coef[:, 0].copy(), coef[:, 1].copy(), out, zs=zs,
            )
        return out

    def _fit_control_variate(self, lsnd, lrcv, rel, x, q, uniforms):
        """Coefficients (R, 2) of the quadratic ``h(eta) = h1 eta + h2 eta^2``
        of the non-link control variate, for the next step.

        What the control variate replaces is a flip term, ``g(eta_on) -
        g(eta_off)`` with ``g(eta) = log Phi(-eta)`` and ``eta_on = eta_off +
        c`` the linear predictor of a sampled non-link with one feature of an
        end switched on and off (c = (W_r z_j)_d for the sender's feature d,
        (W_r^T z_i)_d for the receiver's). So h is fitted, per relation, by
        least squares of those terms on ``h(eta_on) - h(eta_off) = h1 c + h2
        (eta_on^2 - eta_off^2)``, over the flips with c != 0 of up to
        ``_CV_FIT_PAIRS`` of this step's non-links in its first joint sample.
        A quadratic fitted to g itself around the non-links' mean eta (most
        non-links share no feature with their ends, so eta sits near the
        intercept) follows g where the flips change nothing and misses its
        curvature between that eta and the eta of a shared feature, where
        the rare large terms of the sampled sum are: those terms' noise,
        which grows with (entities) / (sampled non-links), is what the
        control variate must cancel. Fitted on this step and used in the next, the
        coefficients do not depend on the next step's samples, which keeps
        that step's estimates unbiased.
        """
        R = self._b.size
        # the non-links (of uniformly drawn partners): at most
        # _CV_FIT_PAIRS of them, spread over the step's centers
        non = np.flatnonzero(x < 0.5)
        non = non[:: max(1, non.size // _CV_FIT_PAIRS)]
        ls, lr, rl = lsnd[non], lrcv[non], rel[non]
        zi = (uniforms[0, ls] < q[ls]).astype(np.float64)  # (P, D)
        zj = (uniforms[0, lr] < q[lr]).astype(np.float64)
        # the fields W_r z_j (flips of the sender's features) and W_r^T z_i
        # (the receiver's), with the pairs' weights gathered a chunk at a
        # time (at most _CV_GATHER_ENTRIES of them)
        D = zi.shape[1]
        fr, fs = np.empty_like(zi), np.empty_like(zi)
        chunk = max(1, _CV_GATHER_ENTRIES // (D * D))
        for lo in range(0, rl.size, chunk):
            part = slice(lo, lo + chunk)
            W = self._W[rl[part]]  # (chunk, D, D)
            fr[part] = np.einsum("pde,pe->pd", W, zj[part])
            fs[part] = np.einsum("pde,pd->pe", W, zi[part])
        eta = self._b[rl] + np.einsum("pd,pd->p", zi, fr)
        # both ends' flips, (P, 2 D): eta with the feature off, and its change
        c = np.concatenate([fr, fs], axis=1)
        off = eta[:, None] - np.concatenate([zi, zj], axis=1) * c
        keep = c != 0.0
        r_of = np.broadcast_to(rl[:, None], c.shape)[keep]
        c, off = c[keep], off[keep]
        on = off + c
        target = log_ndtr(-on) - log_ndtr(-off)
        basis = np.column_stack([c, on**2 - off**2])
        coef = np.zeros((R, 2))
        for r in range(R):
            sel = r_of == r
            if sel.sum() < 3:
                continue
            coef[r] = np.linalg.lstsq(basis[sel], target[sel], rcond=None)[0]
        self._cv_coef = coef

    def _weight_system(self, store, centers, local, q, uniforms):
        """The weight objective of a stochastic step: gradient and curvature.

        Only the centers' sender pairs (``w_snd > 0``) enter, weighted and
        scaled by (entities in the pool) / (centers), so that both are
        unbiased estimates of sums over all pairs. ``gradient(b, W)``: the
        Monte Carlo estimate of ``sum_p w_p E_q[g'(eta_p) f_p]`` (the
        residual form of :func:`_kernels.mc_weight_rhs`, since the mean of
        the truncated normal minus its location is g'(eta) for the probit
        log-likelihood g), as ``(grad0 (R,), gradW (R, D, D))``.
        ``curvature(b, W)``: ``sum_p w_p c_p E_q[f_p f_p^T]`` with c_p =
        -g''(E_q eta_p), the curvature at the pair's mean linear predictor
        (:func:`_kernels.weight_system` with these weights), shape (R, F, F).
        """
        lsnd, lrcv, rel, x, w_snd = local
        N, R, D = store.n_entities, store.n_relations, self.n_components
        n_loc = q.shape[0]
        pool = N if store.nonlinks else np.count_nonzero(store.out_deg + store.in_deg)
        # the centers' sender pairs, in the order of their receivers (rows
        # of a large array read in order, as in _center_deltas)
        sel = np.flatnonzero(w_snd > 0.0)
        sel = sel[_kernels.counting_argsort(lrcv[sel], n_loc)]
        lsnd, lrcv, rel, x = lsnd[sel], lrcv[sel], rel[sel], x[sel]
        weight = w_snd[sel] * (pool / centers.size)
        skeys = _kernels.pair_keys(lsnd, rel, n_loc, R)
        rkeys = _kernels.pair_keys(lrcv, rel, n_loc, R)
        diag = self._diag

        class _System:
            @staticmethod
            def gradient(b, W):
                g0, gW = np.empty(R), np.empty((R, D, D))
                _kernels.mc_weight_rhs(
                    lsnd, lrcv, rel, *skeys, *rkeys, x, q, b, W, diag, uniforms,
                    weight, True, g0, gW,
                )
                return g0, gW

            @staticmethod
            def curvature(b, W):
                mean, var = np.empty(lsnd.size), np.empty(lsnd.size)
                _kernels.pair_mean_and_variance(
                    lsnd, lrcv, rel, q, b, W, diag, mean, var
                )
                return _kernels.weight_system(
                    lsnd, lrcv, rel, q, R, diag, skeys,
                    weight * _probit_curvature(x, mean),
                )

        return _System

    def _newton_weights(self, system, step):
        """(b, W) <- (b, W) + t * Newton direction of the penalized weight
        objective (ridge ``alpha_`` on W), with t <= ``step``.

        The curvature is taken at the pairs' mean linear predictors, which
        can underestimate it; so if the directional derivative changes sign
        between 0 and ``step``, t is the secant root of the directional
        derivative instead (one more gradient evaluation). Direction
        entries are capped at 1 in absolute value. Returns the largest
        change of an entry.
        """
        R, D = self._W.shape[0], self.n_components
        F = D + 1 if self._diag else D * D + 1
        ridge = np.repeat(self._ridge()[:, None], F, axis=1)  # (R, F)
        ridge[:, 0] = 0.0

        def pack(b, W):
            if self._diag:
                return np.column_stack([b, np.diagonal(W, axis1=1, axis2=2)])
            return np.column_stack([b, W.reshape(R, D * D)])

        def unpack(v):
            b, W = v[:, 0].copy(), np.zeros((R, D, D))
            if self._diag:
                W[:, np.arange(D), np.arange(D)] = v[:, 1:]
            else:
                W[:] = v[:, 1:].reshape(R, D, D)
            return b, W

        def ascent(v):  # penalized gradient at v, (R, F)
            return pack(*system.gradient(*unpack(v))) - ridge * v

        v = pack(self._b, self._W)
        g = ascent(v)
        H = system.curvature(self._b, self._W)
        d = np.zeros_like(v)
        for r in range(R):
            if H[r, 0, 0] <= 0:
                continue
            M = H[r] + np.diag(ridge[r])
            M[np.diag_indices_from(M)] += 1e-9 * (1.0 + np.abs(np.diagonal(M)).max())
            d[r] = np.clip(np.linalg.solve(M, g[r]), -1.0, 1.0)
        slope0 = float(np.sum(g * d))
        t = step
        if slope0 > 0:
            slope1 = float(np.sum(ascent(v + t * d) * d))
            if slope1 < 0:  # past the maximum along d: secant root
                t *= slope0 / (slope0 - slope1)
        self._b, self._W = unpack(v + t * d)
        return float(np.abs(t * d).max()) if d.size else 0.0

    def _start_weights(self, store, rng):
        """Weights of a stochastic run's start: Newton's method on one batch.

        At the start's q, the weight objective of one minibatch (its pairs
        and samples fixed) is maximized by up to 50 Newton steps, until no
        entry moves by more than 1e-4. (The EM step of the full sweeps moves
        very slowly when links are rare: its curvature counts every
        non-link as much as a link, while the probit log-likelihood of a
        far-from-linked pair is nearly flat.)
        """
        N = store.n_entities
        centers = np.sort(self._pool(store, rng)[: self._batch() or N])
        lsnd, lrcv, rel, x, w_snd, w_rcv, ents, lcen = self._local_pairs(
            store, centers, rng
        )
        q = expit(self._logits[ents])
        uniforms = rng.random_sample((self.n_mc_samples, ents.size, self.n_components))
        system = self._weight_system(store, centers, (lsnd, lrcv, rel, x, w_snd), q,
                                     uniforms)
        for _ in range(50):
            if self._newton_weights(system, 1.0) < 1e-4:
                break

    def _stochastic_elbo(self, store):
        """ELBO per listed row: exact over the listed pairs ("unobserved"),
        estimated on the monitoring sample ("nonlinks").

        The monitoring sample is drawn with the seed of the ELBO's common
        random numbers, not from the training stream: the same pairs for
        the same data at every fit of the model (a warm start included),
        so that consecutive values of ``elbo_history_`` differ by the fit's
        progress, not by a new sample, and monitoring leaves the training
        steps' random numbers as they would be without it.
        """
        if not store.nonlinks:
            if getattr(store, "pairs", None) is None:  # keys built once
                store.pairs = _Pairs(
                    store.snd, store.rcv, store.rel, store.x, store.n_entities
                )
            return self._elbo_pairs(store.pairs)
        if getattr(store, "monitor", None) is None:  # once per set of pairs
            store.monitor = _monitor_sample(
                store, np.random.RandomState(self._elbo_seed)
            )
        pairs, weight = store.monitor
        n_rows = max(store.n_rows, 1)
        terms = self._pair_terms(pairs)
        self._monitor_se = _stratified_standard_error(terms, pairs.x, weight) / n_rows
        return self._elbo_pairs(pairs, weight=weight, n_rows=n_rows, terms=terms)

    def _elbo_pairs(self, pairs, q=None, weight=None, n_rows=None, terms=None):
        """True ELBO per pair of validated pairs (q: features incl. a prior row).

        ``weight``: inverse-probability weights of sampled pairs, and
        ``n_rows`` the number the weighted total is divided by (default:
        every pair weight 1, the expected log-likelihood divided by the
        number of pairs and the KL of the features by the number of training
        rows, so that the value does not depend on how many pairs are scored).
        ``terms``: the pairs' expected log-likelihoods if already computed
        (:meth:`_pair_terms`).
        """
        q_fit = expit(self._logits)
        if terms is None:
            terms = self._pair_terms(pairs, q_fit if q is None else q)
        out = terms
        kl = _kernels.kl_features(q_fit, self.feature_prior)
        total = out.sum() if weight is None else out @ weight
        if n_rows is not None:
            return float((total - kl) / n_rows)
        # the KL term charged per training row, whatever the number of pairs
        # scored: held-out pairs (early stopping) weigh it as training does
        n_train = self._n_train_rows
        return float(total / pairs.x.size - kl / n_train)

    def _pair_terms(self, pairs, q=None):
        """Expected log-likelihood of each pair (nats), Monte Carlo with the
        ELBO's common random numbers (q: features incl. a prior row)."""
        q = expit(self._logits) if q is None else q
        out = np.empty(pairs.x.size)
        _kernels.expected_pair_log_likelihood(
            pairs.snd,
            pairs.rcv,
            pairs.rel,
            *pairs.rkeys,
            pairs.x,
            q,
            self._b,
            self._W,
            self._diag,
            self._elbo_seed,
            _N_ELBO_SAMPLES,
            out,
        )
        return out

    def _elbo_per_sample(self, X, y):
        store = getattr(self, "_store", None)
        if self._stochastic and store is not None and store.source is X:
            return self._stochastic_elbo(store)
        N = self._logits.shape[0]
        if X[:, :2].max() < N:
            return self._elbo_pairs(self._pairs(X, y))
        q, snd, rcv = self._with_prior_row(X[:, 0], X[:, 1])
        pairs = _Pairs(snd, rcv, np.ascontiguousarray(X[:, 2]), y, N + 1)
        return self._elbo_pairs(pairs, q)

    def _check_elbo_input(self, X, y):
        if y is None:
            raise ValueError("elbo(X, y) needs the links y of the pairs X.")
        # held-out pairs may all be links or all non-links: their labels must
        # only be the fitted classes
        return self._check_pairs(X, reset=False, y=y,
                                 classes=getattr(self, "classes_", None))

    def _divergence_hint(self):
        return "Check the input, or raise alpha."

    def _stopping_rule(self):
        # Full sweeps move every logit at once (a Jacobi step), which is not
        # an ascent step when features are strongly coupled: on Nations
        # (14 entities, 55 relations, D = 20) the ELBO fell from -0.19 to -149
        # nats per pair in one iteration, the patience rule then stopped the
        # run 10 iterations later at -8.5 (held-out AUC 0.55), while the same
        # run recovers to -0.045 (AUC 0.83) when let go on. At the end of
        # runs that converge the ELBO stays within 3% of its best (kinship,
        # every relation, "mcvi" and "score"): a fall further than
        # _PLATEAU_FRACTION of it (and further than a quarter of the run's
        # progress from its first value: a relation of 2 links among 8,570
        # kinship pairs has an ELBO of -0.003 per pair that wanders 100% below
        # its best on its plateau, which kept the patience from ever running
        # out) restarts the patience. Stochastic steps fluctuate more: there
        # every non-improving iteration counts.
        # With "nonlinks" the ELBO is estimated on the monitoring sample: a
        # gain within twice its standard error does not count.
        se = None
        if self.unlisted_pairs == "nonlinks":
            def se():
                return self._monitor_se  # set with each ELBO estimate
        # tol is counted per link: the ELBO per pair of a network with rare
        # links moves little per pair while its links' part still rises
        # (with "nonlinks" the ELBO is already per link)
        per_link = 1.0 if self.unlisted_pairs == "nonlinks" else getattr(
            self, "_links_per_pair", 1.0)
        return StoppingRule(
            self._stopping_tol(), self.n_iter_no_change,
            plateau_fraction=None if self._stochastic else _PLATEAU_FRACTION,
            standard_error=se, unit="link", units_per_sample=per_link)

    # caches of the training rows, rebuilt on demand: not part of the state
    # kept for the best run or iteration
    _transient_attributes = ("_cache", "_store")

    def _set_public(self):
        self.latent_features_ = expit(self._logits)
        self.intercept_ = self._b.copy()
        if self._diag:
            self.weights_ = np.diagonal(self._W, axis1=1, axis2=2).copy()
        else:
            self.weights_ = self._W.copy()

    def _after_fit(self, X, y):
        self._cache = {}
        if not getattr(self, "_partial", False):
            self._store = None  # fit keeps no copy of the data
        self._set_public()
        pairs_degree = np.bincount(X[:, :2].ravel(), minlength=self.n_entities_) > 0
        q = self.latent_features_[pairs_degree]
        used = (q.max(axis=0) - q.min(axis=0)) >= _FEATURE_SPREAD
        n_used = int(used.sum())
        self.n_active_components_ = n_used
        if self.verbose:
            message = f"{n_used} of {self.n_components} features in use"
            if n_used == 0:
                # the trivial fixed point: every entity has the same features
                message += (
                    ": the fit collapsed (every entity has nearly the same "
                    "feature probabilities, the predictions are those of the "
                    "bias alone); try n_init > 1 or another init"
                )
            self._report(message)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_cache", None)
        return state

    # ----------------------------------------------------------- prediction
    def _with_prior_row(self, snd, rcv):
        """q with a prior row appended, and unseen entity ids mapped to it."""
        q = self.latent_features_
        N = q.shape[0]
        q_ext = np.vstack([q, np.full((1, q.shape[1]), self.feature_prior)])
        return (
            q_ext,
            np.ascontiguousarray(np.minimum(snd, N)),
            np.ascontiguousarray(np.minimum(rcv, N)),
        )

    def _moments(self, X):
        self._check_fitted()
        triples = self._check_pairs(X, reset=False)
        q, snd, rcv = self._with_prior_row(triples[:, 0], triples[:, 1])
        rel = np.ascontiguousarray(triples[:, 2])
        mean, var = np.empty(snd.size), np.empty(snd.size)
        _kernels.pair_mean_and_variance(
            snd, rcv, rel, q, self._b, self._W, self._diag, mean, var
        )
        return mean, var

    def transform(self, X):
        """Posterior pair features E_q[f], in which the linear predictor is linear.

        ``weights="diagonal"``: ``q_id q_jd`` (n_components columns);
        ``"full"``: ``q_id q_je`` for every (d, e), row-major (n_components**2
        columns, ``W_r[d, e]`` multiplies column ``d * n_components + e``).
        ``eta = b_r + f . w_r``, so they can feed a downstream linear model.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Pairs (or triples) of ids, as in :meth:`fit`; the relation does
            not change the features, but it must be one trained on, as in
            :meth:`predict_proba`.

        Returns
        -------
        features : ndarray of shape (n_pairs, D) or (n_pairs, D**2)
            float64 values in [0, 1].

        Raises
        ------
        ValueError
            As :meth:`fit` for X, and for a relation id not trained on.
        """
        self._check_fitted()
        triples = self._check_pairs(X, reset=False)
        q, snd, rcv = self._with_prior_row(triples[:, 0], triples[:, 1])
        if self._diag:
            return q[snd] * q[rcv]
        D = self.n_components
        return (q[snd][:, :, None] * q[rcv][:, None, :]).reshape(-1, D * D)

    def get_feature_names_out(self, input_features=None):
        """Names of the :meth:`transform` columns.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Ignored (the columns of X are ids, not features).

        Returns
        -------
        names : ndarray of str
            ``latentfeaturerelational{d}`` (diagonal) or
            ``latentfeaturerelational{d}_{e}`` (full).
        """
        self._check_fitted()
        prefix = type(self).__name__.lower()
        D = self.n_components
        if self._diag:
            names = [f"{prefix}{d}" for d in range(D)]
        else:
            names = [f"{prefix}{d}_{e}" for d in range(D) for e in range(D)]
        return np.asarray(names, dtype=object)

    def decision_function(self, X):
        """Probit score m / sqrt(1 + v) of each pair (positive: link more likely).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Pairs (or triples) of ids, as in :meth:`fit`.

        Returns
        -------
        scores : ndarray of shape (n_pairs,), float64
            ``Phi(scores)`` is the link probability of :meth:`predict_proba`.

        Raises
        ------
        ValueError
            As :meth:`fit` for X, and for relation ids not seen in ``fit``.
        """
        mean, var = self._moments(X)
        return mean / np.sqrt(1.0 + var)

    def predict_proba(self, X):
        """Posterior predictive probability of no link and of a link for each pair.

        ``p(x = 1) = E_q Phi(eta) ~ Phi(m / sqrt(1 + v))`` (probit-Gaussian
        approximation with the exact mean m and variance v of eta under q).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Pairs (or triples) of ids, as in :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_pairs, 2), float64
            Columns ordered as ``classes_``.

        Raises
        ------
        ValueError
            As :meth:`decision_function`.
        """
        score = self.decision_function(X)
        return np.column_stack([ndtr(-score), ndtr(score)])

    def predict(self, X):
        """Most probable label of each pair.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Pairs (or triples) of ids, as in :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_pairs,)
            ``classes_[1]`` where the link probability exceeds 1/2.

        Raises
        ------
        ValueError
            As :meth:`decision_function`.
        """
        self._check_fitted()
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def elbo(self, X, y):
        """True ELBO of the fitted model on the pairs (X, y), nats per pair.

        The mean over the given pairs of E_q[log p(x | z)] minus
        KL(q || prior) over all ``n_entities_`` entities divided by the
        number of training pairs (the KL charged per pair as in training, so
        that the value does not depend on how many pairs are scored), with
        the common random numbers of ``fit``: on the training pairs it equals
        ``elbo_``, except with ``unlisted_pairs="nonlinks"``, where ``elbo_``
        also counts the unlisted pairs as non-links and this method only the
        given ones. Unseen entities get the prior. The pairs may all be of
        one class (held-out links, say).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2) or (n_pairs, 3)
            Pairs (or triples) of ids, as in :meth:`fit`.
        y : array-like of shape (n_pairs,)
            Their links, labels of ``classes_``.

        Returns
        -------
        elbo : float
            Nats per pair.

        Raises
        ------
        ValueError
            As :meth:`fit` for X; if y is None or holds labels outside
            ``classes_``.
        """
        return super().elbo(X, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.classifier_tags.multi_class = False
        return tags


def _link_matrix(pairs, N, R):
    """The N x 3 R N sparse matrix of every entity's training links.

    Row i holds i's out-links, its in-links and its links in either
    direction, in every relation (the third block makes undirected input,
    listed once per pair, look the same from both ends). O(links).
    """
    links = pairs.x > 0.5
    s, t, r = pairs.snd[links], pairs.rcv[links], pairs.rel[links]
    B = sp.csr_matrix(
        (
            np.ones(4 * s.size),
            (
                np.concatenate([s, t, s, t]),
                np.concatenate(
                    [
                        r * N + t,
                        (R + r) * N + s,
                        (2 * R + r) * N + t,
                        (2 * R + r) * N + s,
                    ]
                ),
            ),
        ),
        shape=(N, 3 * R * N),
    )
    B.sum_duplicates()
    return B


def _spectral_start(pairs, N, R, D, rng):
    """IRM-like start: k-means clusters of a truncated SVD of the link tensor.

    The rows of :func:`_link_matrix` are reduced by a truncated SVD to D
    dimensions, row-normalized and clustered into D groups by k-means;
    q_id = 0.9 for the entity's cluster, 0.1 for the others. Cost O(links
    D + N D^2) (randomized SVD, k-means).
    """
    from sklearn.cluster import KMeans
    from sklearn.decomposition import TruncatedSVD

    B = _link_matrix(pairs, N, R)
    q = np.full((N, D), 0.1)
    if B.nnz == 0 or N <= D:
        return rng.uniform(0.05, 0.95, size=(N, D))
    k = max(1, min(D, min(B.shape) - 1))
    seed = rng.randint(np.iinfo(np.int32).max)
    U = TruncatedSVD(k, random_state=seed).fit_transform(B)
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    U = U / np.where(norms > 0, norms, 1.0)
    with warnings.catch_warnings():
        # entities with identical link patterns (a star, isolated entities)
        # give fewer distinct rows than D clusters: k-means then warns about
        # an X the user never passed; the features of the empty clusters
        # start at 0.1 for every entity, as the ascent may leave them
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = KMeans(D, n_init=3, random_state=seed).fit_predict(U)
    q[np.arange(N), labels] = 0.9
    return q


def _nmf_start(pairs, N, R, D, rng):
    """Overlapping start: non-negative factors of the link tensor.

    The non-negative matrix factorization :math:`B \approx U V` of
    :func:`_link_matrix` (scikit-learn's NMF, D components, NNDSVD start,
    100 iterations of coordinate descent) gives every entity a non-negative
    loading U_id on each of D link patterns, which may overlap, as the
    features do, and q_id = 0.05 + 0.9 U_id / (U_id + mean_i U_id), which
    keeps the order of the loadings. Cost O(links D) per NMF iteration.
    """
    from sklearn.decomposition import NMF

    B = _link_matrix(pairs, N, R)
    if B.nnz == 0 or N <= D:
        return rng.uniform(0.05, 0.95, size=(N, D))
    seed = rng.randint(np.iinfo(np.int32).max)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        U = NMF(D, init="nndsvd", max_iter=100, random_state=seed).fit_transform(B)
    # q_id = 0.05 + 0.9 U_id / (U_id + mean_i U_id): monotone in the loading
    # (no threshold to choose), 1/2 at the column's mean loading
    scale = U.mean(axis=0, keepdims=True)
    q = 0.05 + 0.9 * U / (U + np.where(scale > 0, scale, 1.0))
    return q


def _two_hop_nmf_start(pairs, N, R, D, rng):
    r"""Overlapping start of a sparse complete network: NMF with two-hop paths.

    With few links per entity its links alone say little about its
    features, but its two-hop neighbours (the neighbours of its neighbours)
    are many and mostly share its features. So the factorized matrix is
    :math:`M = S + c (S^2 - \mathrm{diag}(S^2))`, S the symmetric 0/1
    adjacency of the links in any direction and relation, c =
    ``_TWO_HOP_WEIGHT``: non-negative factors :math:`M \approx U V^\top`
    (D components) by up to ``_TWO_HOP_ITERATIONS`` rounds of
    hierarchical alternating least squares, started from scikit-learn's
    NMF of S (NNDSVDa). M is never formed: its products with (N, D)
    matrices are two sparse products with S, so memory stays O(links + N
    D) (S^2 itself has about N times the squared degree entries). q then
    follows the loadings U as in :func:`_nmf_start`.
    """
    from sklearn.decomposition import NMF

    links = pairs.x > 0.5
    s, t = pairs.snd[links], pairs.rcv[links]
    if s.size == 0 or N <= D:
        return rng.uniform(0.05, 0.95, size=(N, D))
    S = sp.csr_matrix(
        (np.ones(2 * s.size), (np.concatenate([s, t]), np.concatenate([t, s]))),
        shape=(N, N),
    )
    S.sum_duplicates()
    S.data[:] = 1.0
    degree = np.asarray(S.sum(axis=1))

    def product(A):
        return _two_hop_product(S, degree, A)

    seed = rng.randint(np.iinfo(np.int32).max)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        nmf = NMF(D, init="nndsvda", max_iter=10, random_state=seed)
        U = nmf.fit_transform(S)
    V = np.ascontiguousarray(nmf.components_.T)

    def hals(A, MB, G):  # one round of column updates of A in M ~ A B^T
        for k in range(D):
            A[:, k] = np.maximum(
                A[:, k] + (MB[:, k] - A @ G[:, k]) / max(G[k, k], 1e-12), 0.0
            )

    for _ in range(_TWO_HOP_ITERATIONS):
        before = U.copy()
        hals(U, product(V), V.T @ V)
        hals(V, product(U), U.T @ U)
        change = np.linalg.norm(U - before) / max(np.linalg.norm(U), 1e-300)
        if change < _TWO_HOP_TOL:
            break
    scale = U.mean(axis=0, keepdims=True)
    return 0.05 + 0.9 * U / (U + np.where(scale > 0, scale, 1.0))


def _two_hop_product(S, degree, A):
    """``M @ A`` for M = S + c (S^2 - diag(S^2)), c = ``_TWO_HOP_WEIGHT``,
    without forming S^2: two sparse products with S (symmetric 0/1, so the
    diagonal of S^2 is the degree (N, 1)), on threads when large (the same
    numbers as ``S @ A``)."""
    SA = sparse_dot(S, A, _MIN_PARALLEL_PRODUCT)
    S2A = sparse_dot(S, SA, _MIN_PARALLEL_PRODUCT)
    return SA + _TWO_HOP_WEIGHT * (S2A - degree * A)


class _QMoments:
    """q = expit(logits) of every entity, with ``q_sum = sum_i q_i`` (D,) and
    ``m_sum = sum_i E[z_i z_i^T] = sum_i q_i q_i^T + diag(q_i (1 - q_i))``
    (D, D), the sums the non-link control variate needs.

    A stochastic step changes the rows of its centers only: :meth:`update`
    replaces their share of the sums, O(B D^2) for B centers, where
    recomputing them costs O(N D^2) per step, O(N^2 D^2 / B) per epoch.
    """

    def __init__(self, logits):
        self.q = expit(logits)
        q = self.q
        self.q_sum = q.sum(axis=0)
        self.m_sum = q.T @ q
        self.m_sum[np.diag_indices_from(self.m_sum)] += (q * (1.0 - q)).sum(axis=0)

    def update(self, rows, q_new):
        """Set the rows ``rows`` (distinct) of q to ``q_new`` and the sums."""
        q_old = self.q[rows]
        self.q_sum += q_new.sum(axis=0) - q_old.sum(axis=0)
        self.m_sum += q_new.T @ q_new - q_old.T @ q_old
        self.m_sum[np.diag_indices_from(self.m_sum)] += (
            (q_new * (1.0 - q_new)).sum(axis=0) - (q_old * (1.0 - q_old)).sum(axis=0)
        )
        self.q[rows] = q_new


class _PatternNonlinks:
    """The non-links' sums of a stochastic epoch, exact over one joint
    sample of every entity's features ("nonlinks" with few features).

    ``current`` (N,) holds a pattern code (:func:`_kernels.pattern_codes`)
    of every entity, drawn from its q at the start of the epoch and redrawn
    for the centers after each step. The tables of a center's sums over
    every other entity (:func:`_kernels.pattern_flip_sums`) are computed
    from a snapshot of it (``population``, its distinct patterns and their
    counts) and kept per center pattern until the snapshot is refreshed:
    once an eighth of the entities have been redrawn or the weights have
    moved by ``_PATTERN_REFRESH_MOVE`` (sum of the steps' largest changes)
    since. A center's non-link sum is its table row minus the terms of
    itself and of its listed partners, in the snapshot
    (:func:`_kernels.pattern_nonlink_deltas`): the sampled non-links'
    noise, which grows with (entities) / sqrt(sampled non-links), is gone;
    what is left is the noise of one draw of every other entity. While a
    snapshot holds more than ``_PATTERN_MAX_PATTERNS`` distinct patterns
    (``active`` False), the steps use the sampled non-links instead.
    """

    def __init__(self, q, b, W, rng):
        self._rng = np.random.default_rng(rng.randint(2**31 - 1))
        # drawn a block of rows at a time: the same numbers as one draw of
        # shape (N, D), without its (N, D) temporaries
        self.current = np.empty(q.shape[0], dtype=np.int64)
        for lo in range(0, q.shape[0], _PATTERN_DRAW_ROWS):
            part = q[lo : lo + _PATTERN_DRAW_ROWS]
            self.current[lo : lo + part.shape[0]] = _kernels.pattern_codes(
                self._rng.random(part.shape) < part)
        self.n_codes = 2 ** q.shape[1]
        self.refresh(b, W)

    def resample(self, rows, q_rows):
        """Redraw the patterns of the entities ``rows`` from their new q."""
        self.current[rows] = _kernels.pattern_codes(
            self._rng.random(q_rows.shape) < q_rows)
        self.redrawn += rows.size

    def refresh(self, b, W):
        """Snapshot ``current``; forget the tables."""
        self.population = self.current.copy()
        counts = np.bincount(self.population, minlength=self.n_codes)
        counts[0] = 0  # an entity without features adds no flip term
        codes = np.flatnonzero(counts)
        self.counts = counts[codes].astype(np.float64)
        # the tables cost (center patterns) x (population patterns) terms:
        # with too many, the steps take the sampled non-links meanwhile
        self.active = codes.size <= _PATTERN_MAX_PATTERNS
        self.fields = _kernels.pattern_fields(codes, W)
        self.b, self.W = b.copy(), np.array(W, order="C")
        D = W.shape[1]
        self.codes = np.zeros(0, dtype=np.int64)
        self.table_snd = np.zeros((0, D))
        self.table_rcv = np.zeros((0, D))
        self.redrawn, self.moved = 0, 0.0

    def rows(self, a_codes):
        """Rows of the tables for the center codes ``a_codes``, adding the
        codes not yet in the tables."""
        new = np.unique(a_codes)
        new = new[~np.isin(new, self.codes)]
        if new.size:
            D = self.table_snd.shape[1]
            snd, rcv = np.empty((new.size, D)), np.empty((new.size, D))
            _kernels.pattern_flip_sums(new, *self.fields, self.counts, self.b, snd,
                                       rcv)
            codes = np.concatenate([self.codes, new])
            order = np.argsort(codes, kind="stable")
            self.codes = codes[order]
            self.table_snd = np.concatenate([self.table_snd, snd])[order]
            self.table_rcv = np.concatenate([self.table_rcv, rcv])[order]
        return np.searchsorted(self.codes, a_codes)

    def refresh_if_due(self, b, W):
        """Refresh once an eighth of the entities have been redrawn or the
        weights have moved by ``_PATTERN_REFRESH_MOVE`` since the last."""
        if (self.redrawn * 8 >= self.current.size
                or self.moved >= _PATTERN_REFRESH_MOVE):
            self.refresh(b, W)

    def add_nonlink_deltas(self, store, centers, lcen, z, out):
        """Add the centers' non-link sums (mean over the samples ``z``
        (S, B, D) of their features) to ``out`` (rows ``lcen``), with the
        snapshot's tables, patterns and weights."""
        a_codes = np.ascontiguousarray(_kernels.pattern_codes(z).T)  # (B, S)
        rows = self.rows(a_codes)
        _kernels.pattern_nonlink_deltas(
            centers, lcen, a_codes, rows, self.table_snd, self.table_rcv,
            self.population, store.out_ptr, store.out_order, store.rcv,
            store.in_ptr, store.in_order, store.snd, store.rel, self.b, self.W, out)


class _Scratch:
    """Scratch arrays that the stochastic steps of an epoch reuse.

    A step's uniforms and per-sample sums, (S, n_loc, D) each, are tens of
    megabytes on a large network: allocated anew at every step, each comes
    from fresh pages of the operating system, which it zeroes and maps on
    first touch, a cost comparable to filling the array. ``array(name,
    shape)`` returns a C-contiguous view of a buffer kept under ``name``,
    grown when a step needs more; its values are left from earlier steps.
    """

    def __init__(self):
        self._buffers = {}

    def array(self, name, shape):
        size = int(np.prod(shape))
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            # with room for the next steps' slightly larger sizes
            buffer = self._buffers[name] = np.empty(size + size // 4)
        return buffer[:size].reshape(shape)


def _step_size(t, decay=None, offset=None):
    """Step size (t + offset) ** -decay, by default the Robbins-Monro decay
    ``_LEARNING_DECAY`` and the offset ``_LEARNING_OFFSET``."""
    offset = _LEARNING_OFFSET if offset is None else offset
    return (t + offset) ** (-(_LEARNING_DECAY if decay is None else decay))


def _probit_curvature(x, eta):
    """-g''(eta) of the probit log-likelihood g = log Phi(+-eta), in (0, 1).

    With lam = phi(eta) / Phi(s eta), s = +1 for a link, -1 for a non-link:
    -g'' = lam (lam + s eta). Computed from log densities (no 0/0).
    """
    s = np.where(x > 0.5, 1.0, -1.0)
    lam = np.exp(-0.5 * eta**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(s * eta))
    return np.clip(lam * (lam + s * eta), 0.0, 1.0)


# pairs of each kind (links, non-links) on which the ELBO of a "nonlinks"
# fit is estimated: as many as the network has links, within these bounds
# (see _monitor_sample)
_MONITOR_SIZE = (20_000, 200_000)
# the start of "nonlinks" fits (_two_hop_nmf_start): weight of the two-hop
# paths, most rounds of alternating least squares and the relative change
# of the loadings below which they stop
_TWO_HOP_WEIGHT = 0.1
_TWO_HOP_ITERATIONS = 100
_TWO_HOP_TOL = 1e-3
# multiply-adds of a sparse product of the start from which it runs on
# threads: the noisy-OR encoder's threshold for the same product
_MIN_PARALLEL_PRODUCT = 3_000_000


def _stratified_standard_error(terms, is_link, weight):
    """Standard error of ``terms @ weight``, the estimate of a total over all
    pairs from the monitoring sample (:func:`_monitor_sample`).

    Two strata, each weighted by (stratum size) / (sampled): the links,
    drawn uniformly without replacement, and the non-links, drawn uniformly
    with replacement. The variance is ``sum_h N_h^2 f_h s_h^2 / n_h`` with
    n_h pairs sampled out of N_h, s_h^2 the sample variance of their terms
    and f_h = 1 - n_h / N_h for the links (the finite population
    correction: 0 when every link is in the sample), 1 for the non-links.
    """
    var = 0.0
    for sel, replace in ((is_link > 0.5, False), (is_link < 0.5, True)):
        n = int(sel.sum())
        if n < 2:
            continue
        size = float(weight[sel].sum())  # N_h
        fpc = 1.0 if replace else max(1.0 - n / size, 0.0)
        var += size**2 * fpc * terms[sel].var(ddof=1) / n
    return float(np.sqrt(var))


def _monitor_sample(store, rng):
    """Fixed pairs on which the ELBO of a complete network is estimated.

    M links (without replacement) and M uniform non-links (triples i != j
    that are not links, by rejection), each with its inverse-probability
    weight (links / sampled links, non-links / sampled non-links): the
    weighted sum of a pair function over the sample is an unbiased estimate
    of its sum over all N (N - 1) R pairs. M is the number L of links within
    the bounds ``_MONITOR_SIZE`` (all the links up to the upper bound): the
    estimate's error moves with the features of the sampled entities, so
    that a sample much smaller than the network would make the reported
    ELBO (and the stopping rule that reads it) rise and fall with the
    sampling noise of the fit rather than with its progress, while the
    monitoring of a small network stays cheap beside its epochs. Returns
    (:class:`_Pairs`, weights).
    """
    N, R, L = store.n_entities, store.n_relations, store.n_rows
    size = int(min(max(L, _MONITOR_SIZE[0]), _MONITOR_SIZE[1]))
    n_links = min(L, size)
    pick = rng.choice(L, n_links, replace=False) if n_links else np.zeros(0, int)
    n_non_total = N * (N - 1.0) * R - L
    snd, rcv, rel = [], [], []
    found = 0
    while n_non_total > 0 and found < size:
        n = 2 * (size - found)
        s, t = rng.randint(N, size=n), rng.randint(N - 1, size=n)
        t = t + (t >= s)
        r = rng.randint(R, size=n)
        code = (s * np.int64(N) + t) * np.int64(R) + r
        pos = np.minimum(np.searchsorted(store.keys, code), max(L - 1, 0))
        ok = store.keys[pos] != code if L else np.ones(n, bool)
        s, t, r = s[ok], t[ok], r[ok]
        take = min(s.size, size - found)
        snd.append(s[:take]), rcv.append(t[:take]), rel.append(r[:take])
        found += take
    n_non = found
    snd = np.concatenate([store.snd[pick], *snd]).astype(np.int64)
    rcv = np.concatenate([store.rcv[pick], *rcv]).astype(np.int64)
    rel = np.concatenate([store.rel[pick], *rel]).astype(np.int64)
    x = np.concatenate([np.ones(n_links), np.zeros(n_non)])
    weight = np.concatenate(
        [np.full(n_links, L / max(n_links, 1)),
         np.full(n_non, n_non_total / max(n_non, 1))]
    )
    return _Pairs(snd, rcv, rel, x, N), weight
