"""Label-selector shards: the MCPServerInterface resources one operator release handles.

``lockstep operator --watch-label-selector 'lockstep.dev/shard=a'`` (env ``LOCKSTEP_WATCH_LABEL_SELECTOR``,
the convention of Flux's ``--watch-label-selector`` and KEDA's ``WATCH_LABEL_SELECTOR``) restricts the
operator to the resources whose labels match: kopf's ``labels=`` filter on the resource watch, and the
``labelSelector`` query of the list at start. Its pods are those its resources select; a pod that no
resource of the shard selects is another release's business and is left alone (docs/scale.md).

The text is Kubernetes' label selector syntax, as ``kubectl get -l`` takes it::

    LabelSelector.parse("lockstep.dev/shard in (a,b),!legacy,tier!=test")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

__all__ = ["LabelSelector", "Requirement"]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=(),]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One requirement of a selector: ``key`` with ``operator`` one of ``=``, ``!=``, ``in``, ``notin``,
    ``exists``, ``!`` (does not exist), and the values it compares with."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches_value(self, value: str | None) -> bool:
        """Whether a label value (None: the label is absent) meets the requirement. As in Kubernetes,
        ``!=`` and ``notin`` are met by an absent label."""
        if self.operator == "exists":
            return value is not None
        if self.operator == "!":
            return value is None
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return f"!{self.key}"
        if self.operator in ("=", "!="):
            return f"{self.key}{self.operator}{self.values[0]}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """The requirements of a label selector; all of them must hold (an empty selector matches everything)."""

    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse Kubernetes' selector syntax; ValueError names the part that is wrong."""
        requirements = []
        for part in _split(text):
            requirements.append(_requirement(part))
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(requirement.matches_value(labels.get(requirement.key)) for requirement in self.requirements)

    def kopf_labels(self) -> dict[str, Any]:
        """The same selector as kopf's ``labels=`` filter of a handler: a value for ``key=value``,
        kopf.PRESENT or kopf.ABSENT for existence, a callable for the rest (one entry per key)."""
        by_key: dict[str, list[Requirement]] = {}
        for requirement in self.requirements:
            by_key.setdefault(requirement.key, []).append(requirement)
        filters: dict[str, Any] = {}
        for key, requirements in by_key.items():
            if len(requirements) == 1 and requirements[0].operator == "=":
                filters[key] = requirements[0].values[0]
            elif len(requirements) == 1 and requirements[0].operator == "exists":
                filters[key] = kopf.PRESENT
            elif len(requirements) == 1 and requirements[0].operator == "!":
                filters[key] = kopf.ABSENT
            else:
                filters[key] = _value_filter(tuple(requirements))
        return filters

    def excludes(self, labels: Mapping[str, str] | None = None, **_: Any) -> bool:
        """kopf ``when=`` callback: the object's labels do not match (it is outside the shard)."""
        return not self.matches(labels)

    def __str__(self) -> str:
        """The canonical text: the value of a ``labelSelector`` query parameter."""
        return ",".join(str(requirement) for requirement in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


def _value_filter(requirements: tuple[Requirement, ...]) -> Callable[..., bool]:
    def matches(value: str | None, **_: Any) -> bool:
        return all(requirement.matches_value(value) for requirement in requirements)
    return matches


def _split(text: str) -> list[str]:
    """The requirements of ``text``: split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in label selector {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"unbalanced '(' in label selector {text!r}")
    parts.append(current)
    if len(parts) == 1 and not parts[0].strip():
        return []
    if any(not part.strip() for part in parts):
        raise ValueError(f"empty requirement in label selector {text!r}")
    return parts


def _requirement(part: str) -> Requirement:
    found = _SET.match(part)
    if found:
        values = tuple(value.strip() for value in found["values"].split(","))
        if not values or any(not value for value in values):
            raise ValueError(f"{part.strip()!r}: a set needs one or more non-empty values")
        return _checked(Requirement(found["key"], found["op"], tuple(sorted(set(values)))))
    found = _EQUALITY.match(part)
    if found:
        return _checked(Requirement(found["key"], "!=" if found["op"] == "!=" else "=", (found["value"],)))
    found = _EXISTS.match(part)
    if found:
        return _checked(Requirement(found["key"], "!" if found["neg"] else "exists"))
    raise ValueError(f"{part.strip()!r} is not a label selector requirement (key=value, key!=value, "
                     "key in (a,b), key notin (a,b), key, !key)")


def _checked(requirement: Requirement) -> Requirement:
    if len(requirement.key) > 316 or not _KEY.match(requirement.key):
        raise ValueError(f"{requirement.key!r} is not a valid label key")
    for value in requirement.values:
        if not _VALUE.match(value):
            raise ValueError(f"{value!r} is not a valid label value (of {requirement.key!r})")
    return requirement
