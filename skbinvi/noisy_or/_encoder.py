"""The MLP trunk of the amortized encoders (hidden layers only).

The input is a binary CSR batch, so the first layer is a sparse product,
O(nnz * hidden_layer_sizes[0]); the other layers are dense BLAS products. The
output heads (AVI: logits of q; ACP: dual variables psi at active features)
live in the estimator and in ``_kernels.py``. Gradients are written by hand,
as in scikit-learn's ``MLPClassifier``, and checked against finite
differences in ``tests/test_noisy_or_kernels.py``.
"""

import numpy as np

from .._numba import sparse_dot as _threaded_sparse_dot

# Multiply-adds from which the first layer's sparse product is split into row
# ranges on threads (scipy's product releases the GIL): measured on two cores
# (Intel Xeon, 2026-12-04), when each range was a sliced copy of the batch
# (now a view), timing each call of default fits on one thread or two at
# random, the split product was 1.4 to 3 times slower than one scipy product
# up to 2.3e6 multiply-adds (batches of 4,300 to 22,800 entries, 100 hidden
# units) and 0.8 times its time at 3.2e6.
PARALLEL_MIN_WORK = 3_000_000

#: Power of the document length by which the encoder's input row is divided:
#: 0.5 gives every binary row unit Euclidean norm. (1, the mean of the active
#: features' weights, made the first hidden layer's input so small that the
#: AVI encoder collapsed on 60-word documents: 0.70 against 0.86 accuracy on
#: the long-document test; 0, the sum, grows with the length.)
LENGTH_POWER = 0.5


def normalize_rows(X, indptr):
    """X with every row divided by the square root of its number of active features.

    The encoder sees a document of any length the same way: every binary
    row has unit Euclidean norm (as ``TfidfVectorizer(norm="l2")`` would give
    without idf weights), so the scale of the first hidden layer's input does
    not grow with the length. Empty rows stay empty.

    Parameters
    ----------
    X : csr_matrix of shape (B, D), binary
    indptr : int64 array of shape (B + 1,)
        ``X.indptr``.

    Returns
    -------
    csr_matrix of shape (B, D), float64
        Same structure as X (a new matrix; X is not modified).
    """
    lengths = np.diff(indptr)
    scale = 1.0 / np.maximum(lengths, 1) ** LENGTH_POWER
    data = np.repeat(scale, lengths) * X.data
    return type(X)((data, X.indices, X.indptr), shape=X.shape)


def init_layer(fan_in, fan_out, rng):
    """Glorot-uniform weights (as scikit-learn's MLP) and zero intercepts.

    Returns ``coef`` of shape (fan_in, fan_out) and ``intercept`` (fan_out,).
    """
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    coef = rng.uniform(-bound, bound, size=(fan_in, fan_out))
    return coef, np.zeros(fan_out)


def _activate(a, activation):
    if activation == "relu":
        return np.maximum(a, 0.0, out=a)
    return np.tanh(a, out=a)


def _activation_derivative(h, activation):
    """Derivative of the activation written in terms of its output h."""
    if activation == "relu":
        return (h > 0.0).astype(h.dtype)
    return 1.0 - h * h


def sparse_dot(X, W):
    """``X @ W`` for a CSR batch X and a dense W: the first layer's product,
    on threads from ``PARALLEL_MIN_WORK`` multiply-adds
    (:func:`skbinvi._numba.sparse_dot`; the same numbers as ``X @ W``).

    Parameters
    ----------
    X : csr_matrix of shape (B, D)
    W : ndarray of shape (D, H)

    Returns
    -------
    ndarray of shape (B, H)
    """
    return _threaded_sparse_dot(X, W, PARALLEL_MIN_WORK)


def forward(X, coefs, intercepts, activation):
    """Hidden activations of the MLP.

    Parameters
    ----------
    X : csr_matrix of shape (B, D)
    coefs, intercepts : lists of ndarray
        Hidden-layer weights, ``coefs[l]`` of shape (fan_in, fan_out).
    activation : {"relu", "tanh"}

    Returns
    -------
    hidden : list of ndarray
        ``hidden[l]`` has shape (B, coefs[l].shape[1]).
    """
    hidden = []
    a = sparse_dot(X, coefs[0])
    for layer, (coef, intercept) in enumerate(zip(coefs, intercepts, strict=True)):
        if layer > 0:
            a = hidden[-1] @ coef
        a += intercept
        hidden.append(_activate(np.asarray(a), activation))
    return hidden


def backward(X, hidden, coefs, g_top, activation):
    """Gradients of an objective with respect to the hidden-layer parameters.

    Parameters
    ----------
    X : csr_matrix of shape (B, D)
    hidden : list of ndarray
        Output of :func:`forward`.
    coefs : list of ndarray
    g_top : ndarray of shape (B, H_last)
        Gradient of the objective with respect to ``hidden[-1]``.
    activation : {"relu", "tanh"}

    Returns
    -------
    g_coefs, g_intercepts : lists of ndarray
        Same shapes as the parameters.
    """
    n_layers = len(coefs)
    g_coefs = [None] * n_layers
    g_intercepts = [None] * n_layers
    g = g_top
    for layer in range(n_layers - 1, -1, -1):
        delta = g * _activation_derivative(hidden[layer], activation)
        below = X if layer == 0 else hidden[layer - 1]
        g_coefs[layer] = np.asarray(below.T @ delta)
        g_intercepts[layer] = delta.sum(axis=0)
        if layer > 0:
            g = delta @ coefs[layer].T
    return g_coefs, g_intercepts
