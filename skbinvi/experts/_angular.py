"""The mutual angular regularizer of [Xie] (main paper Eq. 12) and its gradient.

For vectors a_1, ..., a_K in R^p (the rows of A) let

    theta_ij = arccos(|a_i^T a_j| / (||a_i|| ||a_j||)),   0 <= theta_ij <= pi/2,

the non-obtuse angle between the lines spanned by a_i and a_j. The
regularizer is

    Omega(A) = mean_{i<j} theta_ij - gamma * var_{i<j} theta_ij,

mean and *population* variance (normalized by M, not M - 1) over the
M = K (K-1) / 2 unordered pairs. Because theta_ij = theta_ji, this equals the
ordered-pair form of the paper, (1/(K(K-1))) sum_{i != j} with the
variance normalized by K (K-1): every value is counted twice. Large Omega
means the vectors are spread out (large mean angle) and evenly so (small
variance). It is used by the posterior-regularization method
("pr", user guide section "Posterior regularization"; [Xie] supplement Eq. 19) as
lambda_1 Omega({E beta~_k}) + lambda_2 Omega({E eta~_k}); since
E a~_k = A_p(kappa^) a^_k and Omega is invariant to positive rescaling of
rows, Omega({E a~_k}) = Omega({a^_k}).

Numerics
--------
The angle is computed as theta_ij = atan2(||P_i s_ij u_j||, |u_i^T u_j|) with
u_i = a_i / ||a_i||, s_ij = sign(u_i^T u_j) (+1 at 0) and
P_i = I - u_i u_i^T, instead of arccos(|cos|): arccos loses all digits for
theta < 1e-8 (cos rounds to 1) and its derivative -1/sqrt(1 - cos^2) blows
up, whereas the norm of the perpendicular component is accurate for every
angle. The gradient uses the same perpendicular vectors (see
:func:`value_and_grad_unchecked`; the validated regularizer and gradient
functions the tests call live in tests/_reference/experts.py); no clipping
of |cos| is needed. Pairs with theta_ij <= ``PARALLEL_TOL`` (1e-10 rad) are
treated as parallel and contribute the subgradient 0.

Cost: O(K^2 p) time and memory (the K x K x p array of perpendicular
components).

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016, Eq. 12; P. Xie, Y. Deng, E. P. Xing,
"Diversifying Restricted Boltzmann Machine for Document Modeling", KDD 2015
(the regularizer and its optimization, referenced by the supplement,
section 4). The gradient formulas are our derivation [D], checked against
finite differences in tests/test_experts_angular.py.
"""

import numpy as np

__all__ = [
    "PARALLEL_TOL",
    "mutual_angles",
]

#: Angles (radians) at or below which a pair is treated as parallel: its
#: direction of steepest change is not resolved by float64 rounding (relative
#: error ~1e-16 / theta), and the pair contributes the subgradient 0.
PARALLEL_TOL = 1e-10


def _check_A(A):
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"A must be a 2-D array of shape (K, p) with K, p >= 1; "
                         f"got shape {A.shape}.")
    if not np.all(np.isfinite(A)):
        raise ValueError("A must be finite.")
    norms = np.linalg.norm(A, axis=1)
    if np.any(norms == 0.0):
        zero = np.flatnonzero(norms == 0.0)
        raise ValueError(f"rows {zero.tolist()} of A are zero vectors; the angle "
                         "to a zero vector is undefined.")
    return A, norms


def _geometry(A, norms):
    """Unit rows, cosines, perpendicular components, sines and angles."""
    U = A / norms[:, None]
    cos = np.clip(U @ U.T, -1.0, 1.0)
    abs_cos = np.abs(cos)
    sign = np.where(cos >= 0.0, 1.0, -1.0)
    # perp[i, j] = P_i (s_ij u_j) = s_ij u_j - |c_ij| u_i, of norm sin(theta_ij)
    perp = sign[:, :, None] * U[None, :, :] - abs_cos[:, :, None] * U[:, None, :]
    sin = np.linalg.norm(perp, axis=2)
    theta = np.arctan2(sin, abs_cos)
    theta = 0.5 * (theta + theta.T)  # symmetric to rounding
    np.fill_diagonal(theta, 0.0)
    return U, cos, perp, sin, theta


def mutual_angles(A):
    """Pairwise non-obtuse angles theta_ij between the rows of A, in radians.

    Parameters
    ----------
    A : array_like of shape (K, p)
        Nonzero, finite rows a_1, ..., a_K.

    Returns
    -------
    theta : ndarray of float64 of shape (K, K)
        Symmetric, zero diagonal, entries in [0, pi/2]:
        theta_ij = arccos(|a_i^T a_j| / (||a_i|| ||a_j||)), computed stably as
        atan2(||P_i s_ij u_j||, |u_i^T u_j|) (module docstring).

    Raises
    ------
    ValueError
        If A is not 2-D, not finite, or has a zero row.
    """
    A, norms = _check_A(A)
    return _geometry(A, norms)[4]


def value_and_grad_unchecked(A, norms, gamma, need_grad):
    """Omega of the rows of A (norms given, non-zero) and its gradient, no checks.

    The body of :func:`mutual_angular_value_and_gradient` after validation,
    called directly by the inner ascent (``skbinvi.experts._ascent``) whose
    inputs are valid by construction.
    """
    K = A.shape[0]
    if K == 1:
        return 0.0, (np.zeros_like(A) if need_grad else None)
    U, cos, perp, sin, theta = _geometry(A, norms)
    iu = np.triu_indices(K, k=1)
    pairs = theta[iu]
    M = pairs.size
    mean = pairs.mean()
    var = np.mean((pairs - mean) ** 2)
    value = float(mean - gamma * var)
    if not need_grad:
        return value, None
    # dOmega/dtheta_ij for the unordered pair {i, j}
    weight = (1.0 - 2.0 * gamma * (theta - mean)) / M
    usable = (sin > 0.0) & (theta > PARALLEL_TOL) & (cos != 0.0)
    np.fill_diagonal(usable, False)
    coef = np.zeros_like(theta)
    coef[usable] = weight[usable] / sin[usable]
    grad = -np.einsum("ij,ijp->ip", coef, perp) / norms[:, None]
    # dOmega/da_i is orthogonal to a_i (Omega is scale invariant); remove the
    # radial rounding residue
    grad -= np.sum(grad * U, axis=1, keepdims=True) * U
    return value, grad


