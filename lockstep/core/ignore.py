"""Ignore rules: reviewed JSON pointers of volatile fields, removed before digesting.

A rule is a JSON pointer (RFC 6901) into the interface document whose second
token, the component's index, must be ``*`` (list order carries no meaning);
deeper tokens may be ``*`` too, matching every index of a list or every key of
an object. A rule must name a field inside a component, never a whole
component or list, so that no rule can hide a new tool::

    /tools/*/_meta/com.example~1build     the _meta field "com.example/build" of every tool
    /resources/*/annotations/lastModified  a timestamp that changes on every read
    /instructions                          the server's instructions, whole
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.core.errors import IgnoreRuleError
from lockstep.core.model import Component, ComponentKind

__all__ = ["IgnoreRule", "IgnoreRules", "parse_ignore_rules"]

WILDCARD = "*"


@dataclass(frozen=True)
class IgnoreRule:
    """One parsed rule: a component kind and the path inside each component."""

    pointer: str
    kind: ComponentKind
    path: tuple[str, ...]

    @classmethod
    def parse(cls, pointer: str) -> IgnoreRule:
        if not isinstance(pointer, str) or not pointer.startswith("/"):
            raise IgnoreRuleError(f"ignore rule {pointer!r} is not a JSON pointer (it must start with '/')")
        tokens = [_unescape(token, pointer) for token in pointer[1:].split("/")]
        try:
            kind = ComponentKind.from_list_key(tokens[0])
        except KeyError:
            raise IgnoreRuleError(
                f"ignore rule {pointer!r} must start with /instructions, /tools, /prompts, /resources "
                "or /resourceTemplates"
            ) from None
        if kind is ComponentKind.INSTRUCTIONS:
            if len(tokens) != 1:
                raise IgnoreRuleError(f"ignore rule {pointer!r}: instructions are a string, use /instructions")
            return cls(pointer, kind, ())
        if len(tokens) < 3 or any(token == "" for token in tokens[2:3]):
            raise IgnoreRuleError(
                f"ignore rule {pointer!r} must name a field inside a component, "
                f"such as /{tokens[0]}/*/_meta/<field>; a rule may never hide whole components"
            )
        if tokens[2] == WILDCARD:
            raise IgnoreRuleError(
                f"ignore rule {pointer!r} must name the field it ignores; '*' there would ignore every field"
            )
        if tokens[1] != WILDCARD:
            raise IgnoreRuleError(
                f"ignore rule {pointer!r}: the component index must be '*', since list order means nothing"
            )
        if tokens[2] == kind.key_field and len(tokens) == 3:
            raise IgnoreRuleError(f"ignore rule {pointer!r} would remove the component's key {kind.key_field!r}")
        return cls(pointer, kind, tuple(tokens[2:]))

    def apply(self, component: Component) -> Component | None:
        """The component with this rule's fields removed; None if the rule drops it (instructions)."""
        if component.kind is not self.kind:
            return component
        if not self.path:
            return None
        definition = copy.deepcopy(component.definition)
        _remove(definition, self.path)
        return Component(component.kind, component.name, definition)


@dataclass(frozen=True)
class IgnoreRules:
    """An ordered set of ignore rules."""

    rules: tuple[IgnoreRule, ...] = ()

    def apply(self, component: Component) -> Component | None:
        result: Component | None = component
        for rule in self.rules:
            if result is None:
                break
            result = rule.apply(result)
        return result

    @property
    def pointers(self) -> list[str]:
        return [rule.pointer for rule in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)


def parse_ignore_rules(pointers: Iterable[str] | IgnoreRules | None) -> IgnoreRules:
    """Parse pointers into rules, raising IgnoreRuleError for the first bad one."""
    if isinstance(pointers, IgnoreRules):
        return pointers
    return IgnoreRules(tuple(IgnoreRule.parse(pointer) for pointer in pointers or ()))


def _unescape(token: str, pointer: str) -> str:
    if "~" in token.replace("~0", "").replace("~1", ""):
        raise IgnoreRuleError(f"ignore rule {pointer!r}: '~' must be escaped as ~0 (and '/' as ~1)")
    return token.replace("~1", "/").replace("~0", "~")


def _remove(value: Any, path: Sequence[str]) -> None:
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if head == WILDCARD else [head] if head in value else []
        for key in keys:
            if rest:
                _remove(value[key], rest)
            else:
                del value[key]
    elif isinstance(value, list):
        if head == WILDCARD:
            indexes = range(len(value))
        elif head.isdigit() and int(head) < len(value):
            indexes = range(int(head), int(head) + 1)
        else:
            return
        if rest:
            for index in indexes:
                _remove(value[index], rest)
        else:
            for index in sorted(indexes, reverse=True):
                del value[index]
