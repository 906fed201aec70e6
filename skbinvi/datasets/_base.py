"""What the loaders of bundled data sets share."""

from importlib.resources import files


def _resource(*parts):
    """A file bundled in ``skbinvi.datasets`` (e.g. ``"data", "kinships.npz"``).

    Returns an :class:`importlib.resources.abc.Traversable`; works from an
    installed wheel as well as from a source checkout.
    """
    res = files("skbinvi.datasets")
    for part in parts:
        res = res / part
    return res
