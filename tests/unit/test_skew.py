"""The version-skew policy (lockstep.core.skew, docs/upgrades.md): an operator supports sidecars of its own
minor and the two before it, and up to two minors newer during a rollback; anything else, a missing or a
malformed version included, is outside the policy. The rule reads the major and minor only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep import __version__
from lockstep.core.skew import PREVIOUS_MINORS, SkewClass, Version, classify

numbers = st.integers(min_value=0, max_value=999)
suffixes = st.sampled_from(["", "-rc.1", "-alpha", "+build.7", "-rc.2+sha.abc"])


@pytest.mark.parametrize(("operator", "sidecar", "kind", "supported"), [
    ("0.2.0", "0.2.0", SkewClass.CURRENT, True),
    ("0.2.0", "0.2.7", SkewClass.CURRENT, True),
    ("0.4.1", "0.3.0", SkewClass.PREVIOUS, True),
    ("0.4.1", "0.2.9", SkewClass.PREVIOUS, True),
    ("0.4.1", "0.1.0", SkewClass.TOO_OLD, False),
    ("0.2.0", "0.3.0", SkewClass.ROLLBACK, True),  # helm rollback from 0.3 leaves 0.3 sidecars behind
    ("0.2.0", "0.4.0", SkewClass.ROLLBACK, True),
    ("0.2.0", "0.5.0", SkewClass.TOO_NEW, False),
    ("1.0.0", "0.9.0", SkewClass.OTHER_MAJOR, False),
    ("1.0.0", "2.0.0", SkewClass.OTHER_MAJOR, False),
    ("1.5.0", "1.3.2", SkewClass.PREVIOUS, True),
    ("0.2.0", None, SkewClass.MISSING, False),  # a sidecar from before 0.2.0 sends no version
    ("0.2.0", "", SkewClass.INVALID, False),
    ("0.2.0", "0.2", SkewClass.INVALID, False),
    ("0.2.0", "v0.2.0", SkewClass.INVALID, False),
    ("0.2.0", "0.2.0.dev1", SkewClass.INVALID, False),
    ("0.2.0", "00.2.0", SkewClass.INVALID, False),
])
def test_the_policy_table(operator: str, sidecar: str | None, kind: SkewClass, supported: bool) -> None:
    skew = classify(operator, sidecar)
    assert (skew.kind, skew.supported) == (kind, supported)


def test_the_operator_own_version_is_semver_and_supports_itself() -> None:
    assert Version.parse(__version__) is not None
    assert classify(__version__, __version__).kind is SkewClass.CURRENT
    with pytest.raises(ValueError, match="not a SemVer"):
        classify("latest", "0.2.0")


def test_the_message_names_both_versions_and_the_fix() -> None:
    message = classify("0.4.0", "0.1.3").message
    assert "0.1.3" in message and "0.4.0" in message and "0.2 to 0.4" in message
    assert "judged as usual" in message and "restart the pod" in message and "docs/upgrades.md" in message
    assert "older than 0.2.0" in classify("0.2.0", None).message
    assert "'nightly'" in classify("0.2.0", "nightly").message
    assert "restart" not in classify("0.2.0", "0.2.0").message


@given(numbers, numbers, numbers, suffixes)
def test_versions_round_trip(major: int, minor: int, patch: int, suffix: str) -> None:
    text = f"{major}.{minor}.{patch}{suffix}"
    version = Version.parse(text)
    assert version is not None and str(version) == text and version.line == f"{major}.{minor}"


@given(numbers, numbers, numbers, numbers, numbers, suffixes, suffixes)
def test_support_depends_on_major_and_minor_distance_only(major: int, minor: int, patch: int, their_minor: int,
                                                          their_patch: int, ours: str, theirs: str) -> None:
    skew = classify(f"{major}.{minor}.{patch}{ours}", f"{major}.{their_minor}.{their_patch}{theirs}")
    assert skew.supported == (abs(minor - their_minor) <= PREVIOUS_MINORS)
    assert (skew.kind is SkewClass.ROLLBACK) == (minor < their_minor <= minor + PREVIOUS_MINORS)
    assert skew.supported == classify(f"{major}.{minor}.0", f"{major}.{their_minor}.0").supported


@given(st.text(max_size=80))
def test_any_string_is_classified_never_raises(text: str) -> None:
    skew = classify("0.2.0", text)
    assert skew.kind in SkewClass and isinstance(skew.message, str)
    assert skew.supported == (Version.parse(text) is not None and Version.parse(text).line in {"0.0", "0.1", "0.2",
                                                                                               "0.3", "0.4"})


@given(numbers, numbers)
def test_another_major_is_never_supported(major: int, minor: int) -> None:
    assert not classify(f"{major}.{minor}.0", f"{major + 1}.{minor}.0").supported
    assert not classify(f"{major + 1}.{minor}.0", f"{major}.{minor}.0").supported
