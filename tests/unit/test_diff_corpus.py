"""The drift corpus: every case in tests/corpus/cases/ (format in tests/corpus/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lockstep.core.diff import diff_interfaces, diff_revisions
from lockstep.core.model import Interface, loads_strict
from lockstep.core.revision import Revision

CASES = Path(__file__).resolve().parent.parent / "corpus" / "cases"
CASE_FILES = sorted(CASES.glob("*.json"))


def load_side(case: dict[str, Any], side: str) -> Interface:
    if f"{side}Json" in case:
        return Interface.from_document(loads_strict(case[f"{side}Json"]))
    return Interface.from_document(case[side])


def test_corpus_holds_drift_and_no_drift_cases() -> None:
    expectations = [json.loads(path.read_text())["expected"]["drift"] for path in CASE_FILES]
    assert expectations.count(True) >= 20 and expectations.count(False) >= 5


@pytest.mark.parametrize("path", CASE_FILES, ids=[path.stem for path in CASE_FILES])
def test_corpus_case(path: Path) -> None:
    case = json.loads(path.read_text())
    ignore = case.get("ignore", [])
    approved, observed = load_side(case, "approved"), load_side(case, "observed")
    expected = case["expected"]
    approved_revision, observed_revision = Revision.of(approved, ignore), Revision.of(observed, ignore)
    assert (approved_revision.aggregate != observed_revision.aggregate) is expected["drift"]
    wanted = sorted((f["kind"], f["name"], f["change"], f["severity"]) for f in expected["findings"])
    for findings in (diff_interfaces(approved, observed, ignore),
                     diff_revisions(approved_revision, observed_revision, ignore)):
        got = sorted((f.kind.value, f.name, f.change.value, f.severity.value) for f in findings)
        assert got == wanted, [f.reasons for f in findings]
