"""First-order optimizers for the gradient-based inference methods."""

import numpy as np


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
        """Take one ascent step along ``grads`` (same order as ``params``)."""
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        lr = (self.learning_rate * np.sqrt(1.0 - b2**self.t)
              / (1.0 - b1**self.t))
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            p += lr * m / (np.sqrt(v) + self.epsilon)
