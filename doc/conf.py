"""Sphinx configuration for the skbinvi documentation.

Build (from the repository root)::

    python -m sphinx -W --keep-going -b html doc doc/_build/html

Neither the build nor the built pages need network access: there is no
intersphinx, MathJax is copied into the output (``sphinx-mathjax-offline``)
rather than loaded from a CDN, and the theme is configured without remote
assets.
Set ``SKBINVI_DOC_NO_GALLERY_RUN=1`` to build without executing the examples.
"""

import os
import sys
from pathlib import Path

# Make ``import skbinvi`` work from a source checkout without installing it,
# and make the local helpers in doc/sphinxext/ importable.
DOC_DIR = Path(__file__).resolve().parent
REPO_ROOT = DOC_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(DOC_DIR / "sphinxext"))

import skbinvi  # noqa: E402

# -- Project information -----------------------------------------------------

project = "skbinvi"
author = "skbinvi developers"
copyright = "skbinvi developers"
version = skbinvi.__version__
release = skbinvi.__version__

# -- General configuration ---------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax shipped in _static/, not from a CDN
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "bench_tables",  # doc/sphinxext: tables rendered from benchmarks/results
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"
default_role = "literal"

# autodoc / autosummary: one page per public object in doc/generated/
# (git-ignored), written from the templates in doc/_templates/autosummary/.
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": True}
autodoc_typehints = "none"

# numpydoc renders the docstrings; the class template lists the methods itself.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

# -- sphinx-gallery ----------------------------------------------------------


# Every example accepts ``--quick`` (smaller data, fewer epochs); the build runs
# them that way. ``reset_argv`` is given by its fully qualified name because a
# function object in the configuration cannot be pickled by Sphinx.
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "doc_module": ("skbinvi",),
    "backreferences_dir": "generated",
    "filename_pattern": "/plot_",
    "reference_url": {"skbinvi": None},
    "reset_argv": "gallery_quick.reset_argv",
}

if os.environ.get("SKBINVI_DOC_NO_GALLERY_RUN", "0") == "1":
    # Write the gallery pages from the sources without executing the scripts.
    sphinx_gallery_conf["plot_gallery"] = "False"

# -- HTML output -------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"skbinvi {release}"
html_static_path = []
html_theme_options = {
    # Nothing that needs the network: no icon links, no version switcher,
    # no analytics.
    "icon_links": [],
    "navbar_end": ["theme-switcher", "navbar-icon-links"],
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_sidebars = {"install": [], "api": [], "benchmarks": []}
html_show_sourcelink = False

# -- Links to scikit-learn without intersphinx --------------------------------
# Docstrings inherited from scikit-learn (set_output, fit_transform, ...) and
# the parameter descriptions copied from scikit-learn's conventions use
# :term:`...` roles for scikit-learn's glossary. Without intersphinx these would
# be unresolved references (warnings, hence errors under -W). They are resolved
# here to plain hyperlinks, which needs no network at build time. Anything not
# covered below still produces a warning.

SKLEARN_URL = "https://scikit-learn.org/stable/"

# Labels of scikit-learn's own documentation used in inherited docstrings.
SKLEARN_REFS = {
    "metadata_routing": "metadata_routing.html",
    "accuracy_score": "modules/model_evaluation.html#accuracy-score",
    "df_output_transform": "modules/df_output_transform.html",
    "sphx_glr_auto_examples_miscellaneous_plot_set_output.py": (
        "auto_examples/miscellaneous/plot_set_output.html"
    ),
}


def _sklearn_missing_reference(app, env, node, contnode):
    from docutils import nodes
    from sphinx.util.nodes import _make_id

    domain = node.get("refdomain")
    reftype = node.get("reftype")
    target = node.get("reftarget", "")
    url = None
    if domain == "std" and reftype == "term":
        url = SKLEARN_URL + "glossary.html#" + _make_id("term-" + target)
    elif domain == "std" and reftype == "ref" and target in SKLEARN_REFS:
        url = SKLEARN_URL + SKLEARN_REFS[target]
    elif domain == "py" and target.startswith("sklearn.") and target.count(".") >= 2:
        # Public classes and functions have one page each in scikit-learn's API
        # reference; methods and attributes are left unresolved (plain text).
        name = target.rsplit(".", 1)[1]
        if name[:1].isupper() or reftype == "func":
            url = SKLEARN_URL + "modules/generated/" + target + ".html"
    if url is None:
        return None
    newnode = nodes.reference("", "", internal=False, refuri=url, reftitle=target)
    newnode.append(contnode)
    return newnode


def setup(app):
    app.connect("missing-reference", _sklearn_missing_reference)
