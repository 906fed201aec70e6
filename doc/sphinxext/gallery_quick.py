"""Helpers for the sphinx-gallery configuration in ``doc/conf.py``.

They live in an importable module, not in ``conf.py``, so that
``sphinx_gallery_conf`` can refer to them by fully qualified name (a string).
A function object in the configuration cannot be pickled, which makes Sphinx
warn ("cannot cache unpickleable configuration value") and fails the build
under ``-W``.
"""


def reset_argv(gallery_conf, script_vars):
    """Command-line arguments of every example run during the doc build.

    Each example script accepts ``--quick`` (smaller data, fewer epochs), so
    that the whole gallery runs in a few minutes.

    Parameters
    ----------
    gallery_conf : dict
        The sphinx-gallery configuration (unused).
    script_vars : dict
        Information about the example being run (unused).

    Returns
    -------
    argv : list of str
        ``["--quick"]``, appended to ``sys.argv`` of the example.
    """
    return ["--quick"]
