"""The skip policy itself: a skip for a missing package fails the run; a hardware skip does not."""
import pytest

HEADER = "import pytest\nfrom hardware import needs_gpu, HARDWARE\n"


def run(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(test_toy=HEADER + body)
    return pytester.runpytest("-p", "skip_policy")


def test_a_missing_package_fails_the_run(pytester):
    result = run(pytester, "def test_x():\n    pytest.importorskip('no_such_package_here')\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skips that hide tests*", "*test_toy.py::test_x: could not import*"])


def test_a_module_level_importorskip_fails_the_run(pytester):
    result = run(pytester, "jsonschema = pytest.importorskip('no_such_package_here')\ndef test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_toy.py: could not import 'no_such_package_here'*"])


def test_a_plain_skip_fails_the_run(pytester):
    result = run(pytester, "@pytest.mark.skip(reason='flaky')\ndef test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_hardware_and_gpu_package_skips_pass(pytester):
    body = ("@pytest.mark.skipif(True, reason=f'{HARDWARE} no NVIDIA GPU')\ndef test_gpu():\n    pass\n"
            "def test_pycuda():\n    pytest.importorskip('pycuda.no_such_module')\n"
            "@pytest.mark.xfail(reason='known')\ndef test_xfail():\n    assert False\n"
            "def test_plain():\n    pass\n")
    result = run(pytester, body)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert "skips that hide tests" not in result.stdout.str()
