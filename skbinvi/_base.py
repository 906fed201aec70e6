"""The fit loop shared by every estimator of the package.

Each estimator supplies the model-specific steps (initialize, one iteration,
the ELBO of some rows); :class:`BaseVariational` owns everything around them,
so that the words mean the same thing in every estimator:

- ``max_iter``: iterations (epochs, sweeps or blocks of sweeps) per run;
- ``tol`` and ``n_iter_no_change``: a run has converged when the monitored
  ELBO, in nats per sample, has not improved on its best value by more than
  ``tol`` for ``n_iter_no_change`` consecutive iterations; ``tol=None`` runs
  a fixed budget of ``max_iter`` iterations with no convergence test (as
  :class:`~sklearn.linear_model.SGDClassifier` with ``tol=None``), except
  that early stopping still stops once the held-out ELBO has not improved
  for ``n_iter_no_change`` iterations;
- ``n_init``: independent runs, the one with the highest final ELBO is kept
  (with early stopping, the highest held-out ELBO);
- ``warm_start``: ``fit`` continues from the fitted state;
- ``early_stopping`` and ``validation_fraction``: the monitored ELBO is that of
  held-out rows, and the state of the best iteration is kept;
- ``verbose``: one line per iteration, in one format;
- the fitted ``elbo_``, ``elbo_history_``, ``n_iter_``, ``converged_`` and
  ``validation_scores_``, and the public :meth:`BaseVariational.elbo`.

The design follows scikit-learn's ``BaseMixture`` (``sklearn/mixture/_base.py``)
and ``MLPClassifier``'s early stopping.
"""

import copy
import functools
import inspect
import os
import time
import warnings
from numbers import Real

import numpy as np
import sklearn
from sklearn.base import BaseEstimator, is_classifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import ThreadpoolController

from ._validation import IntInterval

__all__ = ["BaseVariational", "FIT_LOOP_CONSTRAINTS", "StoppingRule"]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_SKLEARN_DIR = os.path.dirname(os.path.abspath(sklearn.__file__))


@functools.cache
def _threadpool_controller():
    """The package's one :class:`threadpoolctl.ThreadpoolController`, made at first use.

    Making a controller scans every loaded shared library (3.5 ms here, more
    than a small fit's epoch), which ``threadpoolctl.threadpool_limits`` does
    at every call; scikit-learn keeps one controller for the same reason
    (``sklearn.utils.parallel``). Libraries loaded after the first call are
    not seen, as there.
    """
    return ThreadpoolController()


def single_threaded_blas():
    """Context manager: BLAS calls inside it use one thread.

    The estimators' BLAS calls are many small products, for which a thread
    pool's start-up and busy-waiting cost more than they gain (as in
    scikit-learn's ``KMeans``). Equivalent to
    ``threadpoolctl.threadpool_limits(limits=1, user_api="blas")`` without
    its scan of the loaded libraries at every call.
    """
    return _threadpool_controller().limit(limits=1, user_api="blas")


def _same_value(a, b):
    """Whether two parameter values are equal (sequences compared as tuples)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return tuple(a) == tuple(b)
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # arrays or objects without a truth value
        return a is b


def _user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the caller's code.

    Counts the frames from the caller of :func:`warnings.warn` up to the
    first one outside this package and scikit-learn (whose ``_fit_context``
    and meta-estimators wrap ``fit``), as pandas' ``find_stack_level`` does;
    the depth differs between ``fit``, ``partial_fit`` and the estimators.
    """
    frame, level = inspect.currentframe(), 0
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if level > 0 and not name.startswith((_PACKAGE_DIR, _SKLEARN_DIR)):
            break
        frame, level = frame.f_back, level + 1
    return max(level, 1)


#: Parameter constraints of the fit-loop parameters, merged by every estimator
#: into its ``_parameter_constraints``.
FIT_LOOP_CONSTRAINTS = {
    "max_iter": [IntInterval(1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "n_iter_no_change": [IntInterval(1, None, closed="left")],
    "n_init": [IntInterval(1, None, closed="left")],
    "warm_start": ["boolean"],
    "early_stopping": ["boolean"],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

#: Attributes set by the fit loop itself ("elbo" is the monitored value's
#: attribute name, :attr:`StoppingRule.attribute`).
_LOOP_ATTRIBUTES = (
    "{}_",
    "{}_history_",
    "n_iter_",
    "converged_",
    "validation_scores_",
    "best_validation_score_",
)


# share of a run's progress (best minus first value) that a fall must exceed,
# besides plateau_fraction of |best|, to restart the patience (StoppingRule)
_PROGRESS_FRACTION = 0.25


class StoppingRule:
    """What the fit loop monitors and when a run ends: the ``tol`` rule.

    A run has converged when the monitored value (nats per sample) has not
    improved on its best by more than ``tol`` (times ``n_problems``) for
    ``n_iter_no_change`` consecutive iterations. An estimator's
    ``_stopping_rule()`` returns one; the mixture of experts (several
    one-vs-rest problems, an MCMC schedule) and the relational model (a
    plateau band for full sweeps) return their own.

    Parameters
    ----------
    tol : float or None
        Tolerance in nats per sample of each problem; None: no convergence
        test (a fixed budget of ``max_iter`` iterations).
    n_iter_no_change : int
        Iterations without improvement that end a run.
    n_problems : int, default=1
        How many independent problems the monitored value sums; ``tol``
        applies to each.
    plateau_fraction : float or None, default=None
        A training value that has fallen below the best by more than this
        fraction of ``|best|``, and by more than a quarter of the run's
        progress (best minus first value), resets the count: the run is
        still moving (a transient fall it may recover from), not converged.
        A smaller fall is the plateau's noise and the count goes on: near an
        ELBO of 0, as for a relation of a handful of links among many pairs,
        a fraction of ``|best|`` is smaller than the wander of Monte Carlo
        steps, which the run's progress is not.
        None: every iteration that does not improve counts, as in
        :class:`~sklearn.neural_network.MLPClassifier`. Not used for
        held-out values, which may fall for good.
    standard_error : callable or None, default=None
        For a training value estimated from a sample of its terms: a
        function of no argument that returns the standard error of the last
        value (nats per sample). An iteration then improves only if it
        beats the best by more than ``max(tol * n_problems *
        units_per_sample, 2 * standard_error())``: a smaller gain is within
        the estimate's sampling error. None: the value is exact (or its
        error negligible). Not used for held-out values.
    unit : str, default="sample"
        What ``tol`` is counted per (``tol`` nats per ``unit``).
    units_per_sample : float, default=1.0
        Units in one sample, on average: a gain of ``tol`` nats per unit is
        ``tol * units_per_sample`` nats per sample (the relational model
        counts ``tol`` per link, and a pair is ``links / pairs`` links).

    Attributes
    ----------
    label : str
        Name of the monitored value in the verbose lines and messages.
    attribute : str
        Stem of the fitted attributes that hold it (``elbo_``,
        ``elbo_history_``).
    """

    label = "ELBO"
    attribute = "elbo"

    def __init__(self, tol, n_iter_no_change, n_problems=1, plateau_fraction=None,
                 standard_error=None, unit="sample", units_per_sample=1.0):
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.n_problems = n_problems
        self.plateau_fraction = plateau_fraction
        self.standard_error = standard_error
        self.unit = unit
        self.units_per_sample = units_per_sample
        self._no_change = 0
        self._first = None  # the run's first value

    @property
    def ends_early(self):
        """Whether a run can end before ``max_iter``."""
        return self.tol is not None

    def update(self, value, best, held_out):
        """Record one iteration's value (``best``: the best before it).

        Returns whether the run has converged.
        """
        if self.tol is None:
            return False
        if self._first is None:
            self._first = value
        band = np.inf
        if not held_out and self.plateau_fraction is not None and np.isfinite(best):
            band = max(self.plateau_fraction * abs(best),
                       _PROGRESS_FRACTION * (best - self._first))
        gain = self.tol * self.n_problems * self.units_per_sample
        if not held_out and self.standard_error is not None:
            gain = max(gain, 2.0 * self.standard_error())
        if value > best + gain or value < best - band:
            self._no_change = 0  # improving, or fallen far below: moving
        else:
            self._no_change += 1
        return self._no_change >= self.n_iter_no_change

    def message(self, model):
        """The text of the ConvergenceWarning of a run that reached max_iter."""
        per = ("" if self.n_problems == 1
               else f" per problem (the {self.label} sums {self.n_problems})")
        amount = f"tol={model.tol} nats per {self.unit}{per}"
        if self.units_per_sample != 1.0 and self.tol:
            amount += (f" ({self.tol * self.units_per_sample:.3g} nats per sample "
                       f"at {self.units_per_sample:.3g} {self.unit}s per sample)")
        if model.tol is None:
            amount = f"0 nats per sample{per} (tol=None with early stopping)"
        if self.standard_error is not None:
            amount += (f" or twice the standard error of its estimate "
                       f"({2.0 * self.standard_error():.3g})")
        monitored = f"validation {self.label}" if model.early_stopping else self.label
        return (
            f"{type(model).__name__}: max_iter={model.max_iter} iterations ran and "
            f"the {monitored} still improved by more than {amount} within the "
            f"last n_iter_no_change={model.n_iter_no_change} iterations. Increase "
            "max_iter or tol.")


class BaseVariational(BaseEstimator):
    """Base class of the estimators: the shared fit loop and ELBO vocabulary.

    A subclass lists the fit-loop parameters (``max_iter``, ``tol``,
    ``n_iter_no_change``, ``n_init``, ``warm_start``, ``early_stopping``,
    ``validation_fraction``, ``random_state``, ``verbose``) in its own
    ``__init__``, merges :data:`FIT_LOOP_CONSTRAINTS` into its
    ``_parameter_constraints``, validates its input in ``fit`` and then calls
    :meth:`_fit_loop`. It implements:

    ``_initialize(X, y, rng)``
        Set fresh parameters (called once per run of ``n_init``).
    ``_iterate(X, y, rng, partial=False) -> float``
        One iteration (an epoch, a sweep, a block of MCMC sweeps); returns the
        training objective in nats per sample (the ELBO, or what the
        estimator documents instead). ``partial=True`` in ``partial_fit``:
        the rows are a new chunk, not the training set of earlier
        iterations.
    ``_elbo_per_sample(X, y) -> float``
        The ELBO of the rows (X, y) at the current parameters, divided by the
        number of rows (nats per sample).
    ``_check_elbo_input(X, y) -> (X, y)``
        Validation of new data for :meth:`elbo`.

    and may override ``_stopping_rule()`` (a :class:`StoppingRule`: what is
    monitored and when a run ends), ``_transient_attributes`` (attributes
    that are not part of the fitted state: caches and data of the training
    rows, left out when the state of the best run or iteration is kept),
    ``_after_fit(X, y)`` (public attributes after training) and
    ``_divergence_hint()`` (the remedy the divergence error names).

    Attributes set by the loop
    --------------------------
    elbo_ : float
        ELBO of the training rows at the end of the kept run, nats per sample
        (without the validation rows when early stopping is used).
    elbo_history_ : ndarray of shape (n_iter_,)
        The value returned by every iteration of the kept run, nats per sample
        (continued by ``warm_start`` and ``partial_fit``).

        (An estimator whose :class:`StoppingRule` monitors another value
        names these two after it, e.g. ``log_joint_`` and
        ``log_joint_history_``.)
    n_iter_ : int
        Number of iterations of the kept run.
    converged_ : bool
        Whether the kept run met the ``tol`` rule before ``max_iter``; always
        False with ``tol=None`` and no early stopping (a fixed budget).
    validation_scores_ : ndarray of shape (n_iter_,) or None
        Held-out ELBO after every iteration (nats per sample) when early
        stopping was used, else None; NaN for the iterations that had no
        held-out score (``partial_fit`` calls, and the iterations of a
        ``warm_start`` history before early stopping was switched on).
    best_validation_score_ : float or None
        Best value of ``validation_scores_``, else None. A ``warm_start`` fit
        on as many rows holds out the same rows as the fit before and starts
        from its best: its parameters are those of the best held-out ELBO
        over all the fits, as in
        :class:`~sklearn.neural_network.MLPClassifier` (the model then keeps
        a copy of that state for the next warm fit).
    """

    # ------------------------------------------------------------- hooks
    def _initialize(self, X, y, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    def _iterate(self, X, y, rng, partial=False):  # pragma: no cover - abstract
        raise NotImplementedError

    def _elbo_per_sample(self, X, y):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_elbo_input(self, X, y):  # pragma: no cover - abstract
        raise NotImplementedError

    def _after_fit(self, X, y):
        """Set public attributes after training (default: nothing)."""

    def _stopping_rule(self):
        """A fresh :class:`StoppingRule` for one run (default: the ``tol`` rule)."""
        return StoppingRule(self._stopping_tol(), self.n_iter_no_change)

    def _may_stop(self):
        """Whether the stopping rule may end the run after this iteration
        (default: always). False while a schedule of the estimator still
        changes what an iteration optimizes (the tempering of
        :class:`~skbinvi.LatentFeatureRelational`): the rule keeps counting,
        and ends the run at the first iteration where this is True."""
        return True

    def _divergence_hint(self):
        return "Check the input scale, or lower the step sizes."

    #: Attributes that are not part of the fitted state (caches, data of the
    #: training rows): not copied by :meth:`_get_state`, left as they are by
    #: :meth:`_set_state`.
    _transient_attributes = ()

    def _get_state(self):
        """A copy of the fitted state: every attribute that is neither a
        parameter nor listed in ``_transient_attributes``.

        One ``deepcopy`` call for the whole state, so that references between
        fitted arrays (an optimizer holding the parameter arrays) survive.
        """
        skip = set(self.get_params(deep=False))
        skip.update(self._transient_attributes)
        skip.add("_best_validation_state")
        state = copy.deepcopy(
            {key: value for key, value in vars(self).items() if key not in skip}
        )
        # the best held-out state kept for warm starts (see _run) is never
        # modified in place: shared, not copied, so that states do not nest
        if "_best_validation_state" in vars(self):
            state["_best_validation_state"] = self._best_validation_state
        return state

    def _set_state(self, state):
        vars(self).update(state)

    # Parameters that fix the shapes of the fitted state (the number of
    # latent variables, the form of the weights, the inference method). A
    # fitted model records them, and a later ``set_params`` of one of them
    # is an error until the next fresh fit, rather than arrays of one shape
    # read with another.
    _structural_params = ()

    def _record_structure(self):
        self._fitted_structure = {
            name: getattr(self, name) for name in self._structural_params
        }

    def _same_structure(self, name, now, fitted):
        """Whether the value ``now`` of a structural parameter fits a model
        fitted with ``fitted`` (default: equal values)."""
        return _same_value(now, fitted)

    def _check_structure(self, remedy):
        """Raise ValueError if a structural parameter changed since the fit."""
        fitted = getattr(self, "_fitted_structure", {})
        changed = [name for name, value in fitted.items()
                   if not self._same_structure(name, getattr(self, name), value)]
        if changed:
            then = ", ".join(f"{name}={fitted[name]!r}" for name in changed)
            now = ", ".join(f"{name}={getattr(self, name)!r}" for name in changed)
            raise ValueError(
                f"{type(self).__name__} was fitted with {then} but now has {now}: "
                f"these parameters fix the shapes of the fitted model; {remedy}"
            )

    def _check_warm_structure(self):
        """Before a ``warm_start`` fit: the structural parameters unchanged.

        They are recorded again after the check: a value that an estimator
        accepts as the same structure (``"vi"`` then ``"pr"`` for the mixture
        of experts) is the one the next error message must name.
        """
        self._check_structure("warm_start=True continues the fitted model: set "
                              "warm_start=False to fit anew, or set them back.")
        self._record_structure()

    def _check_fitted(self):
        """``check_is_fitted``, and the structural parameters unchanged since."""
        check_is_fitted(self)
        self._check_structure("fit the model again, or set them back.")

    # ----------------------------------------------------------- helpers
    def _is_initialized(self):
        return hasattr(self, "n_iter_")

    def _report(self, message):
        print(f"[{type(self).__name__}] {message}", flush=True)

    # What one row of X is, for the units of the verbose lines ("nats/sample").
    _row_unit = "sample"

    def _value_units(self, value, rule):
        """``"<label> <value> nats/<row>"``, the verbose lines' one format."""
        return f"{rule.label} {value:.4f} nats/{self._row_unit}"

    def _split_validation(self, X, y, rng, warm=False):
        """Hold out ``validation_fraction`` of the rows (stratified for classifiers).

        A warm-started fit on as many rows as the fit before holds out the
        same rows (as :class:`~sklearn.neural_network.MLPClassifier` with an
        integer ``random_state``), so that rows once held out are never
        trained on and the held-out ELBO stays comparable across the fits.
        Returns (X_train, y_train, X_val, y_val, same_split).
        """
        n = X.shape[0]
        n_val = int(round(self.validation_fraction * n))
        if n_val < 1 or n_val >= n:
            raise ValueError(
                f"early_stopping=True needs at least one training and one validation "
                f"row; validation_fraction={self.validation_fraction} of {n} rows "
                f"gives {n_val} validation rows."
            )
        stratify = None
        if y is not None and is_classifier(self):
            _, counts = np.unique(y, return_counts=True)
            if counts.min() >= 2 and n_val >= counts.size:
                stratify = y
        seed = rng.randint(np.iinfo(np.int32).max)
        same = warm and getattr(self, "_validation_split", None) is not None and (
            self._validation_split[:2] == (n, n_val))
        if same:
            seed = self._validation_split[2]
        self._validation_split = (n, n_val, seed)
        if y is None:
            X_train, X_val = train_test_split(
                X, test_size=n_val, random_state=seed
            )
            return X_train, None, X_val, None, same
        X_train, X_val, y_train, y_val = train_test_split(
            X, y, test_size=n_val, random_state=seed, stratify=stratify
        )
        return X_train, y_train, X_val, y_val, same

    def _checked_value(self, value, what, iteration):
        value = float(value)
        if not np.isfinite(value):
            raise ValueError(
                f"{type(self).__name__}: the {what} became {value} at iteration "
                f"{iteration}: training diverged. {self._divergence_hint()}"
            )
        return value

    # -------------------------------------------------------------- loop
    def _fit_loop(self, X, y=None):
        """Train on validated rows (X, y); return self.

        Parameters
        ----------
        X : ndarray or sparse matrix of shape (n_samples, ...)
            Validated training rows; indexed by rows only.
        y : ndarray of shape (n_samples,) or None
            Validated targets, or None for unsupervised estimators.

        Raises
        ------
        ValueError
            If an iteration returns a non-finite value (divergence), or if
            early stopping leaves no training or no validation row.

        Warns
        -----
        ConvergenceWarning
            If the kept run reached ``max_iter`` without meeting the ``tol``
            rule. Not with ``tol=None`` and no early stopping: there is no
            rule to meet.
        """
        warm = self.warm_start and self._is_initialized()
        if warm:
            self._check_warm_structure()
        rng = self.random_state_ if warm else check_random_state(self.random_state)
        X_val = y_val = None
        same_split = False
        if self.early_stopping:
            X, y, X_val, y_val, same_split = self._split_validation(X, y, rng, warm)
        if not same_split:
            # a best held-out state of other validation rows is not comparable
            self._best_validation_state = None
        n_init = 1 if warm else self.n_init
        best_score, best_state = -np.inf, None
        start = time.perf_counter()
        for init in range(n_init):
            if not warm:
                self._clear_loop_attributes(StoppingRule.attribute)
                self._best_validation_state = None  # each run its own best
                self.random_state_ = rng
                self._initialize(X, y, rng)
                self._record_structure()
            rule = self._stopping_rule()
            if not warm:
                self._clear_loop_attributes(rule.attribute)
            self._run(X, y, X_val, y_val, rng, rule, init, n_init, start)
            final = self._checked_value(
                self._elbo_per_sample(X, y), f"final {rule.label}", self.n_iter_
            )
            setattr(self, f"{rule.attribute}_", final)
            if n_init > 1:
                # with early stopping the runs are compared on the held-out
                # value they were stopped on, otherwise on the training value
                score = (self.best_validation_score_ if X_val is not None
                         else final)
                if self.verbose:
                    held_out = (f", best validation {rule.label} {score:.4f}"
                                if X_val is not None else "")
                    self._report(
                        f"init {init + 1}/{n_init}: final "
                        f"{self._value_units(final, rule)}{held_out}"
                    )
                if best_state is None or score > best_score:
                    best_score, best_state = score, self._get_state()
        if best_state is not None:
            self._set_state(best_state)
        if not self.converged_ and rule.ends_early:
            warnings.warn(rule.message(self), ConvergenceWarning,
                          stacklevel=_user_stacklevel())
        self._after_fit(X, y)
        return self

    def _clear_loop_attributes(self, stem):
        """Delete the attributes of a fitted run (before a fresh one)."""
        for name in _LOOP_ATTRIBUTES:
            if hasattr(self, name.format(stem)):
                delattr(self, name.format(stem))

    def _stopping_tol(self):
        """The tolerance of the stopping rule, or None when there is none.

        ``tol=None`` is a fixed budget of ``max_iter`` iterations, except
        with early stopping, whose patience rule then uses a tolerance of 0.
        """
        if self.tol is None:
            return 0.0 if self.early_stopping else None
        return self.tol

    def _run(self, X, y, X_val, y_val, rng, rule, init, n_init, start):
        """Up to ``max_iter`` iterations of one run, ended by ``rule``."""
        history = list(getattr(self, f"{rule.attribute}_history_", []))
        validation = None
        if X_val is not None:
            previous = getattr(self, "validation_scores_", None)
            validation = [] if previous is None else list(previous)
            # iterations of a warm-started history without a held-out score
            validation = [np.nan] * (len(history) - len(validation)) + validation
        best, best_state = -np.inf, None
        kept = getattr(self, "_best_validation_state", None)
        if X_val is not None and kept is not None:
            # a warm start on the same held-out rows: the best so far is that
            # of the fits before, and is restored if this one does not beat it
            best, best_state = self.best_validation_score_, kept
        converged = False
        prefix = f"init {init + 1}/{n_init}, " if n_init > 1 else ""
        for _ in range(self.max_iter):
            it = len(history) + 1
            value = self._checked_value(self._iterate(X, y, rng), rule.label, it)
            history.append(value)
            monitored = value
            if X_val is not None:
                monitored = self._checked_value(
                    self._elbo_per_sample(X_val, y_val), f"validation {rule.label}",
                    it)
                validation.append(monitored)
            if self.verbose:
                msg = f"{prefix}iteration {it}: {self._value_units(value, rule)}"
                if X_val is not None:
                    msg += f", validation {rule.label} {monitored:.4f}"
                self._report(f"{msg}, {time.perf_counter() - start:.2f} s")
            finished = rule.update(monitored, best, X_val is not None)
            finished = finished and self._may_stop()
            if monitored > best:
                best = monitored
                if X_val is not None:
                    best_state = self._get_state()
            if finished:
                converged = True
                break
        self._best_validation_state = None
        if best_state is not None:
            best_state = {key: value for key, value in best_state.items()
                          if key != "_best_validation_state"}
            if self.warm_start:
                # kept for the next warm fit, so restored from a copy: the
                # arrays set here are trained on in place by that fit
                self._set_state(copy.deepcopy(best_state))
                self._best_validation_state = best_state
            else:
                self._set_state(best_state)
        setattr(self, f"{rule.attribute}_history_",
                np.asarray(history, dtype=np.float64))
        self.n_iter_ = len(history)
        self.converged_ = converged
        if validation is not None:
            self.validation_scores_ = np.asarray(validation, dtype=np.float64)
            self.best_validation_score_ = float(best)
        else:
            self.validation_scores_ = None
            self.best_validation_score_ = None
        if self.verbose:
            if converged:
                state = "converged after"
            elif not rule.ends_early:
                state = "no convergence test (tol=None): ran"
            else:
                state = "did not converge after"
            self._report(f"{prefix}{state} {self.n_iter_} iterations")

    def _partial_fit_iteration(self, X, y=None):
        """One iteration on validated rows, initializing on the first call.

        Used by the estimators' ``partial_fit``: ``max_iter``, ``tol``,
        ``n_init`` and ``early_stopping`` do not apply; the history grows by
        one value per call and ``converged_`` is False.
        """
        if not self._is_initialized():
            rng = check_random_state(self.random_state)
            self.random_state_ = rng
            self._initialize(X, y, rng)
            self._record_structure()
            self.elbo_history_ = np.zeros(0)
            self.validation_scores_ = self.best_validation_score_ = None
        else:
            self._check_structure(
                "partial_fit continues the fitted model: fit anew, or set them back.")
        rule = self._stopping_rule()
        it = self.elbo_history_.size + 1
        start = time.perf_counter()
        value = self._checked_value(
            self._iterate(X, y, self.random_state_, partial=True), rule.label, it
        )
        self.elbo_history_ = np.append(self.elbo_history_, value)
        self.n_iter_ = self.elbo_history_.size
        if self.validation_scores_ is not None:
            # no held-out score for this iteration: keep one entry per iteration
            self.validation_scores_ = np.append(self.validation_scores_, np.nan)
        self.converged_ = False
        if self.verbose:
            self._report(f"partial_fit iteration {it}: "
                         f"{self._value_units(value, rule)}, "
                         f"{time.perf_counter() - start:.2f} s")
        self._after_fit(X, y)
        return self

    # ------------------------------------------------------------ public
    def elbo(self, X, y=None):
        """Evidence lower bound of new data, in nats per sample.

        The same quantity as ``elbo_``, for other rows: the true ELBO of the
        model's variational posterior for (X, y) per row (see each
        estimator's documentation for what a row is and how the ELBO is
        estimated). Terms that belong to no row (the KL divergence of global
        latent variables from their prior) are charged per *training* row, as
        in ``elbo_``, so that the value does not depend on how many rows are
        scored: on the training rows it equals ``elbo_``, and the held-out
        ELBO that early stopping monitors weighs them as training does.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, ...)
            Rows, as accepted by ``fit``.
        y : array-like of shape (n_samples,) or None
            Targets, for the supervised estimators; ignored otherwise.

        Returns
        -------
        elbo : float
            Nats per sample (higher is better).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X (or y) is not valid input for the fitted estimator.
        """
        self._check_fitted()
        X, y = self._check_elbo_input(X, y)
        return float(self._elbo_per_sample(X, y))
