"""First-order optimizers for the gradient-based inference methods."""

import math

import numpy as np

from ._numba import njit


@njit
def _adam_update(param, grad, m, v, step_size, beta1, beta2, epsilon):
    """One fused Adam ascent step on flat views, in place (one pass, no temporaries).

    Equivalent to ``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g**2;
    param += step_size * m / (sqrt(v) + epsilon)``.
    """
    for j in range(param.shape[0]):
        g = grad[j]
        m[j] = beta1 * m[j] + (1.0 - beta1) * g
        v[j] = beta2 * v[j] + (1.0 - beta2) * g * g
        param[j] += step_size * m[j] / (math.sqrt(v[j]) + epsilon)


class Adam:
    """Adam (Kingma & Ba, 2015) for a list of arrays, *ascending* an objective.

    Parameters
    ----------
    params : list of ndarray
        Arrays updated in place by :meth:`step`.
    learning_rate : float
        Step size.
    beta1, beta2 : float
        Exponential decay rates of the first and second moment estimates.
    epsilon : float
        Added to the square root of the second moment estimate.

    Notes
    -----
    The state (``t``, ``m``, ``v``) is kept on the instance, so an estimator
    that stores its ``Adam`` resumes exactly where it stopped (``partial_fit``).
    """

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999,
                 epsilon=1e-8):
        self.params = params
        self.learning_rate = learning_rate
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.t = 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, grads):
        """Take one ascent step along ``grads`` (same order as ``params``).

        Every parameter must be a C-contiguous array (updated in place).
        """
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        lr = (self.learning_rate * np.sqrt(1.0 - b2**self.t)
              / (1.0 - b1**self.t))
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            _adam_update(p.reshape(-1), np.ascontiguousarray(g).reshape(-1),
                         m.reshape(-1), v.reshape(-1), lr, b1, b2, self.epsilon)
