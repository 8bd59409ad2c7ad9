"""Names that explain themselves: code, tests and docs say what a thing does, never which tracker entry asked for
it ("issue N", an undefined "contract Cn"), and no test file is named after one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACKER = re.compile(r"\bissues? ?#?[0-9]+|contract " + "C[0-9]", re.IGNORECASE)
PLACES = ("kgen", "tests", "docs", "bench", ".ci", "entrypoint")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sbatch", ".txt", ""}


def _texts():
    yield ROOT / "README.md"
    for place in PLACES:
        for path in sorted((ROOT / place).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                yield path


def test_no_tracker_numbers_in_code_tests_or_docs():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for path in _texts()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert not found, "\n".join(found)


def test_no_test_is_named_after_a_tracker_entry():
    assert not [p.name for p in (ROOT / "tests").rglob("test_*.py") if re.match(r"test_(issue|bug|gh)_?\d", p.name)]


def test_the_check_can_fail():
    assert TRACKER.search("see issue" + " 24.3") and TRACKER.search("(contract " + "C4)")
    assert not TRACKER.search("the issues a user hit") and not TRACKER.search("KG104")
