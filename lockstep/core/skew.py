"""The version-skew policy: which sidecar versions an operator accepts (docs/upgrades.md).

A pure rule on two versions, the operator's own and the one a sidecar's report carries
(``sidecarVersion``, lockstep.core.report.Freshness):

- **supported**: the operator's own minor and the two minors before it, in the same major (0.x counts
  minors the same way: operator 0.4 supports sidecars 0.2, 0.3 and 0.4, any patch);
- **supported for rollback**: a sidecar newer than its operator by at most two minors, in the same major
  (a ``helm rollback`` undoes an upgrade, which the policy bounds the same way; the operator reads what it
  knows of a newer report and ignores the rest);
- **outside the policy**: older than that, newer than that, another major, no version at all (a sidecar
  from before 0.2.0), or a version that is not ``MAJOR.MINOR.PATCH[-pre][+build]``.

Outside the policy a report is still judged as usual: a version is never a reason for a verdict. The
operator says so once per pod (a Warning Event) and counts such pods in a metric
(the operator's skew_watch module).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["PREVIOUS_MINORS", "Skew", "SkewClass", "Version", "classify"]

#: Minors before the operator's own whose sidecars it supports (and minors after it, for a rollback).
PREVIOUS_MINORS = 2

_SEMVER = re.compile(r"^(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})"
                     r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")


@dataclass(frozen=True)
class Version:
    """A SemVer version; the policy reads its major and minor only."""

    major: int
    minor: int
    patch: int
    #: ``-pre`` and ``+build`` as written (empty for a release).
    suffix: str = ""

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """``MAJOR.MINOR.PATCH[-pre][+build]`` (at most 64 characters), else None."""
        match = _SEMVER.match(text) if len(text) <= 64 else None
        if match is None:
            return None
        suffix = (f"-{match[4]}" if match[4] else "") + (f"+{match[5]}" if match[5] else "")
        return cls(int(match[1]), int(match[2]), int(match[3]), suffix)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}{self.suffix}"

    @property
    def line(self) -> str:
        """``MAJOR.MINOR``: what the policy counts in."""
        return f"{self.major}.{self.minor}"


class SkewClass(str, enum.Enum):
    CURRENT = "Current"  # the operator's own minor
    PREVIOUS = "Previous"  # one of the PREVIOUS_MINORS minors before it
    ROLLBACK = "Rollback"  # newer than the operator, within PREVIOUS_MINORS minors (after a helm rollback)
    TOO_OLD = "TooOld"
    TOO_NEW = "TooNew"
    OTHER_MAJOR = "OtherMajor"
    MISSING = "Missing"  # no version: a sidecar from before 0.2.0
    INVALID = "Invalid"  # not a SemVer version


SUPPORTED = frozenset({SkewClass.CURRENT, SkewClass.PREVIOUS, SkewClass.ROLLBACK})


@dataclass(frozen=True)
class Skew:
    """Where a sidecar's version stands against its operator's."""

    kind: SkewClass
    operator: Version
    #: The version as the report carried it (None: it carried none).
    sidecar: str | None

    @property
    def supported(self) -> bool:
        return self.kind in SUPPORTED

    @property
    def window(self) -> str:
        """The sidecar versions this operator supports, in words."""
        major, minor = self.operator.major, self.operator.minor
        lowest = f"{major}.{max(0, minor - PREVIOUS_MINORS)}"
        return (f"{lowest} to {self.operator.line}, and up to {major}.{minor + PREVIOUS_MINORS} "
                f"during a rollback")

    @property
    def message(self) -> str:
        """One line for an Event: the versions, what happens, and the fix."""
        if self.kind is SkewClass.MISSING:
            found = "reports no version (a sidecar older than 0.2.0)"
        elif self.kind is SkewClass.INVALID:
            found = f"reports version {self.sidecar!r}, which is not a SemVer version"
        else:
            found = f"is version {self.sidecar}"
        if self.supported:
            return f"The Lockstep sidecar {found}; operator {self.operator} supports {self.window}."
        return (f"The Lockstep sidecar {found}, outside the version-skew policy of operator {self.operator} "
                f"(it supports sidecars {self.window}). Its reports are judged as usual; restart the pod "
                "(kubectl rollout restart of its workload) to get the sidecar of this operator. "
                "See docs/upgrades.md.")


def classify(operator: str | Version, sidecar: str | None) -> Skew:
    """The policy's class of a sidecar reporting ``sidecar`` to an operator of version ``operator``.
    Raises ValueError when the operator's own version is not SemVer (a build error, caught by a test)."""
    own = operator if isinstance(operator, Version) else Version.parse(operator)
    if own is None:
        raise ValueError(f"the operator's version {operator!r} is not a SemVer version")
    if sidecar is None:
        return Skew(SkewClass.MISSING, own, None)
    theirs = Version.parse(sidecar)
    if theirs is None:
        return Skew(SkewClass.INVALID, own, sidecar)
    if theirs.major != own.major:
        return Skew(SkewClass.OTHER_MAJOR, own, sidecar)
    distance = own.minor - theirs.minor  # minors the sidecar is behind (negative: ahead)
    if distance == 0:
        kind = SkewClass.CURRENT
    elif 0 < distance <= PREVIOUS_MINORS:
        kind = SkewClass.PREVIOUS
    elif distance > PREVIOUS_MINORS:
        kind = SkewClass.TOO_OLD
    elif -distance <= PREVIOUS_MINORS:
        kind = SkewClass.ROLLBACK
    else:
        kind = SkewClass.TOO_NEW
    return Skew(kind, own, sidecar)
