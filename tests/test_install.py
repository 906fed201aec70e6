"""Installing, reinstalling as editable and uninstalling the package.

The sequence a user runs when the README's two commands follow each other:
``pip install .``, a fit (which compiles and caches kernels), then
``pip install -e .`` in the same environment, an import from another folder,
and ``pip uninstall``. The compiled-kernel cache must stay out of the install
folder: a cache left in ``site-packages/skbinvi`` after pip removed the
package turns it into an empty namespace package, which imports without
error and has no estimators.

The scratch environment gets the package with ``--no-deps``; its
dependencies come from the environment running the tests, through a ``.pth``
file (a folder named in a ``.pth`` file joins ``sys.path`` after the scratch
environment's own ``site-packages``, and its own ``.pth`` files, such as the
editable finder of the checkout under test, are not run).
"""

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FIT = (
    "import numpy as np\n"
    "from skbinvi import NoisyORFactorizer\n"
    "X = (np.random.default_rng(0).random((30, 12)) < 0.3).astype(float)\n"
    "NoisyORFactorizer(2, max_iter=1, random_state=0).fit(X)\n"
)
WHERE = (
    "import skbinvi\n"
    "from skbinvi import NoisyORFactorizer\n"
    "print(skbinvi.__file__)\n"
)


def _run(args, cwd, env):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@pytest.mark.slow
def test_install_reinstall_editable_uninstall(tmp_path):
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies of the environment running the tests
    (site / "_skbinvi_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install",
           "--quiet", "--no-deps"]

    _run(pip + [str(ROOT)], elsewhere, env)
    installed = site / "skbinvi"
    assert Path(_run([python, "-c", WHERE], elsewhere, env).strip()).parent == installed
    # the wheel carries the licence and the bundled data
    licence = list(site.glob("skbinvi-*.dist-info/licenses/LICENSE"))
    assert licence and licence[0].read_text() == (ROOT / "LICENSE").read_text()
    assert len(list((installed / "datasets" / "data").glob("*.npz"))) >= 6

    _run([python, "-c", FIT], elsewhere, env)
    cached = list((tmp_path / "user-cache" / "skbinvi" / "numba").rglob("*.nbi"))
    assert cached, "the fit cached no kernel in the user cache folder"
    assert not list(installed.rglob("*.nbi")), "kernels cached inside site-packages"

    _run(pip + ["-e", str(ROOT)], elsewhere, env)
    assert not installed.exists(), "pip left the installed package behind"
    where = Path(_run([python, "-c", WHERE], elsewhere, env).strip())
    assert where == ROOT / "skbinvi" / "__init__.py"
    _run([python, "-c", FIT], elsewhere, env)

    _run([sys.executable, "-m", "pip", "--python", str(python), "uninstall",
          "--quiet", "--yes", "skbinvi"], elsewhere, env)
    assert not installed.exists()
    assert not list(site.glob("__editable__*skbinvi*"))
    result = subprocess.run([python, "-c", "import skbinvi"], cwd=elsewhere, env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr
