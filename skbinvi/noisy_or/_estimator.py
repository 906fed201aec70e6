"""NoisyORFactorizer: the noisy-OR factor model with amortized variational inference."""

import inspect
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, logit
from sklearn.base import (
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.cluster import kmeans_plusplus
from sklearn.preprocessing import normalize
from sklearn.random_projection import SparseRandomProjection
from sklearn.utils import gen_batches
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import validate_data

from .._base import FIT_LOOP_CONSTRAINTS, BaseVariational, single_threaded_blas
from .._optim import Adam
from .._validation import IntInterval, check_binary
from . import _encoder, _jaakkola_jordan, _kernels

# Weight of a seed row's features in init="data": large enough that Adam grows
# the weights quickly (softplus is linear above ~1, flat near 0), small enough
# that a seed row mixing several true causes does not lock them together.
_SEED_WEIGHT = 0.3
# Largest total seed weight of one cause (nats of evidence for the cause in a
# copy of its seed row): on long rows the per-feature weight shrinks to
# _SEED_EVIDENCE / (active features), so that a cause seeded on a 60-word
# document does not start as a detector of that document's near-duplicates
# (such causes end used by a handful of rows and their prior falls below 0.01).
_SEED_EVIDENCE = 3.0


def _seed_weights(X, seeds):
    """Dense (n_features, len(seeds)) seed weights of the rows ``seeds`` of X."""
    rows = X[seeds]
    length = np.maximum(np.diff(rows.indptr), 1)
    weight = np.minimum(_SEED_WEIGHT, _SEED_EVIDENCE / length)
    return (rows.multiply(weight[:, None])).toarray().T


# init="k-means++" picks its seed rows among a uniform subsample of this many
# rows (or of 2 K if larger): the seeding costs O(rows K log K nnz_per_row),
# 0.13 s for K = 150 on the 5,485 R8 training documents.
_SPREAD_ROWS = 10_000


def _spread_seeds(X, n_seeds, rng):
    """Indices of ``n_seeds`` rows of X spread over the data, by k-means++.

    k-means++ seeding (Arthur and Vassilvitskii, SODA 2007; scikit-learn's
    :func:`~sklearn.cluster.kmeans_plusplus`) on the rows scaled to unit
    Euclidean norm: a row far from the seeds already chosen is likely to be
    the next one, so the seeds start on different groups of rows rather than
    on near-duplicates in the largest group. Among a uniform subsample of at
    most max(_SPREAD_ROWS, 2 n_seeds) rows; with no more rows than seeds,
    the seeds are drawn uniformly (with replacement if fewer).
    """
    n_samples = X.shape[0]
    if n_samples <= n_seeds:
        return rng.choice(n_samples, size=n_seeds, replace=n_samples < n_seeds)
    candidates = np.arange(n_samples)
    cap = max(_SPREAD_ROWS, 2 * n_seeds)
    if n_samples > cap:
        candidates = np.sort(rng.choice(n_samples, size=cap, replace=False))
    rows = normalize(sp.csr_matrix(X[candidates], dtype=np.float64))
    _, chosen = kmeans_plusplus(rows, n_seeds, random_state=rng.randint(2**31 - 1))
    return candidates[chosen]


# init="cooccurrence": the candidate seed features are those active in at
# least max(_SEED_MIN_ROWS, _SEED_MIN_SHARE n) of the n rows read (and not in
# every row); k-means++ spreads them on a random projection of their
# co-occurrence profiles to _PROFILE_DIMS dimensions (exact profiles when there
# are no more features than that). 0.15 s for K = 150 on the 5,048 Reuters
# bodies, 5,142 words.
_SEED_MIN_ROWS = 5
_SEED_MIN_SHARE = 0.002
_PROFILE_DIMS = 256


def _cooccurrence_seeds(X, n_seeds, rng):
    """Dense (n_features, n_seeds) seed weights from feature co-occurrence.

    Reads a uniform subsample of at most ``_SPREAD_ROWS`` rows of the binary
    CSR matrix X. The profile of feature j is its lift over every feature i,
    ``(P(x_i | x_j) - P(x_i)) / (1 - P(x_i))``: 1 for j itself and for a
    feature always on with j, 0 for one independent of j. k-means++ seeding
    (:func:`~sklearn.cluster.kmeans_plusplus`) on the profiles scaled to unit
    norm (through a :class:`~sklearn.random_projection.SparseRandomProjection`
    when there are more than ``_PROFILE_DIMS`` features) picks ``n_seeds``
    candidate features (see ``_SEED_MIN_ROWS``) that co-occur with different
    groups of features. Seed k puts weight ``_SEED_WEIGHT`` times the positive
    part of the lift of its feature on every feature, scaled down to at most
    ``_SEED_EVIDENCE`` nats in all, as ``_seed_weights`` caps a seed row: the
    cause starts on the features that come with its seed feature rather than
    on one row. When fewer features are candidates than seeds are asked for,
    the rest are seed rows drawn uniformly (``_seed_weights``).
    """
    n_samples, n_features = X.shape
    rows = np.arange(n_samples)
    if n_samples > _SPREAD_ROWS:
        rows = np.sort(rng.choice(n_samples, size=_SPREAD_ROWS, replace=False))
    Xs = sp.csr_matrix(X[rows], dtype=np.float64)
    n = Xs.shape[0]
    count = np.asarray(Xs.sum(axis=0)).ravel()
    freq = count / n
    room = np.maximum(1.0 - freq, 1.0 / n)  # 1 - P(x_i), > 0 for the always-on
    varying = (count > 0) & (count < n)
    candidates = np.flatnonzero(varying & (count >= max(_SEED_MIN_ROWS,
                                                        _SEED_MIN_SHARE * n)))
    if candidates.size < n_seeds:
        candidates = np.flatnonzero(varying)
    n_words = min(n_seeds, candidates.size)
    weights = np.zeros((n_features, n_seeds))
    if n_words:
        Xc = Xs[:, candidates].tocsc()
        scaled = sp.csr_matrix(Xs.multiply(1.0 / room[None, :]))
        if n_features <= _PROFILE_DIMS:
            profile = (Xc.T @ scaled).toarray() / count[candidates, None]
            profile -= freq / room
        else:
            projection = SparseRandomProjection(
                _PROFILE_DIMS, dense_output=True, random_state=rng.randint(2**31 - 1))
            projected = projection.fit_transform(scaled)
            profile = Xc.T @ projected / count[candidates, None]
            profile -= projection.transform((freq / room)[None, :])
        _, chosen = kmeans_plusplus(normalize(profile), n_words,
                                    random_state=rng.randint(2**31 - 1))
        words = candidates[chosen]
        together = (Xs[:, words].T @ Xs).toarray() / count[words, None]
        lift = np.maximum(together - freq, 0.0) / room
        total = _SEED_WEIGHT * lift.sum(axis=1)
        scale = _SEED_WEIGHT * np.minimum(
            1.0, _SEED_EVIDENCE / np.maximum(total, 1e-300))
        weights[:, :n_words] = (lift * scale[:, None]).T
    if n_words < n_seeds:
        missing = n_seeds - n_words
        extra = rng.choice(n_samples, size=missing, replace=n_samples < missing)
        weights[:, n_words:] = _seed_weights(X, extra)
    return weights


def _release_free_bits(g_logit_q, logit_q, logit_prior, free_bits):
    r"""Free bits: drop the KL gradient of the causes under ``free_bits``, in place.

    ``g_logit_q`` (B, K) is the gradient of the summed ELBO of a minibatch
    with respect to the posterior logits ``logit_q`` (B, K); its KL part is
    :math:`-\partial \mathrm{KL}_{bk} / \partial l_{bk} = -q(1 - q)(l - c)`
    with :math:`l` = ``logit_q``, :math:`c` = ``logit_prior`` (K,). For every
    cause whose KL averaged over the B rows is below ``free_bits`` (nats)
    that part is added back where it pulls a logit down (:math:`l > c`), so
    that switching the cause on costs no KL while the pull up towards the
    prior stays: the KL term of those causes becomes
    :math:`\mathrm{KL}_{bk} [l_{bk} < c_k]`, continuous with its derivative
    at :math:`l = c`. A one-sided variant of free bits (Kingma et al.,
    NeurIPS 2016), whose two-sided form lets the posteriors of the released
    causes fall to 0 and empties rare causes on short documents (User Guide,
    "Keeping causes in use"). Returns the boolean mask (K,) of the causes released.
    """
    q = expit(logit_q)
    diff = logit_q - logit_prior
    # _math.kl_bernoulli_logits (a Numba scalar), on the whole (B, K) array
    kl = q * diff - np.logaddexp(0.0, logit_q) + np.logaddexp(0.0, logit_prior)
    free = kl.mean(axis=0) < free_bits
    if free.any():
        # only the pull towards "off" (logit above the prior's) is released
        g_logit_q[:, free] += (q[:, free] * (1.0 - q[:, free])) * np.maximum(
            diff[:, free], 0.0)
    return free


def _softplus_inverse(y):
    return y + np.log(-np.expm1(-y))


def _csr_arrays(X):
    """CSR structure as int64 arrays: the one signature every kernel compiles for."""
    return X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int64, copy=False)


# "svi": step size of the damped natural-gradient (mean-field) steps on a row's
# logits (1 would be the parallel mean-field update, which can oscillate), and
# the largest logit change at which transform stops iterating a row.
_LOCAL_STEP = 0.5
_LOCAL_TOL = 1e-4
# A cause whose prior probability ends below this value is unused (not counted
# in n_active_components_); in the first _REVIVAL_EPOCHS epochs of the model
# it is re-seeded (NoisyORFactorizer._revive_unused_causes). The schedule
# counts the model's epochs, not max_iter: fit(max_iter=2) and a warm start
# for 2 more epochs revive as fit(max_iter=4) does.
_DEAD_PRIOR = 0.01
_REVIVAL_EPOCHS = 5

# Advanced settings (User Guide, "Advanced settings"). Module constants, read
# at every fit, transform and score: tests patch them with monkeypatch.setattr.
#
# Activation of the encoder's hidden layers: "relu" or "tanh".
_ACTIVATION = "relu"
# Binary Concrete relaxation: the temperature at epoch t (counted from 0 over
# the calls to fit/partial_fit since the last fit) is
# max(_MIN_TEMPERATURE, _TEMPERATURE * exp(-_TEMPERATURE_DECAY * t)).
_TEMPERATURE = 0.5
_MIN_TEMPERATURE = 0.2
_TEMPERATURE_DECAY = 0.05
# "svi": natural-gradient steps on a minibatch row's logits per visit in fit;
# "jj": E-step sweeps per row and EM iteration.
_N_LOCAL_STEPS = 5
# "svi" and "jj": most local steps (E-step sweeps) on a new row in transform,
# score and score_samples (and on the rows of a partial_fit chunk, "svi").
_N_TRANSFORM_STEPS = 50
# "acp" and "avi": local mean-field steps from the encoder's logits in
# transform, score and score_samples (semi-amortized inference; 0: the
# encoder's output alone).
_N_REFINE_STEPS = 5
# "acp" and "avi", by inference method: local mean-field steps from the
# encoder's logits of every minibatch row in fit (semi-amortized training),
# and one-sided free bits in nats per row and cause. "avi" trains with 1 step
# and 0.02 nats, which together keep more of its causes in use; "acp" needs
# neither. "svi" and "jj" use neither.
_FIT_REFINE_STEPS = {"acp": 0, "avi": 1}
_FREE_BITS = {"acp": 0.0, "avi": 0.02}
# "jj": relative gain of the bound below which a row's E-step stops in transform
_JJ_TOL = 1e-10

# Cost of one delayed Adam update of an entry of theta (softplus, moments,
# streaming five (n_features, K) arrays) in units of one multiply-add of the
# ELBO kernel: measured ~21 ns against ~2.7 ns on the development machine with
# the C library's exp and log1p. The vectorized softplus (skbinvi._math.
# softplus_sigmoid) brought the update to ~14 ns against ~4 ns, but the
# constant stays: with the re-measured 3.5 the window falls from 2 to 1 on
# corpora of about 800 documents (K >= 100, or "avi"), which in 12 fits on two
# such corpora (K = 100 and 150, seeds 0 and 1) raised the test ELBO in 9 but
# lowered the accuracy of the features in 8, in the same fit time.
_DELAYED_UPDATE_COST = 8.0


def _update_window(estimator, nnz_per_batch, n_batches):
    """Minibatches between the delayed updates of theta and the leak.

    A delayed update touches every row of theta and the leak: n_features *
    (K + 1) entries, each costing about ``_DELAYED_UPDATE_COST`` multiply-adds.
    A minibatch costs about nnz_per_batch * (M K + P) multiply-adds, with
    P = K + 1 + H_1 (+ H_last + 1 for "acp") parameters per active feature
    ("svi": P = K + 1, plus M K per local step).
    The window is the smallest number of minibatches whose work is at least
    one delayed update, so the delayed updates at most double the cost of an
    epoch, which stays proportional to nnz. It is 1 (every row of theta and
    the leak updated at every step) whenever a minibatch does more work than
    a full update (Reuters headlines and bodies), and grows on wide, sparse
    data; the end of an epoch always applies the delayed updates.
    """
    K = estimator.n_components
    M = estimator.n_mc_samples
    if estimator.inference == "svi":
        # no encoder; each visit also runs _N_LOCAL_STEPS local sweeps
        n_per_row = K + 1
        per_nnz = M * K * (1 + _N_LOCAL_STEPS) + n_per_row
    else:
        sizes = estimator._hidden_sizes()
        n_per_row = K + 1 + sizes[0]
        if estimator.inference == "acp":
            n_per_row += sizes[-1] + 1
        per_nnz = M * K + n_per_row
    batch_work = max(nnz_per_batch, 1.0) * per_nnz
    update_work = _DELAYED_UPDATE_COST * estimator.n_features_in_ * (K + 1)
    return max(1, min(int(np.ceil(update_work / batch_work)), n_batches))


class NoisyORFactorizer(ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                        BaseVariational):
    r"""Noisy-OR factor model of binary data with amortized variational inference.

    The model [1]_ explains each binary row x (a document's word presence, a
    binarized image) by K binary latent causes and an always-on leak:

    .. math::

        z_k \sim \mathrm{Bernoulli}(\mu_k), \qquad
        p(x_i = 0 \mid z) = \exp\Big(-\theta_{i0} - \sum_{k=1}^K \theta_{ik} z_k\Big),

    where :math:`\theta_{ik} \ge 0` is the weight of cause k on feature i
    (``components_``), :math:`\theta_{i0} \ge 0` the leak (``leak_``) and
    :math:`\mu_k` the prior probability of cause k (``prior_``). The
    parameters are learned by maximizing the evidence lower bound (ELBO)

    .. math::

        \mathcal{L}(x) = \mathbb{E}_q\Big[\sum_{i: x_i = 1}
            \log\big(1 - e^{-\theta_{i0} - \sum_k \theta_{ik} z_k}\big)\Big]
            - \sum_{i: x_i = 0}\Big(\theta_{i0} + \sum_k \theta_{ik} q_k\Big)
            - \sum_k \mathrm{KL}\big(\mathrm{Bern}(q_k) \,\|\, \mathrm{Bern}(\mu_k)\big)

    under a factorized posterior :math:`q(z \mid x) = \prod_k
    \mathrm{Bern}(q_k)`. The ``inference`` methods differ in how q is
    computed:

    - ``"acp"`` (amortized conjugate posterior, [1]_ supplement Eq. 5): an
      encoder network outputs the dual variables :math:`\psi_i > 0` of the
      Jaakkola-Jordan bound :math:`\log(1 - e^{-u}) \le \psi u - g(\psi)` at
      the active features, and :math:`q_k = \sigma\big(\sum_{i: x_i=1}
      \psi_i \theta_{ik} - \sum_{i: x_i=0} \theta_{ik} + \operatorname{logit}
      \mu_k\big)`;
    - ``"avi"`` (amortized VI): the encoder outputs
      :math:`\operatorname{logit} q_k` directly;
    - ``"svi"`` (stochastic VI): every row has free logits, optimized with
      the model fixed by damped mean-field (natural-gradient) steps; no
      encoder;
    - ``"jj"``: variational EM on the Jaakkola-Jordan lower bound ([3]_,
      [4]_; LB-CDI in [1]_). One ``max_iter`` iteration is one E-step and one
      M-step on all the rows, and the bound never decreases. No minibatches,
      learning rate or ``partial_fit``; an iteration costs far more than an
      epoch of the other methods. The paper's baseline.

    The encoder of "acp" and "avi" reads the binary row scaled to unit
    Euclidean norm. In :meth:`transform` and :meth:`score` its logits are the
    start of a few local mean-field steps (semi-amortized inference [7]_); a
    row keeps the refined logits only if they raise its ELBO. "svi" and "jj"
    optimize each new row's posterior with the model fixed. Either way the
    result for a row is deterministic and does not depend on the other rows.

    "acp", "avi" and "svi" train as [1]_ Algorithm 1: minibatches, Adam, and
    ``n_mc_samples`` binary-Concrete (Gumbel-softmax) relaxed samples [2]_ of
    z per row, with a temperature that decays over the epochs; the gradients
    are derived by hand and run in Numba kernels. "avi" also trains
    semi-amortized (one local step per row [6]_ [7]_) with one-sided free
    bits [5]_. The fixed settings of these procedures are listed in the User
    Guide, "Advanced settings".

    Read more in the :ref:`User Guide <noisy_or>`.

    Parameters
    ----------
    n_components : int, default=50
        Number of latent causes K.
    inference : {"acp", "avi", "svi", "jj"}, default="acp"
        Inference method (see above). "acp" is the default; "avi" and "svi"
        are alternatives worth comparing with :meth:`score` on held-out rows;
        "jj" is slow on long documents.
    init : {"data", "k-means++", "cooccurrence"}, default="data"
        Initialization of the weights theta. All start from small random
        weights (column sums of order one) and a leak that explains each
        feature's frequency alone. "data": each cause also gets weight
        min(0.3, 3 / m) on the m active features of a random training row
        (at most 3 nats of evidence in all). "k-means++": as "data", with the
        seed rows chosen by k-means++ [8]_ on the rows scaled to unit norm
        (among at most 10,000 rows), so that they start on different groups
        of rows. "cooccurrence": each cause starts on a seed feature j and
        the features that come with it, with weight 0.3 times their lift
        max(P(x_i | x_j) - P(x_i), 0) / (1 - P(x_i)), scaled to at most 3
        nats in all; the seed features are chosen by k-means++ on the
        features' co-occurrence profiles. Which start is best depends on the
        data: compare them on held-out rows with :meth:`score`.
    hidden_layer_sizes : array-like of int, default=(100,)
        Sizes of the encoder's hidden layers (at least one); not used by
        "svi" and "jj". The first layer costs O(H) per active feature: with
        ``n_components`` of 50 or less, ``(n_components,)`` makes "acp"
        faster.
    n_mc_samples : int, default=3
        Monte Carlo samples of z per row and step: relaxed samples in
        training (M in [1]_, who use 10), exact samples in the local steps
        ("svi", and the refinement of "acp" and "avi").
    batch_size : int or "auto", default="auto"
        Rows per minibatch (clipped to the number of rows). "auto" is
        ``min(128, max(32, n_samples // 16))``: at least 16 Adam steps per
        epoch on small data sets, and on large ones minibatches small enough
        that the default 10 epochs take many steps (User Guide, noisy-OR,
        "Training"). Not used by "jj".
    learning_rate : float, default=3e-2
        Step size of Adam. A ``warm_start`` fit or a later ``partial_fit``
        uses the value set now, with the Adam moments of the fit before. Not
        used by "jj".
    max_iter : int, default=10
        Number of epochs (EM iterations for "jj"). With the default
        ``tol=None`` a fixed budget, as the passes of
        :class:`~sklearn.decomposition.LatentDirichletAllocation`, chosen
        for the time of a fit: the held-out ELBO keeps rising for tens of
        epochs, and the features change with it (User Guide, "More
        epochs"). Raise it for a better density model (with
        ``early_stopping=True``); for a classifier, compare values by
        cross-validation.
    tol : float or None, default=None
        Tolerance in nats per row. Training stops when the monitored ELBO
        (training, or validation with ``early_stopping``) has not improved
        on its best by more than ``tol`` for ``n_iter_no_change``
        consecutive epochs; a ``ConvergenceWarning`` is issued if that does
        not happen within ``max_iter`` epochs. None: no convergence test
        (``converged_`` is False), except that early stopping then uses a
        tolerance of 0.
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping (not used with
        ``tol=None`` without early stopping).
    n_init : int, default=1
        Number of initializations; the run with the highest final training
        ELBO (``elbo_``) is kept, as in
        :class:`~sklearn.mixture.GaussianMixture`. Restarts are the remedy
        for local optima such as two causes merged into one.
    warm_start : bool, default=False
        If True, :meth:`fit` continues from the fitted model (parameters,
        optimizer state, temperature schedule) instead of initializing;
        ``n_init`` is then ignored. With "acp" and "avi", 2 epochs then a
        warm fit of 2 more give the numbers of one fit of 4 epochs. "svi"
        and "jj" start the training rows' posteriors again from the prior.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows, monitor their ELBO
        after every epoch, stop when it has not improved by ``tol`` (0 with
        ``tol=None``) for ``n_iter_no_change`` epochs, and keep the
        parameters of the best epoch. Each epoch then also scores the
        held-out rows; use it with a larger ``max_iter``.
    validation_fraction : float, default=0.1
        Fraction of rows held out when early stopping is used.
    binarize : float or None, default=0.0
        Values of X strictly greater than ``binarize`` count as 1, the others
        as 0 (as in :class:`~sklearn.naive_bayes.BernoulliNB`), so counts or
        tf-idf weights become presence/absence. With None, X must contain
        only 0 and 1. Negative values are always an error.
    prior_smoothing : float, default=0.003
        Additive smoothing :math:`a` of the causes' priors, in
        pseudo-documents per document: ``fit`` maximizes the ELBO plus
        :math:`a \sum_k \log \mu_k` per row (the MAP estimate under a
        :math:`\mathrm{Beta}(1 + a N, 1)` prior for N rows), so the optimum
        of a prior is :math:`(\bar q_k + a) / (1 + a) \ge a / (1 + a)`. It
        keeps rare causes from being switched off. 0 is maximum likelihood.
        ``elbo_``, :meth:`score` and the validation ELBO are the ELBO alone.
    n_elbo_samples : int, default=100
        Exact samples of q per row used to estimate the ELBO in
        :meth:`score`, :meth:`score_samples`, :meth:`elbo`, ``elbo_`` and the
        validation ELBO (100 in [1]_).
    posterior : {"scaled_logit", "logit", "probability"}, default="scaled_logit"
        What :meth:`transform` returns. "logit": the posterior logits
        :math:`\operatorname{logit} q(z_k = 1 \mid x)`. "scaled_logit": the
        same logits divided by one number learned in :meth:`fit`,
        ``logit_scale_`` (their standard deviation over the training rows, at
        least 1), so that every feature keeps its sign and its ratio to the
        others while the whole set comes to unit scale. "probability": the
        probabilities :math:`q(z_k = 1 \mid x)`. On long documents the
        posterior is confident and the probabilities are 0 or 1 to double
        precision, so the logits are the better input for a linear
        classifier; their scale (tens of nats) weakens a classifier's
        default regularization, which "scaled_logit" restores (User Guide,
        "Practical tips").
    random_state : int, RandomState instance or None, default=None
        Controls the initialization, the minibatch order, the Monte Carlo
        noise and the common random numbers of :meth:`score_samples`. Pass an
        int for reproducible results. See :term:`Glossary <random_state>`.
    verbose : int, default=0
        If positive, print the training ELBO (and the validation ELBO with
        early stopping) and the elapsed time after every epoch, then the
        number of causes in use.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Weights theta_ik >= 0 of the causes (``components_[k, i]`` is
        theta_ik of [1]_); a read-only view of the fitted weights.
    leak_ : ndarray of shape (n_features,)
        Leak weights theta_i0 >= 0.
    prior_ : ndarray of shape (n_components,)
        Prior probabilities mu_k of the causes.
    logit_scale_ : float
        The divisor of the logits of ``posterior="scaled_logit"``: the
        standard deviation of the posterior logits (as :meth:`transform`
        computes them) of the training rows at the end of :meth:`fit`, over
        all rows and causes, or 1 if that is smaller. :meth:`partial_fit`
        pools the rows of all its calls, each row's logits computed after
        its call's epoch; a :meth:`fit` starts afresh.
    n_active_components_ : int
        Number of causes in use: those with a prior above 0.01. The others
        were switched off by the fit (the data do not need them); lower
        ``n_components`` to that number for a smaller model. Updated by
        :meth:`partial_fit` too.
    elbo_ : float
        ELBO of the training rows at the end of :meth:`fit`, nats per row:
        ``score`` of the rows trained on (without the validation rows; for
        the kept run when ``n_init > 1``; not updated by
        :meth:`partial_fit`).
    elbo_history_ : ndarray of shape (`n_iter_`,)
        Mean ELBO per training row in nats for every epoch, estimated along
        the way with one exact sample of q per row and step. For "jj", the
        mean Jaakkola-Jordan bound per row after every EM iteration
        (non-decreasing, below the ELBO).
    validation_scores_ : ndarray of shape (`n_iter_`,) or None
        Validation ELBO (nats per row) after every epoch when early stopping
        was used, else None; NaN for epochs without one.
    best_validation_score_ : float or None
        Best value of ``validation_scores_``, else None.
    n_iter_ : int
        Number of epochs run.
    converged_ : bool
        Whether the stopping rule (``tol``, ``n_iter_no_change``) was met
        before ``max_iter`` epochs; always False with ``tol=None`` and no
        early stopping.
    encoder_coefs_ : list of ndarray
        Encoder weights: the hidden layers, shape (fan_in, fan_out) each, then
        the output layer, shape (hidden_layer_sizes[-1], n_components) for
        "avi", or (n_features, hidden_layer_sizes[-1]) for "acp" (stored
        transposed so that the rows of active features are contiguous).
    encoder_intercepts_ : list of ndarray
        Encoder intercepts, one per layer (the "acp" output layer has one per
        feature). Both lists are empty for "svi" and "jj".
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    sklearn.decomposition.LatentDirichletAllocation : Topic model of counts.
    sklearn.neural_network.BernoulliRBM : Binary latent features with an
        undirected model.

    Notes
    -----
    **Cost.** With :math:`\sum_{i: x_i=0} \theta_{ik} = \sum_i \theta_{ik}
    - \sum_{i: x_i=1} \theta_{ik}`, the ELBO of a row and its gradient cost
    O(nnz(x) K M), not O(n_features K); a minibatch updates only the
    parameter rows of its active features, so an epoch costs O(nnz K M)
    plus O(n_features K).

    **Threads.** Large passes run on as many threads as
    ``NUMBA_NUM_THREADS``. The results are the same to the last bit with any
    number of threads, and a process that fitted a model can still ``fork``.

    **Units.** :meth:`score_samples` returns the ELBO of each row in nats,
    :meth:`score` its mean; both use ``n_elbo_samples`` exact samples of q
    with common random numbers fixed at fit time (deterministic).

    **Parametrization.** theta = softplus(a), theta_0 = softplus(b) and
    mu = sigmoid(c); Adam works on a, b, c and the encoder weights. (Eq. 4
    of the supplement of [1]_ drops an exp inside the bracket; the
    posterior, Eq. 5, used here, is right.)

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641.
    .. [2] E. Jang, S. Gu, B. Poole, "Categorical Reparameterization with
       Gumbel-Softmax", ICLR 2017.
    .. [3] T. Jaakkola, M. Jordan, "Variational probabilistic inference and
       the QMR-DT network", JAIR 10, 1999.
    .. [4] T. Singliar, M. Hauskrecht, "Noisy-OR component analysis and its
       application to link analysis", JMLR 7, 2006.
    .. [5] D. P. Kingma, T. Salimans, R. Jozefowicz, X. Chen, I. Sutskever,
       M. Welling, "Improved Variational Inference with Inverse
       Autoregressive Flow", NeurIPS 2016 (the "free bits" objective of
       its appendix).
    .. [6] R. G. Krishnan, D. Liang, M. D. Hoffman, "On the challenges of
       learning with inference networks on sparse, high-dimensional data",
       AISTATS 2018, PMLR 84:143-151.
    .. [7] Y. Kim, S. Wiseman, A. C. Miller, D. Sontag, A. M. Rush,
       "Semi-Amortized Variational Autoencoders", ICML 2018.
    .. [8] D. Arthur, S. Vassilvitskii, "k-means++: the advantages of careful
       seeding", SODA 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from skbinvi import NoisyORFactorizer
    >>> from skbinvi.datasets import make_noisy_or
    >>> X, truth = make_noisy_or(300, 40, 4, random_state=0)
    >>> model = NoisyORFactorizer(n_components=4, max_iter=20, random_state=0)
    >>> features = model.fit_transform(X)  # posterior logits / logit_scale_
    >>> features.shape
    (300, 4)
    >>> logits = model.set_params(posterior="logit").transform(X)
    >>> bool(np.allclose(features, logits / model.logit_scale_))
    True
    >>> Q = model.set_params(posterior="probability").transform(X)
    >>> bool(((Q >= 0) & (Q <= 1)).all())
    True
    """

    _structural_params = ("n_components", "inference", "hidden_layer_sizes")

    def _same_structure(self, name, now, fitted):
        if name == "hidden_layer_sizes" and self._fitted_structure.get(
                "inference") in ("svi", "jj"):
            return True  # no encoder: the layer sizes shape nothing
        return super()._same_structure(name, now, fitted)

    _parameter_constraints: dict = {
        **FIT_LOOP_CONSTRAINTS,
        "n_components": [IntInterval(1, None, closed="left")],
        "inference": [StrOptions({"acp", "avi", "svi", "jj"})],
        "init": [StrOptions({"data", "k-means++", "cooccurrence"})],
        "hidden_layer_sizes": ["array-like", IntInterval(1, None, closed="left")],
        "n_mc_samples": [IntInterval(1, None, closed="left")],
        "batch_size": [IntInterval(1, None, closed="left"),
                       StrOptions({"auto"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "binarize": [None, Interval(Real, 0, None, closed="left")],
        "prior_smoothing": [Interval(Real, 0, None, closed="left")],
        "n_elbo_samples": [IntInterval(1, None, closed="left")],
        "posterior": [StrOptions({"scaled_logit", "logit", "probability"})],
    }

    def __init__(
        self,
        n_components=50,
        *,
        inference="acp",
        init="data",
        hidden_layer_sizes=(100,),
        n_mc_samples=3,
        batch_size="auto",
        learning_rate=3e-2,
        max_iter=10,
        tol=None,
        n_iter_no_change=10,
        n_init=1,
        warm_start=False,
        early_stopping=False,
        validation_fraction=0.1,
        binarize=0.0,
        prior_smoothing=0.003,
        n_elbo_samples=100,
        posterior="scaled_logit",
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.inference = inference
        self.init = init
        self.hidden_layer_sizes = hidden_layer_sizes
        self.n_mc_samples = n_mc_samples
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.n_init = n_init
        self.warm_start = warm_start
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.binarize = binarize
        self.prior_smoothing = prior_smoothing
        self.n_elbo_samples = n_elbo_samples
        self.posterior = posterior
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _check_X(self, X, *, reset):
        X = validate_data(
            self, X, reset=reset, accept_sparse="csr", dtype=np.float64
        )
        return check_binary(X, binarize=self.binarize, whom=type(self).__name__)

    def _hidden_sizes(self):
        sizes = np.atleast_1d(np.asarray(self.hidden_layer_sizes))
        if (
            sizes.ndim != 1
            or sizes.size == 0
            or not np.issubdtype(sizes.dtype, np.integer)
            or np.any(sizes < 1)
        ):
            raise ValueError(
                "hidden_layer_sizes must be a non-empty sequence of positive "
                f"integers; got {self.hidden_layer_sizes!r}."
            )
        return [int(s) for s in sizes]

    # ------------------------------------------------------------------- init
    def _initialize(self, X, y, rng):
        """Set the initial parameters from the first training data X (binary CSR)."""
        n_samples, n_features = X.shape
        K = self.n_components
        # the encoder's layers: not used (nor checked) by "svi" and "jj"
        sizes = self._hidden_sizes() if self.inference in ("acp", "avi") else []
        # Leak: the marginal frequency of each feature, as if no cause were on.
        freq = np.asarray(X.sum(axis=0)).ravel() / n_samples
        freq = np.clip(freq, 1.0 / (n_samples + 1), 0.5)
        self._leak_raw = _softplus_inverse(-np.log1p(-freq))
        # Causes: small random weights with column sums of order one, so that
        # q is neither saturated on nor off for the first rows; with
        # init="data", cause k also starts with weight min(0.3, 3 / m) on the m
        # active features of a random training row (a seed, as k-means seeds on
        # data points; see _SEED_EVIDENCE); with init="k-means++" the seed
        # rows are chosen by k-means++ (_spread_seeds); with
        # init="cooccurrence" each cause starts on the features that come with
        # one seed feature (_cooccurrence_seeds).
        theta0 = rng.uniform(0.5, 1.5, size=(n_features, K)) / n_features
        if self.init == "data":
            seeds = rng.choice(n_samples, size=K, replace=n_samples < K)
            theta0 += _seed_weights(X, seeds)
        elif self.init == "k-means++":
            theta0 += _seed_weights(X, _spread_seeds(X, K, rng))
        elif self.init == "cooccurrence":
            theta0 += _cooccurrence_seeds(X, K, rng)
        self._theta_raw = _softplus_inverse(theta0)
        self._logit_prior = np.full(K, logit(min(0.5, 5.0 / K) if K > 1 else 0.5))
        fan_in = [n_features] + sizes[:-1] if sizes else []  # no encoder: []
        self.encoder_coefs_, self.encoder_intercepts_ = [], []
        for a, b in zip(fan_in, sizes, strict=True):
            coef, intercept = _encoder.init_layer(a, b, rng)
            self.encoder_coefs_.append(coef)
            self.encoder_intercepts_.append(intercept)
        if self.inference == "avi":
            coef, intercept = _encoder.init_layer(sizes[-1], K, rng)
            # q starts near the prior, as the ACP logits do
            intercept[:] = self._logit_prior
        elif self.inference == "acp":
            coef, intercept = _encoder.init_layer(sizes[-1], n_features, rng)
            coef = np.ascontiguousarray(coef.T)
            # psi starts near 1 (softplus(0.55) = 1): the neutral dual value.
            intercept = np.full(n_features, 0.55)
        if self.inference in ("acp", "avi"):
            self.encoder_coefs_.append(coef)
            self.encoder_intercepts_.append(intercept)
        # common random numbers of the local optimization of new rows ("svi")
        # and of the refinement of the encoder's output ("acp", "avi")
        self._local_uniforms = rng.random_sample((1, self.n_mc_samples, K))
        self._local_logits = self._jj_weights = None
        self._theta, self._theta_slope = np.empty_like(theta0), np.empty_like(theta0)
        self._leak, self._leak_slope = np.empty(n_features), np.empty(n_features)
        self._colsum, self._leak_sum = np.empty(K), np.empty(1)
        self._sync_constrained()
        self._optimizer = Adam(self._parameters(), learning_rate=self.learning_rate)
        self._last_update = np.zeros(n_features, dtype=np.int64)
        # scratch of _kernels.compact_columns (-1 everywhere between calls)
        self._column_marker = np.full(n_features, -1, dtype=np.int64)
        self._score_uniforms = rng.random_sample((self.n_elbo_samples, K))
        # common random numbers of the safeguard of the refinement (_refine)
        self._safeguard_uniforms = rng.random_sample((self.n_elbo_samples, K))
        self._epoch = 0

    def _parameters(self):
        """The arrays Adam updates, in the order of :meth:`_batch_gradients`."""
        return [
            self._theta_raw,
            self._leak_raw,
            self._logit_prior,
            *self.encoder_coefs_,
            *self.encoder_intercepts_,
        ]

    def _row_parameters(self):
        """Positions in :meth:`_parameters` of the arrays with one row per feature.

        Returns the softplus-parametrized ones (theta, leak) and the others
        (first encoder layer; with "acp" also the output layer and its
        intercepts).
        """
        n_layers = len(self.encoder_coefs_)
        if self.inference in ("svi", "jj"):
            return [0, 1], []
        others = [3]
        if self.inference == "acp":
            others += [2 + n_layers, 2 + 2 * n_layers]
        return [0, 1], others

    def _sync_constrained(self):
        """Recompute theta, the leak, their slopes and column sums from the raw
        parameters.

        O(n_features K); needed after the raw parameters are set directly
        (initialization, restoring the best epoch, tests).
        """
        for raw, value, slope in ((self._theta_raw, self._theta, self._theta_slope),
                                  (self._leak_raw, self._leak, self._leak_slope)):
            _kernels.softplus_and_slope(raw.reshape(-1), value.reshape(-1),
                                        slope.reshape(-1))
        self._sync_column_sums()

    def _set_public_parameters(self):
        self.leak_ = self._leak.copy()
        self.prior_ = expit(self._logit_prior)

    # --------------------------------------------------------------- encoder
    def _encode(self, X, indptr, indices, theta, head=None):
        """Posterior logits for a binary CSR batch, and what backprop needs.

        ``indptr``, ``indices`` are the int64 CSR arrays of X, or of X with
        its columns renumbered to the rows of compact arrays: ``theta`` and
        ``head`` (the ACP output layer's weights and intercepts, by default
        the full ones) are indexed by ``indices``. The hidden layers always
        read X itself. Returns ``logit_q`` (B, K) and a cache tuple.
        """
        n_hidden = len(self.encoder_coefs_) - 1
        hidden = _encoder.forward(
            _encoder.normalize_rows(X, indptr),
            self.encoder_coefs_[:n_hidden],
            self.encoder_intercepts_[:n_hidden],
            _ACTIVATION,
        )
        if self.inference == "avi":
            logits = hidden[-1] @ self.encoder_coefs_[-1] + self.encoder_intercepts_[-1]
            return logits, (hidden, None, None)
        coef_out, intercept_out = head or (self.encoder_coefs_[-1],
                                           self.encoder_intercepts_[-1])
        pre = np.empty(indices.shape[0])
        psi = np.empty(indices.shape[0])
        _kernels.acp_psi_rows(indptr, indices, hidden[-1], coef_out, intercept_out, pre,
                              psi)
        logit_q = np.empty((X.shape[0], self.n_components))
        _kernels.acp_logits_rows(indptr, indices, psi, theta, self._colsum,
                                 self._logit_prior, logit_q)
        return logit_q, (hidden, pre, psi)

    def _batch_columns(self, X):
        """The compact columns of a minibatch: its active features and their rows.

        Returns ``indptr`` (int64), ``features`` (the A active features,
        sorted, int64), ``local`` (the CSR column indices renumbered to
        0..A-1), the rows of theta and the leak of those features, and for
        "acp" the rows of the encoder's output layer (else None).
        """
        indptr = X.indptr.astype(np.int64, copy=False)
        features, local = _kernels.compact_columns(X.indices, self._column_marker)
        head = None
        if self.inference == "acp":
            head = (self.encoder_coefs_[-1][features],
                    self.encoder_intercepts_[-1][features])
        return (indptr, features, local, self._theta[features], self._leak[features],
                head)

    def _fit_refine_steps(self):
        """Local steps per minibatch row in training (``_FIT_REFINE_STEPS``:
        1 for "avi", 0 for "acp"); 0 for "svi" and "jj", which have no encoder."""
        if self.inference not in ("acp", "avi"):
            return 0
        return _FIT_REFINE_STEPS[self.inference]

    def _free_bits(self):
        """Free bits in nats (``_FREE_BITS``: 0.02 for "avi", 0 for "acp"); 0
        for "svi" and "jj"."""
        if self.inference not in ("acp", "avi"):
            return 0.0
        return float(_FREE_BITS[self.inference])

    def _batch_gradients(self, X, uniforms, temperature, logit_q=None,
                         refine_uniforms=None):
        """Relaxed ELBO gradients of one minibatch (sum over its rows), row-sparse.

        Only the A features active in the batch get a row of gradient: the
        cost is O(nnz K M + nnz H), independent of n_features.

        Parameters
        ----------
        X : csr_matrix of shape (B, n_features), binary
        uniforms : ndarray of shape (B, n_mc_samples, n_components)
            Uniform draws in (0, 1) for the logistic noise of the relaxed
            samples.
        temperature : float
        logit_q : ndarray of shape (B, n_components), optional
            "svi": the rows' free logits (held fixed; no gradient is returned
            for them). The amortized methods compute them with the encoder.
        refine_uniforms : ndarray of shape (B, n_mc_samples, n_components), optional
            Amortized methods: uniform draws for :meth:`_fit_refine_steps`
            local steps from the encoder's logits (semi-amortized training).
            The encoder then gets the gradient at its own logits, and theta,
            the leak and the prior the gradient at the refined ones; the
            returned ELBOs are those of the refined logits. None (or no
            steps): every gradient at the encoder's logits.

        Returns
        -------
        features : ndarray of shape (A,), int64
            The active features, sorted.
        grads : list of ndarray
            Gradients of the summed relaxed ELBO, in the order of
            :meth:`_parameters`. The arrays with one row per feature (see
            :meth:`_row_parameters`) get only the rows of ``features``
            (shape (A, ...)); theta and the leak get the gradient with respect
            to their value (not the raw parameter), without the dense part.
        g_theta_dense : ndarray of shape (n_components,)
            Dense part of the theta gradient, received by every feature;
            the leak's dense part is ``-B`` for every feature.
        elbo_relaxed, elbo_discrete : ndarray of shape (B,)
            Relaxed ELBO and one-sample true ELBO estimate of every row.
        """
        B = X.shape[0]
        K = self.n_components
        indptr, features, local, theta, leak, head = self._batch_columns(X)
        g_theta = np.empty_like(theta)
        g_leak = np.empty_like(leak)
        g_theta_dense = np.empty(K)
        g_logit_q = np.empty((B, K))
        g_logit_prior = np.empty(K)
        elbo_relaxed = np.empty(B)
        elbo_discrete = np.empty(B)
        model_logit_q = logit_q
        if self.inference != "svi":
            logit_q, (hidden, pre, psi) = self._encode(X, indptr, local, theta, head)
            if not np.isfinite(logit_q).all():
                # the last steps broke the encoder (or the ACP weights): stop
                # here, before NaN reaches the gradients and the free-bits KL
                self._raise_diverged("encoder's posterior logits became non-finite",
                                     self._epoch + 1)
            model_logit_q = logit_q
            n_steps = self._fit_refine_steps() if refine_uniforms is not None else 0
            if n_steps > 0:
                # semi-amortized training: the encoder's gradient at its own
                # logits (the row pass alone), the model's at the refined ones
                _kernels.relaxed_elbo_logit_grad_rows(
                    indptr, local, theta, leak, self._colsum, self._leak_sum[0],
                    logit_q, self._logit_prior, uniforms, temperature, g_logit_q,
                    elbo_relaxed, elbo_discrete)
                model_logit_q = logit_q.copy()
                _kernels.local_optimize_rows(
                    indptr, local, theta, leak, self._colsum, self._logit_prior,
                    refine_uniforms, n_steps, _LOCAL_STEP, 0.0, model_logit_q)
        g_model_logit_q = g_logit_q if model_logit_q is logit_q else np.empty((B, K))
        _kernels.relaxed_elbo_grad_rows(
            indptr, local, theta, leak, self._colsum, self._leak_sum[0],
            model_logit_q, self._logit_prior, uniforms, temperature, g_theta,
            g_leak, g_theta_dense, g_model_logit_q, g_logit_prior, elbo_relaxed,
            elbo_discrete,
        )
        if self.prior_smoothing > 0:
            # d/d logit(mu) of B * a * sum_k log mu_k (the Beta prior's share)
            g_logit_prior += B * self.prior_smoothing * expit(-self._logit_prior)
        if self.inference == "svi":
            grads = [g_theta, g_leak, g_logit_prior]
            return features, grads, g_theta_dense, elbo_relaxed, elbo_discrete
        free_bits = self._free_bits()
        if free_bits > 0:
            _release_free_bits(g_logit_q, logit_q, self._logit_prior, free_bits)
        encoder_grads = self._encoder_backward(
            X, indptr, local, features.shape[0], g_logit_q, (hidden, pre, psi),
            head, theta, g_theta, g_theta_dense, g_logit_prior)
        grads = [g_theta, g_leak, g_logit_prior, *encoder_grads]
        return features, grads, g_theta_dense, elbo_relaxed, elbo_discrete

    def _encoder_backward(self, X, indptr, local, n_active, g_logit_q, cache, head,
                          theta, g_theta, g_theta_dense, g_logit_prior):
        """Back-propagate d/d logit_q of a batch through the encoder.

        ``cache`` and ``head`` are those of :meth:`_encode` on the compact
        columns ``local`` of the ``n_active`` features active in the batch.
        With "acp" the logits also depend on theta and the prior: their share
        is added to ``g_theta``, ``g_theta_dense`` and ``g_logit_prior`` (in
        place). Returns the gradients of the encoder's coefficients then
        intercepts, in the order of :meth:`_parameters` (rows of the active
        features for the per-feature layers).
        """
        hidden, pre, psi = cache
        if self.inference == "avi":
            coef_out = self.encoder_coefs_[-1]
            g_coef_out = hidden[-1].T @ g_logit_q
            g_intercept_out = g_logit_q.sum(axis=0)
            g_hidden = g_logit_q @ coef_out.T
        else:
            coef_out = head[0]
            g_coef_out = np.empty_like(coef_out)
            g_intercept_out = np.empty(coef_out.shape[0])
            g_hidden = np.empty_like(hidden[-1])
            _kernels.acp_backward_rows(
                indptr, local, g_logit_q, psi, pre, theta, hidden[-1], coef_out,
                g_theta, g_theta_dense, g_coef_out, g_intercept_out, g_hidden,
            )
            g_logit_prior += g_logit_q.sum(axis=0)
        n_hidden = len(self.encoder_coefs_) - 1
        # the first layer's gradient X.T @ delta, on the active features only
        X_local = sp.csr_matrix(
            (_encoder.normalize_rows(X, indptr).data, local, indptr),
            shape=(X.shape[0], n_active),
        )
        g_coefs, g_intercepts = _encoder.backward(
            X_local, hidden, self.encoder_coefs_[:n_hidden], g_hidden, _ACTIVATION
        )
        return [*g_coefs, g_coef_out, *g_intercepts, g_intercept_out]

    def _full_gradients(self, X, uniforms, temperature, logit_q=None,
                        refine_uniforms=None):
        """Dense gradients of the summed relaxed ELBO with respect to every parameter.

        Same order and shapes as :meth:`_parameters` (raw parameters: the
        softplus slopes applied). O(n_features (K + H)): a reference for the
        row-sparse :meth:`_batch_gradients`, used by the tests.
        """
        features, grads, g_theta_dense, *elbos = self._batch_gradients(
            X, uniforms, temperature, logit_q, refine_uniforms)
        full = []
        softplus_rows, other_rows = self._row_parameters()
        for i, (param, grad) in enumerate(zip(self._parameters(), grads, strict=True)):
            if i in softplus_rows or i in other_rows:
                expanded = np.zeros_like(param)
                expanded[features] = grad
                grad = expanded
            full.append(grad)
        full[0] = (full[0] + g_theta_dense) * self._theta_slope
        full[1] = (full[1] - X.shape[0]) * self._leak_slope
        return full, *elbos

    # --------------------------------------------------------------- training
    def _batch_size(self, n_samples):
        """Rows per minibatch of an epoch over n_samples rows (at most n_samples)."""
        if self.batch_size == "auto":
            return min(128, max(32, n_samples // 16), n_samples)
        return min(self.batch_size, n_samples)

    def _temperature(self):
        tau = _TEMPERATURE * np.exp(-_TEMPERATURE_DECAY * self._epoch)
        return max(_MIN_TEMPERATURE, tau)

    def _run_epoch(self, X, rng):
        """One pass over X in shuffled minibatches; returns the mean true ELBO.

        For "jj", one iteration of variational EM instead (:meth:`_em_iteration`).

        At each minibatch Adam updates the small parameters and the rows of
        the per-feature parameters (theta, the leak, the encoder's
        per-feature layers) of the features active in it. The encoder rows of
        the other features have a zero gradient and are skipped (lazy Adam,
        as PyTorch's ``SparseAdam``). Theta and the leak have a dense gradient
        part that every feature receives; the rows not updated get it every
        ``window`` minibatches and at the end of the epoch, as one Adam step
        with the sum of the parts they missed, which is exact because their
        parameters did not move in the meantime (see :func:`_update_window`).
        """
        if self.inference == "jj":
            return self._em_iteration(X)
        n_samples = X.shape[0]
        K = self.n_components
        tau = self._temperature()
        order = rng.permutation(n_samples)
        batch_size = self._batch_size(n_samples)
        n_batches = -(-n_samples // batch_size)
        window = _update_window(self, X.nnz / n_batches, n_batches)
        opt = self._optimizer
        softplus_rows, other_rows = self._row_parameters()
        dense = [i for i in range(len(opt.params))
                 if i not in softplus_rows and i not in other_rows]
        last = self._last_update
        last[:] = 0
        all_rows = np.arange(self._theta.shape[0], dtype=np.int64)
        grad_rows = np.full(self._theta.shape[0], -1, dtype=np.int64)
        # running sums of the dense gradient parts over the window's steps
        delayed_theta = np.zeros((window + 1, K))
        delayed_leak = -np.arange(window + 1, dtype=np.float64)
        now = 0
        row_elbo = np.empty(n_samples)
        refine = self._fit_refine_steps() > 0
        for b, batch in enumerate(gen_batches(n_samples, batch_size)):
            rows = order[batch]
            X_batch = X[rows]
            B = X_batch.shape[0]
            logit_q = None
            if self.inference == "svi":
                logit_q = self._local_step(X_batch, rows, rng)
            uniforms = rng.random_sample((B, self.n_mc_samples, K))
            refine_uniforms = None
            if refine:
                refine_uniforms = rng.random_sample((B, self.n_mc_samples, K))
            features, grads, g_dense, _, elbo_discrete = self._batch_gradients(
                X_batch, uniforms, tau, logit_q, refine_uniforms)
            now += 1
            delayed_theta[now] = delayed_theta[now - 1] + g_dense / B
            opt.tick()
            if now == window or b == n_batches - 1:
                # the end of the window: every row gets its delayed step, the
                # active ones with their gradient, in one pass in row order
                grad_rows[features] = np.arange(features.shape[0])
                self._update_theta_and_leak(all_rows, grads, B, delayed_theta,
                                            delayed_leak, now, grad_rows,
                                            sums_recomputed=True)
                grad_rows[features] = -1
                last[:] = 0
                self._sync_column_sums()
                now = 0
            else:
                self._update_theta_and_leak(features, grads, B, delayed_theta,
                                            delayed_leak, now)
                last[features] = now
            for i in other_rows:
                opt.update_rows(i, features, grads[i] / B)
            for i in dense:
                opt.update(i, grads[i] / B)
            row_elbo[rows] = elbo_discrete
        self._epoch += 1
        self._revive_unused_causes(X, row_elbo, rng)
        return float(row_elbo.mean())

    def _revive_unused_causes(self, X, row_elbo, rng):
        """Re-seed the causes whose prior fell below 0.01, in the first epochs.

        As :class:`~sklearn.cluster.KMeans` relocates empty clusters, and as
        unused codebook vectors are re-initialized in vector-quantized
        autoencoders, an unused cause k is given a fresh start on the rows the
        model explains worst: theta_k (``init="data"``-style, seeded on one of
        the 10% rows with the lowest ELBO of the epoch), the initial prior, zero
        Adam moments, and for "avi" a fresh column of the encoder's output
        layer. Only during the model's first ``_REVIVAL_EPOCHS`` (5) epochs,
        counted across ``warm_start`` fits and ``partial_fit`` calls, so that
        a revived cause has time to become a real one or to end unused (not
        counted in ``n_active_components_``). Cost O(n_features (number of
        revived causes)).
        """
        if self._epoch > _REVIVAL_EPOCHS:
            return
        dead = np.flatnonzero(self._logit_prior < logit(_DEAD_PRIOR))
        if dead.size == 0:
            return
        n_features, K = self._theta.shape
        worst = np.argsort(row_elbo)[: max(dead.size, X.shape[0] // 10)]
        seeds = rng.choice(worst, size=dead.size, replace=worst.size < dead.size)
        theta = rng.uniform(0.5, 1.5, size=(n_features, dead.size)) / n_features
        theta += _seed_weights(X, seeds)
        self._theta_raw[:, dead] = _softplus_inverse(theta)
        self._logit_prior[dead] = logit(min(0.5, 5.0 / K) if K > 1 else 0.5)
        opt = self._optimizer
        for m in (opt.m, opt.v):
            m[0][:, dead] = 0.0
            m[2][dead] = 0.0
        if self.inference == "avi":
            coef, _ = _encoder.init_layer(self.encoder_coefs_[-1].shape[0],
                                          dead.size, rng)
            self.encoder_coefs_[-1][:, dead] = coef
            self.encoder_intercepts_[-1][dead] = self._logit_prior[dead]
            n_layers = len(self.encoder_coefs_)
            for m in (opt.m, opt.v):
                m[2 + n_layers][:, dead] = 0.0
                m[2 + 2 * n_layers][dead] = 0.0
        self._sync_constrained()

    def _em_iteration(self, X):
        """"jj": one E-step and one M-step on all of X; returns the bound per row.

        E-step: ``_N_LOCAL_STEPS`` coordinate-ascent sweeps per row on q and
        the Jensen weights r, from their values of the previous iteration
        (``_local_logits``, ``_jj_weights``). M-step: theta, the leak and mu
        maximize the summed bound (see :mod:`skbinvi.noisy_or._jaakkola_jordan`). Both
        halves never decrease the bound, so the returned mean is
        non-decreasing over iterations. Cost O(nnz K) per sweep.
        """
        indptr, indices = _csr_arrays(X)
        if self._jj_weights is None:
            self._jj_weights = _jaakkola_jordan.jj_init_r(indptr, indices, self._theta)
        out = np.empty(X.shape[0])
        _jaakkola_jordan.jj_e_step(indptr, indices, self._theta, self._leak,
                      self._colsum, self._leak_sum[0], self._local_logits,
                      self._logit_prior, self._jj_weights, _N_LOCAL_STEPS, 0.0,
                      out)
        # the leak of a word seen once in n + 1 rows, the clip of the initial
        # leak (_initialize): without it a word absent from X gets leak 1e-10
        # and costs a held-out row about 23 nats
        leak_min = -np.log1p(-1.0 / (X.shape[0] + 1))
        _jaakkola_jordan.jj_m_step(indptr, indices, self._local_logits,
                      self._jj_weights, self._theta, self._leak, self._logit_prior,
                      10, 1e-12, leak_min, self.prior_smoothing)
        # keep the raw (softplus) parameters in step; theta may be exactly 0
        with np.errstate(divide="ignore"):
            self._theta_raw[...] = _softplus_inverse(self._theta)
            self._leak_raw[...] = _softplus_inverse(self._leak)
        self._sync_constrained()
        _jaakkola_jordan.jj_bound(indptr, indices, self._theta, self._leak,
                     self._colsum, self._leak_sum[0], self._local_logits,
                     self._logit_prior, self._jj_weights, out)
        self._epoch += 1
        return float(out.mean())

    def _local_step(self, X, rows, rng):
        """"svi": update and return the logits of the rows ``rows`` of the training set.

        In ``fit`` the logits of the training rows are kept between epochs
        (``_local_logits``) and take ``_N_LOCAL_STEPS`` steps per visit; in
        ``partial_fit`` (``_local_logits`` is None) the rows are new and start
        from the prior with ``_N_TRANSFORM_STEPS`` steps. The Monte Carlo
        samples are fresh at every visit.
        """
        B, K = X.shape[0], self.n_components
        uniforms = rng.random_sample((B, self.n_mc_samples, K))
        if self._local_logits is None:
            logit_q = np.tile(self._logit_prior, (B, 1))
            n_steps = _N_TRANSFORM_STEPS
        else:
            logit_q = self._local_logits[rows]
            n_steps = _N_LOCAL_STEPS
        indptr, indices = _csr_arrays(X)
        _kernels.local_optimize_rows(indptr, indices, self._theta, self._leak,
                                     self._colsum, self._logit_prior, uniforms, n_steps,
                                     _LOCAL_STEP, 0.0, logit_q)
        if self._local_logits is not None:
            self._local_logits[rows] = logit_q
        return logit_q

    def _update_theta_and_leak(self, rows, grads, B, delayed_theta, delayed_leak, now,
                               grad_rows=None, sums_recomputed=False):
        """The current Adam step on the rows ``rows`` of theta and the leak.

        ``grads[0]``, ``grads[1]`` are the minibatch's (B rows) row-sparse
        gradients; row ``grad_rows[j]`` of them (-1: none; by default j)
        belongs to ``rows[j]``. Each row also gets its delayed dense part
        (see :func:`_update_window`). ``sums_recomputed=True``: the caller
        recomputes the column sums of theta afterwards
        (:meth:`_sync_column_sums`), so a large update may run on threads.
        """
        opt = self._optimizer
        last = self._last_update
        opt.update_softplus_rows(0, rows, grads[0] / B, delayed_theta, last, now,
                                 self._theta, self._theta_slope, self._colsum,
                                 grad_rows, colsum_recomputed=sums_recomputed)
        opt.update_softplus_rows(1, rows, grads[1] / B, delayed_leak, last, now,
                                 self._leak, self._leak_slope, self._leak_sum,
                                 grad_rows)

    def _sync_column_sums(self):
        """Recompute the column sums of theta and the leak's sum exactly (they
        are updated incrementally between the ends of the update windows)."""
        self._colsum[:] = self._theta.sum(axis=0)
        self._leak_sum[0] = self._leak.sum()

    def _posterior_logits(self, X):
        """logit q(z | x) of every row of a binary CSR matrix, deterministic.

        Amortized methods: the encoder's output, refined by up to
        ``_N_REFINE_STEPS`` local steps (semi-amortized inference; see
        :meth:`_refine`). "svi": up to ``_N_TRANSFORM_STEPS`` local steps from
        the prior with the common random numbers fixed at initialization,
        each row on its own. "jj": the "svi" steps, then the optimal Jensen
        weights for that q and up to ``_N_TRANSFORM_STEPS`` E-step sweeps.
        """
        indptr, indices = _csr_arrays(X)
        if self.inference in ("svi", "jj"):
            logit_q = np.tile(self._logit_prior, (X.shape[0], 1))
            _kernels.local_optimize_rows(
                indptr, indices, self._theta, self._leak, self._colsum,
                self._logit_prior, self._local_uniforms, _N_TRANSFORM_STEPS,
                _LOCAL_STEP, _LOCAL_TOL, logit_q,
            )
            if self.inference == "jj":
                # The E-step's fixed point depends on its start. From the
                # Jensen weights that are tight at q = 1 (jj_init_r) it ends
                # far below the training rows' posteriors, which co-evolved
                # with the model (Reuters bodies, K = 20: bound -144.5 nats per
                # document against -111.6 in training). So a new row starts
                # where "svi" ends, with the Jensen weights optimal for that q,
                # and the E-step sweeps raise the bound from there (-110.2).
                weights = _jaakkola_jordan.jj_init_r(indptr, indices, self._theta)
                _jaakkola_jordan.jj_update_r(indptr, indices, self._theta,
                                             self._leak, logit_q, weights)
                _jaakkola_jordan.jj_e_step(
                    indptr, indices, self._theta, self._leak, self._colsum,
                    self._leak_sum[0], logit_q, self._logit_prior, weights,
                    _N_TRANSFORM_STEPS, _JJ_TOL, np.empty(X.shape[0]),
                )
        else:
            with single_threaded_blas():
                logit_q = self._encode(X, indptr, indices, self._theta)[0]
            if _N_REFINE_STEPS > 0:
                self._refine(indptr, indices, logit_q)
        return logit_q

    def _discrete_elbo(self, indptr, indices, logit_q, uniforms):
        out = np.empty(logit_q.shape[0])
        _kernels.discrete_elbo_rows(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._leak_sum[0], logit_q, self._logit_prior, uniforms, out,
        )
        return out

    def _refine(self, indptr, indices, logit_q):
        """Semi-amortized inference: local steps from the encoder's logits, in place.

        Up to ``_N_REFINE_STEPS`` damped mean-field steps on every row's logits
        (:func:`_kernels.local_optimize`, the "svi" machinery, with the common
        random numbers fixed at fit time), then a safeguard: a row keeps its
        refined logits only if they raise its ELBO estimated with
        ``n_elbo_samples`` common random numbers drawn at fit time,
        independent of those of :meth:`score_samples` (so that the reported
        ELBO has no selection bias). Monte Carlo targets can overshoot a row
        that the encoder already placed near its optimum.
        """
        start = logit_q.copy()
        _kernels.local_optimize_rows(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._logit_prior, self._local_uniforms, _N_REFINE_STEPS,
            _LOCAL_STEP, _LOCAL_TOL, logit_q,
        )
        uniforms = self._safeguard_uniforms
        elbo_start = self._discrete_elbo(indptr, indices, start, uniforms)
        elbo = self._discrete_elbo(indptr, indices, logit_q, uniforms)
        worse = ~(elbo >= elbo_start)
        logit_q[worse] = start[worse]

    def _elbo_rows(self, X, n_draws=None):
        """True ELBO of every row of a binary CSR matrix (nats), deterministic.

        Inside :meth:`fit_transform` the rows' posterior logits are kept
        (``_final_logits``): the last call of a fit is the final ELBO of the
        training rows, and the state of the kept run carries its logits.
        """
        indptr, indices = _csr_arrays(X)
        logit_q = self._posterior_logits(X)
        if getattr(self, "_keep_final_logits", False):
            self._final_logits = logit_q
        if getattr(self, "_in_fit", False):
            # the last call of a fit is the final ELBO of the training rows
            # (validation rows come before it): their logits set the scale
            self._set_logit_scale(logit_q)
        uniforms = self._common_uniforms(n_draws or self.n_elbo_samples)
        return self._discrete_elbo(indptr, indices, logit_q, uniforms)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the noisy-OR model and the encoder from binary data.

        The shared fit loop of the package runs the epochs: ``max_iter``,
        ``tol`` with ``n_iter_no_change``, ``early_stopping``, ``n_init`` and
        ``warm_start`` have the same meaning for every estimator (see the
        User Guide).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; binarized as described by ``binarize``.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, not 2-D, contains NaN or infinity, negative values,
            or (with ``binarize=None``) values other than 0 and 1; if early
            stopping leaves no training or no validation row; if training
            diverges (a non-finite ELBO or posterior, for example with a too
            large ``learning_rate``).

        Warns
        -----
        ConvergenceWarning
            If ``max_iter`` epochs ran without meeting the stopping criterion
            (never with ``tol=None`` and no early stopping).
        """
        X = self._check_X(X, reset=not (self.warm_start and self._is_initialized()))
        self._in_fit = True
        try:
            return self._fit_loop(X)
        finally:
            self.__dict__.pop("_in_fit", None)

    def _set_logit_scale(self, logit_q, pool=False):
        """Set ``logit_scale_`` from the posterior logits of training rows.

        The standard deviation of all the entries of ``logit_q`` (rows, K),
        or 1 if it is smaller or not finite. With ``pool`` the moments are
        merged with those of the rows before (Chan et al.'s pairwise update
        of the mean and the sum of squared deviations), as
        :meth:`partial_fit` does over its calls.
        """
        n = logit_q.size
        with np.errstate(all="ignore"):  # a non-finite spread gives scale 1
            mean = float(logit_q.mean()) if n else 0.0
            m2 = float(np.square(logit_q - mean).sum())
        previous = getattr(self, "_logit_moments", None)
        if pool and previous is not None and previous[0] > 0:
            n0, mean0, m20 = previous
            total = n0 + n
            delta = mean - mean0
            mean, m2 = mean0 + delta * n / total, m20 + m2 + delta**2 * n0 * n / total
            n = total
        self._logit_moments = (n, mean, m2)
        with np.errstate(all="ignore"):
            std = np.sqrt(m2 / n) if n else 0.0
        self.logit_scale_ = float(std) if np.isfinite(std) and std > 1.0 else 1.0

    def _output(self, logit_q):
        """What :meth:`transform` returns for the posterior logits ``logit_q``."""
        if self.posterior == "probability":
            return expit(logit_q)
        if self.posterior == "scaled_logit":
            return logit_q / self.logit_scale_
        return logit_q

    # ------------------------------------------------- hooks of the fit loop
    def _iterate(self, X, y, rng, partial=False):
        """One epoch (one EM iteration for "jj"); the training ELBO per row.

        ``partial=True`` (``partial_fit``): the rows are new, so "svi" starts
        their logits from the prior instead of keeping them between epochs.
        """
        if partial:
            self._local_logits = None
        elif self.inference in ("svi", "jj") and (
            self._local_logits is None or self._local_logits.shape[0] != X.shape[0]
        ):
            # the training rows' logits, kept between epochs
            self._local_logits = np.tile(self._logit_prior, (X.shape[0], 1))
            self._jj_weights = None
        # a warm start or partial_fit continues the moments with the step
        # size set now (the optimizer was made at the first fit)
        self._optimizer.learning_rate = float(self.learning_rate)
        # Minibatch matrices are small: threaded BLAS only adds overhead
        # (3x slower per epoch on 2 busy cores), as in scikit-learn's KMeans.
        with single_threaded_blas():
            value = self._run_epoch(X, rng)
        self._check_parameters_after_epoch()
        return value

    def _check_parameters_after_epoch(self):
        """Raise the divergence error if the epoch's last steps broke the model.

        The value an epoch returns is averaged over its minibatches before
        their updates, so it can stay finite while the last updates leave NaN
        parameters (every output NaN) or, for the gradient methods, a leak
        that underflowed to exactly 0 (log p(x) = -inf for the rows with a
        feature no sampled cause explains). The data start keeps every leak
        positive and a stable run does not drive ``softplus(raw)`` below the
        smallest double, so either is a divergence. O(n_features K).
        """
        arrays = [self._theta, self._leak, self._logit_prior,
                  *self.encoder_coefs_, *self.encoder_intercepts_]
        if any(np.isnan(a).any() for a in arrays):
            problem = "model parameters became NaN"
        elif self.inference != "jj" and not np.all(self._leak > 0):
            problem = "leak of some features underflowed to 0"
        else:
            return
        self._raise_diverged(problem, self._epoch)

    def _raise_diverged(self, problem, epoch):
        raise ValueError(
            f"{type(self).__name__}: the {problem} in epoch {epoch}: "
            f"training diverged. {self._divergence_hint()}"
        )

    def _elbo_per_sample(self, X, y=None):
        return float(self._elbo_rows(X).mean())

    def fit_transform(self, X, y=None):
        """Fit the model and return the posterior of the training rows.

        Equal to ``fit(X).transform(X)``, but the posterior logits computed
        for the final training ELBO (``elbo_``) are returned instead of being
        computed a second time: with the default semi-amortized inference
        this saves the encoder pass and the refinement of every training row.
        With ``early_stopping=True`` the
        final ELBO covers only the training part of X, and the rows are
        transformed afresh.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; binarized as described by ``binarize``.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        features : ndarray of shape (n_samples, n_components), float64
            As :meth:`transform`: scaled logits, logits or probabilities by
            ``posterior``.

        Raises
        ------
        ValueError
            As :meth:`fit`.
        """
        if self.early_stopping:
            # the final ELBO covers only the training part of X
            return self.fit(X, y).transform(X)
        self._keep_final_logits = True
        try:
            self.fit(X, y)
        finally:
            self.__dict__.pop("_keep_final_logits", None)
        return self._output(self.__dict__.pop("_final_logits"))

    def _check_elbo_input(self, X, y):
        return self._check_X(X, reset=False), None

    def _divergence_hint(self):
        if self.inference == "jj":
            return "Check the input data (variational EM has no step size)."
        default = inspect.signature(type(self)).parameters["learning_rate"].default
        if self.learning_rate == default:
            return f"Lower learning_rate (now {default}, the default)."
        return (
            f"Lower learning_rate (now {self.learning_rate}); the default is {default}."
        )

    def _after_fit(self, X, y):
        # the training rows' local logits are not part of the model
        self._local_logits = self._jj_weights = None
        self._set_public_parameters()
        # what the fit chose: the causes in use (prior above _DEAD_PRIOR); a
        # cause the prior switched off is the model at work, not a warning
        self.n_active_components_ = int(np.sum(self.prior_ > _DEAD_PRIOR))
        if self.verbose:
            self._report(f"{self.n_active_components_} of {self.n_components} "
                         f"causes in use (prior > {_DEAD_PRIOR})")

    def _learns_online(self):
        if self.inference == "jj":
            raise AttributeError(
                "partial_fit is not available with inference='jj': variational "
                "EM updates every row's posterior and the model in one pass over "
                "all the data. Use inference='acp', 'avi' or 'svi' to learn from "
                "chunks of data."
            )
        return True

    @available_if(_learns_online)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None):
        """Run one epoch of training on X, initializing on the first call.

        The optimizer state, the temperature schedule and the random state
        carry over between calls, so a stream of chunks is trained as one
        long run. ``max_iter``, ``tol``, ``n_init`` and ``early_stopping``
        are ignored. Not available with ``inference="jj"``.

        The first call initializes the model from its chunk: the leak from
        the chunk's feature frequencies and the causes' seeds from its rows
        (``init``). Make it a representative chunk, of a hundred rows or
        more: the leak learns slowly afterwards.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A chunk of training data.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : object
            Partially fitted estimator.

        Raises
        ------
        ValueError
            As :meth:`fit`, and if X does not have ``n_features_in_`` columns.
        AttributeError
            With ``inference="jj"`` (variational EM needs all the data).
        """
        first_time = not self._is_initialized()
        X = self._check_X(X, reset=first_time)
        self._partial_fit_iteration(X)
        # the chunk's logits after its epoch join those of the chunks before
        self._set_logit_scale(self._posterior_logits(X), pool=not first_time)
        return self

    # -------------------------------------------------------------- inference
    def transform(self, X):
        """Posterior of the causes: scaled logits (default), logits or probabilities.

        Deterministic, and the result for a row does not depend on the other
        rows: "acp"/"avi" take the encoder's output refined by
        a few local mean-field steps with common random numbers fixed at fit
        time (kept only where they raise the row's ELBO); "svi" and "jj"
        optimize each row's posterior with the model fixed.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.

        Returns
        -------
        features : ndarray of shape (n_samples, n_components), float64
            With ``posterior="logit"``, the logits
            ``logit q(z_k = 1 | x)`` (finite reals, computed directly, not
            through ``logit(expit(.))``); with ``"scaled_logit"``, the logits
            divided by ``logit_scale_``; with ``"probability"``, the
            probabilities ``expit`` of the logits, in [0, 1].

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X has the wrong number of features or invalid values.
        """
        self._check_fitted()
        X = self._check_X(X, reset=False)
        return self._output(self._posterior_logits(X))

    def score_samples(self, X, *, method="elbo", n_draws=None):
        """Per-row lower bound on log p(x) in nats: the ELBO, or a tighter estimate.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.
        method : {"elbo", "iwae"}, default="elbo"
            "elbo": the true ELBO of q(z | x), estimated with exact discrete
            samples of q. "iwae": the importance-weighted estimate
            ``log 1/S sum_s p(x, z_s) / q(z_s | x)``, z_s ~ q (Burda et al.,
            ICLR 2016), whose expectation lies between the ELBO and log p(x)
            and tends to log p(x) as S grows: the number to compare held-out
            likelihoods with.
        n_draws : int, default=None
            Number S of samples of q per row; None means ``n_elbo_samples``
            for "elbo" and 1000 for "iwae". The samples are common random
            numbers fixed at fit time (the same for every row), so the result
            is deterministic and a row's value does not depend on the others.

        Returns
        -------
        log_likelihood_bound : ndarray of shape (n_samples,), float64
            Nats per row.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X has the wrong number of features or invalid values, if
            ``method`` is unknown or ``n_draws`` is not a positive integer.
        """
        self._check_fitted()
        if method not in ("elbo", "iwae"):
            raise ValueError(
                f"method must be 'elbo' or 'iwae'; got {method!r}."
            )
        if n_draws is not None and (
            not isinstance(n_draws, Integral) or isinstance(n_draws, bool)
            or n_draws < 1
        ):
            raise ValueError("n_draws must be a positive integer; "
                             f"got {n_draws!r}.")
        X = self._check_X(X, reset=False)
        if method == "elbo":
            return self._elbo_rows(X, n_draws)
        uniforms = self._common_uniforms(1000 if n_draws is None else n_draws)
        indptr, indices = _csr_arrays(X)
        logit_q = self._posterior_logits(X)
        out = np.empty(X.shape[0])
        _kernels.importance_log_likelihood(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._leak_sum[0], logit_q, self._logit_prior, uniforms, out,
        )
        return out

    def _common_uniforms(self, n_draws):
        """Uniforms (n_draws, K) from the seed drawn at fit time (deterministic)."""
        fitted_samples, K = self._score_uniforms.shape
        if n_draws == fitted_samples:
            return self._score_uniforms
        # seeded by the fit-time common random numbers: deterministic per model
        seed = int(self._score_uniforms[0, 0] * np.iinfo(np.int32).max)
        return np.random.RandomState(seed).random_sample((n_draws, K))

    def score(self, X, y=None):
        """Mean true ELBO per row, in nats (higher is better).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        score : float
            ``score_samples(X).mean()``, nats per row.
        """
        return self.elbo(X)

    @property
    def components_(self):
        """Weights theta of the causes, shape (n_components, n_features), float64.

        A read-only view of the model's weights (no copy: they are stored
        feature-major, as the kernels read them).
        """
        view = self._theta.T.view()
        view.flags.writeable = False
        return view

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags
