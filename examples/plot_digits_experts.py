"""
=====================================================================
What a mixture of linear experts shows: even against odd digits
=====================================================================

Even against odd digits is a task that no single hyperplane solves well: the
even digits 0, 2, 4, 6, 8 share no stroke that the odd ones lack. A mixture
of experts splits the images by its gate and fits one logistic regression in
each region. Unlike a boosted ensemble of trees, every part of the fitted
model can be read: which images each expert takes (here, which digits) and,
inside its region, which pixels push an image towards "even" (the expert's
coefficients, an 8 x 8 image).

Data: scikit-learn's :func:`~sklearn.datasets.load_digits` (1,797 images of
8 x 8 pixels), standardized, 30% held out. The mixture
(:class:`~skbinvi.DiversityMixtureOfExperts`, every setting at its default)
is compared with :class:`~sklearn.linear_model.LogisticRegression` and
:class:`~sklearn.ensemble.HistGradientBoostingClassifier` on the same split.

Run ``python plot_digits_experts.py`` (seconds; ``--quick`` is accepted and
runs the same); the figure is saved in ``--output`` (default: the current
folder).
"""

import argparse
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbinvi import DiversityMixtureOfExperts

parser = argparse.ArgumentParser(description="A mixture of experts on digits.")
parser.add_argument("--quick", action="store_true", help="the same run (it is short)")
parser.add_argument("--output", default=".", help="folder of the saved figure")
args, _ = parser.parse_known_args()

digits = load_digits()
X, y_digit = digits.data, digits.target
y = (y_digit % 2 == 0).astype(int)  # 1: an even digit
X_train, X_test, y_train, y_test, d_train, d_test = train_test_split(
    X, y, y_digit, test_size=0.3, random_state=0, stratify=y_digit)

# %%
# One model of each kind on the same split
# ----------------------------------------
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    mixture = make_pipeline(StandardScaler(), DiversityMixtureOfExperts(random_state=0))
    mixture.fit(X_train, y_train)
linear = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
linear.fit(X_train, y_train)
boosting = HistGradientBoostingClassifier(random_state=0).fit(X_train, y_train)
for name, model in (("mixture of experts", mixture), ("logistic regression", linear),
                    ("gradient boosting", boosting)):
    print(f"{name:20s} test accuracy {model.score(X_test, y_test):.4f}")

# %%
# The region of each expert, and its coefficients
# -----------------------------------------------
# ``transform`` gives the gate's probabilities p(expert k | x). Each test
# image goes to its most probable expert; the digits an expert takes are its
# region, and its coefficients (one per pixel) say how, inside that region,
# each pixel moves the log-odds of "even".
moe = mixture[-1]
gate = mixture.transform(X_test)
region = np.argmax(gate, axis=1)
in_use = [k for k in np.argsort(-np.bincount(region, minlength=moe.n_components))
          if np.mean(region == k) >= 0.02]
print(f"experts in use (n_active_components_): {moe.n_active_components_[0]} of "
      f"{moe.n_components}")
for k in in_use:
    rows = region == k
    counts = np.bincount(d_test[rows], minlength=10)
    share = counts / counts.sum()
    main = [str(d) for d in np.argsort(-share) if share[d] >= 0.1]
    accuracy = np.mean(mixture.predict(X_test[rows]) == y_test[rows])
    print(f"expert {k}: {rows.mean():.0%} of the test images, mostly digits "
          f"{', '.join(main)}; accuracy there {accuracy:.3f}")

fig, axes = plt.subplots(2, len(in_use), figsize=(2.2 * len(in_use), 4.6),
                         squeeze=False)
for j, k in enumerate(in_use):
    rows = region == k
    counts = np.bincount(d_test[rows], minlength=10)
    axes[0, j].bar(range(10), counts / counts.sum(),
                   color=["tab:blue" if d % 2 == 0 else "tab:orange"
                          for d in range(10)])
    axes[0, j].set_xticks(range(10))
    axes[0, j].set_title(f"expert {k}: {rows.mean():.0%}", fontsize=9)
    axes[0, j].set_ylim(0, 1)
    coef = moe.expert_coef_[0, k].reshape(8, 8)
    limit = np.abs(coef).max()
    axes[1, j].imshow(coef, cmap="RdBu_r", vmin=-limit, vmax=limit)
    axes[1, j].set_xticks([])
    axes[1, j].set_yticks([])
axes[0, 0].set_ylabel("share of its images\nby digit (blue: even)")
axes[1, 0].set_ylabel("coefficients\n(red: towards even)")
fig.suptitle("Each expert's region (top) and its pixels (bottom)")
fig.tight_layout()
os.makedirs(args.output, exist_ok=True)
path = os.path.join(args.output, "digits_experts.png")
fig.savefig(path, dpi=120)
print(f"saved {path}")
