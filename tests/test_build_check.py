"""The import from a source tree without a built kernel explains the real fix.

After ``pip install .``, Python started in the repository's root imports the source folder
(the current directory comes first on ``sys.path``), which has no compiled kernel.  Simulated
here: a copy of the package's Python files without the extension, and the built package on
``PYTHONPATH`` standing for the installed one.
"""
import os
import shutil
import subprocess
import sys

import aflite_fast


def test_source_tree_without_kernel_names_both_copies_and_the_fixes(tmp_path, child_process):
    installed = os.path.dirname(os.path.abspath(aflite_fast.__file__))
    repo = tmp_path / "repo"
    shutil.copytree(installed, repo / "aflite_fast",
                    ignore=lambda folder, names: [n for n in names if not n.endswith(".py") and n not in ("cli", "io", "experiments", "core", "phase", "filtering", "runtime")])
    assert not list((repo / "aflite_fast").rglob("_kernel*.so"))
    env = {**child_process["env"], "PYTHONPATH": os.path.dirname(installed)}
    code = "import aflite_fast.core.solver"
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    message = " ".join(proc.stderr.split())
    assert f"This aflite_fast is the source folder {repo / 'aflite_fast'}, whose kernel was not built" in message
    assert f"An installed aflite_fast at {installed} is hidden by it" in message
    assert "start Python in another directory" in message and "python setup.py build_ext --inplace" in message
    assert "--no-build-isolation" not in message
    # the first fix works: from another directory the installed package is imported
    proc = subprocess.run([sys.executable, "-c", code + "; print(aflite_fast.core.solver.__file__)"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == os.path.join(installed, "core", "solver.py")
