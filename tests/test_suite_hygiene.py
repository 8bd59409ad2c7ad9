"""The suite's own guard: a system path that appears on the host during a test fails that
test, with what was found and when, checked around every test (tests/conftest.py)."""

import os
import re

from tests.conftest import HOST_PATHS, ROOT

pytest_plugins = ["pytester"]


def test_the_guard_names_the_test_and_what_it_found(pytester, tmp_path):
    target = tmp_path / "opt-kgen"
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert 'HOST_PATHS = ("/opt/kgen",)' in conftest
    pytester.makeconftest(conftest.replace('HOST_PATHS = ("/opt/kgen",)', f"HOST_PATHS = ({str(target)!r},)"))
    pytester.makepyfile(
        test_inner=f"""
import os

def test_before():
    pass

def test_makes_it():
    os.mkdir({str(target)!r})
    open(os.path.join({str(target)!r}, "kgen_entrypoint.py"), "w").close()

def test_after_it_was_there():
    pass
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    out = result.stdout.str()
    assert re.search(
        r"test_inner\.py::test_makes_it left a system path on the host: \S*opt-kgen: a folder "
        r"\(owner uid \d+, mode 0\d{3}\) holding \['kgen_entrypoint\.py'\], changed \d+\.\d s after this test started",
        out,
    ), out
    assert "test_after_it_was_there left" not in out  # there before that test: not its doing


def test_the_host_has_no_opt_kgen_from_this_suite():
    assert HOST_PATHS == ("/opt/kgen",)
    # the guard runs around this very test too; here the state it starts from, for the report
    print(f"/opt/kgen on this host: {'present (not made by this test)' if os.path.lexists('/opt/kgen') else 'absent'}")


def test_no_two_test_modules_share_a_name():
    """tests/ has no packages (pytest's default rootdir-relative 'prepend' import): two test files of one
    basename in different folders stop the whole suite at collection ("import file mismatch"), which a run
    of one folder never shows. tests/slurm/test_adapter.py beside tests/baremetal/test_adapter.py did."""
    seen: dict[str, str] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == "conftest.py" or "fixtures" in path.parts:
            continue
        rel = str(path.relative_to(ROOT))
        if path.name in seen:
            clashes.append(f"{seen[path.name]} and {rel}")
        seen.setdefault(path.name, rel)
    assert not clashes, clashes
