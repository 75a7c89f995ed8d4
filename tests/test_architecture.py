"""Rules of the architecture that a refactor could silently break."""
import subprocess
import sys

from conftest import ROOT


def test_the_parent_side_never_imports_cuda():
    # Everything but the child's main() must import on a machine without a GPU, and the parent
    # must never initialise CUDA (a forked or reused CUDA context is the classic grader bug).
    code = ("import sys, grader.cli, grader.pipeline, grader.execute.runner, grader.execute.gpu_child, grader.report; "
            "assert not [m for m in sys.modules if m.startswith('pycuda')], 'pycuda imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
