"""Schema widening: the ways a new JSON Schema accepts more than the old one (docs/severity.md).

:func:`schema_widenings` names them as short reasons: new properties, fewer
required, looser bounds, wider types, extended enums, ... A changed constraint
whose effect cannot be decided here counts as a widening.
"""

from __future__ import annotations

from typing import Any

from lockstep.core.canonical import canonical_json, is_json_number, json_equal
from lockstep.core.model import escape_pointer_token
from lockstep.core.wording import json_scalar, listing

__all__ = ["schema_widenings"]


# Keywords that describe a value without constraining it.
_ANNOTATION_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment",
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "contentMediaType", "contentSchema",
    "example", "x-order",
})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"})
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"})
_NUMERIC_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
_DEFINITION_MAPS = frozenset({"$defs", "definitions"})
_SCHEMA_SINGLES = frozenset({"items", "additionalItems", "contains", "propertyNames", "unevaluatedItems",
                             "unevaluatedProperties"})
_OPEN_WHEN_ABSENT = frozenset({"additionalProperties", "additionalItems", "unevaluatedItems",
                               "unevaluatedProperties"})
_HANDLED = (_UPPER_BOUNDS | _LOWER_BOUNDS | _SCHEMA_MAPS | _DEFINITION_MAPS | _SCHEMA_SINGLES | _OPEN_WHEN_ABSENT
            | {"type", "enum", "const", "required", "prefixItems", "anyOf", "oneOf", "allOf", "uniqueItems",
               "nullable"})


def schema_widenings(old: Any, new: Any, pointer: str = "") -> list[str]:
    """Ways in which schema ``new`` accepts values that schema ``old`` refused, as short reasons.

    Conservative: a changed constraint whose effect cannot be decided here (a new
    pattern, a changed $ref) counts as a widening.
    """
    if json_equal(old, new):
        return []
    old, new = _as_schema(old), _as_schema(new)
    where = pointer or "/"
    if old is False:
        return [f"{where} was false (refused every value) and now accepts values"]
    if new is True:
        return [f"{where} now accepts anything"]
    if old is True or new is False:
        return []
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [f"{where} changed shape"]
    reasons: list[str] = []
    reasons += _type_widenings(old, new, where)
    reasons += _value_set_widenings(old, new, where)
    reasons += _required_widenings(old, new, where)
    reasons += _bound_widenings(old, new, where)
    reasons += _subschema_widenings(old, new, pointer)
    reasons += _other_constraint_widenings(old, new, where)
    return reasons


def _as_schema(schema: Any) -> Any:
    """Booleans stand for themselves; an empty object accepts anything, like ``true``."""
    if isinstance(schema, dict) and not any(key not in _ANNOTATION_KEYWORDS for key in schema):
        return True
    return schema


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    types = {kind} if isinstance(kind, str) else {str(item) for item in kind} if isinstance(kind, list) else set()
    if schema.get("nullable") is True:
        types.add("null")
    return types


def _type_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    old_types, new_types = _types(old), _types(new)
    if old_types is None:
        return []
    if new_types is None:
        return [f"{where}/type constraint removed (was {_type_text(old_types)})"]
    added = {kind for kind in new_types - old_types if not (kind == "integer" and "number" in old_types)}
    if added:
        return [f"{where}/type widened from {_type_text(old_types)} to {_type_text(new_types)}"]
    return []


def _type_text(types: set[str]) -> str:
    return "|".join(sorted(types))


def _value_set_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    if isinstance(old.get("enum"), list):
        if not isinstance(new.get("enum"), list):
            reasons.append(f"{where}/enum removed")
        else:
            known = {canonical_json(value) for value in old["enum"]}  # a set: enums can be long
            extra = [value for value in new["enum"] if canonical_json(value) not in known]
            if extra:
                reasons.append(f"{where}/enum extended with {listing([json_scalar(value) for value in extra])}")
    if "const" in old and ("const" not in new or not json_equal(old["const"], new["const"])):
        reasons.append(f"{where}/const {'removed' if 'const' not in new else 'changed'}")
    return reasons


def _required_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    old_required = _list_of(old, "required")
    new_required = {canonical_json(name) for name in _list_of(new, "required")}
    dropped = [name for name in old_required if canonical_json(name) not in new_required]
    return [f"{where}/required no longer requires {listing([str(name) for name in dropped])}"] if dropped else []


def _list_of(schema: dict[str, Any], keyword: str) -> list[Any]:
    value = schema.get(keyword)
    return value if isinstance(value, list) else []


def _dict_of(schema: dict[str, Any], keyword: str) -> dict[str, Any]:
    value = schema.get(keyword)
    return value if isinstance(value, dict) else {}


Bound = tuple[float, bool]  # (value, exclusive)


def _numeric_bound(schema: dict[str, Any], upper: bool) -> Bound | None:
    """The effective bound of a number: ``exclusiveMaximum: 10`` on an integer is ``maximum: 9``.

    Reads both the 2019+ form (exclusiveMaximum is a number) and the draft-4 form
    (exclusiveMaximum is a boolean modifier of maximum).
    """
    inclusive_key, exclusive_key = ("maximum", "exclusiveMaximum") if upper else ("minimum", "exclusiveMinimum")
    inclusive, exclusive = schema.get(inclusive_key), schema.get(exclusive_key)
    candidates: list[Bound] = []
    if is_json_number(inclusive):
        candidates.append((inclusive, exclusive is True))
    if is_json_number(exclusive):
        candidates.append((exclusive, True))
    if not candidates:
        return None
    if _types(schema) == {"integer"}:
        step = -1 if upper else 1
        candidates = [(value + step, False) if is_exclusive and float(value).is_integer() else (value, is_exclusive)
                      for value, is_exclusive in candidates]
    # The tightest: lowest upper bound (exclusive first on a tie), highest lower bound.
    if upper:
        return min(candidates, key=lambda bound: (bound[0], not bound[1]))
    return max(candidates, key=lambda bound: (bound[0], bound[1]))


def _numeric_bound_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    for upper, name in ((True, "maximum"), (False, "minimum")):
        before, after = _numeric_bound(old, upper), _numeric_bound(new, upper)
        if before is None:
            continue
        if after is None:
            reasons.append(f"{where}/{name} removed (was {_bound_text(before, upper)})")
            continue
        looser = after[0] > before[0] if upper else after[0] < before[0]
        if looser or (after[0] == before[0] and before[1] and not after[1]):
            reasons.append(f"{where}/{name} loosened: {_bound_text(before, upper)} -> {_bound_text(after, upper)}")
    return reasons


def _bound_text(bound: Bound, upper: bool) -> str:
    operator = ("<" if bound[1] else "<=") if upper else (">" if bound[1] else ">=")
    return f"{operator} {json_scalar(bound[0])}"


def _bound_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = _numeric_bound_widenings(old, new, where)
    for keyword in sorted(((_UPPER_BOUNDS | _LOWER_BOUNDS) - _NUMERIC_BOUNDS) & old.keys()):
        before, after = old[keyword], new.get(keyword)
        if keyword not in new:
            reasons.append(f"{where}/{keyword} removed (was {json_scalar(before)})")
        elif is_json_number(before) and is_json_number(after):
            looser = after > before if keyword in _UPPER_BOUNDS else after < before
            if looser:
                reasons.append(f"{where}/{keyword} loosened: {json_scalar(before)} -> {json_scalar(after)}")
        elif not json_equal(before, after):
            reasons.append(f"{where}/{keyword} changed")
    if old.get("uniqueItems") is True and new.get("uniqueItems") is not True:
        reasons.append(f"{where}/uniqueItems dropped")
    return reasons


def _subschema_widenings(old: dict[str, Any], new: dict[str, Any], pointer: str) -> list[str]:
    reasons: list[str] = []
    for keyword in sorted(_SCHEMA_MAPS | _DEFINITION_MAPS):
        old_map, new_map = _dict_of(old, keyword), _dict_of(new, keyword)
        for name, schema in new_map.items():
            child = f"{pointer}/{keyword}/{escape_pointer_token(name)}"
            if name in old_map:
                reasons += schema_widenings(old_map[name], schema, child)
            elif keyword in ("properties", "patternProperties"):
                reasons.append(f"{child} added (accepts a new {'property' if keyword == 'properties' else 'pattern'})")
    for keyword in sorted(_SCHEMA_SINGLES | _OPEN_WHEN_ABSENT):
        if keyword in old and not isinstance(old[keyword], list):
            if keyword not in new and keyword in _OPEN_WHEN_ABSENT:
                reasons.append(f"{pointer}/{keyword} removed (was {_compact(old[keyword])}, now open)")
            elif keyword not in new:
                reasons.append(f"{pointer}/{keyword} removed")
            elif not isinstance(new[keyword], list):
                reasons += schema_widenings(old[keyword], new[keyword], f"{pointer}/{keyword}")
    reasons += _list_widenings(old, new, pointer)
    return reasons


def _list_widenings(old: dict[str, Any], new: dict[str, Any], pointer: str) -> list[str]:
    reasons: list[str] = []
    for keyword in ("prefixItems", "allOf", "anyOf", "oneOf", "items"):
        old_list, new_list = old.get(keyword), new.get(keyword)
        if not isinstance(old_list, list):
            continue
        if not isinstance(new_list, list):
            if keyword not in new:
                reasons.append(f"{pointer}/{keyword} removed")
            continue
        if keyword in ("anyOf", "oneOf") and len(new_list) > len(old_list):
            reasons.append(f"{pointer}/{keyword} gains {len(new_list) - len(old_list)} alternative(s)")
        if keyword in ("allOf", "prefixItems", "items") and len(new_list) < len(old_list):
            reasons.append(f"{pointer}/{keyword} drops {len(old_list) - len(new_list)} schema(s)")
        for index, (before, after) in enumerate(zip(old_list, new_list)):
            reasons += schema_widenings(before, after, f"{pointer}/{keyword}/{index}")
    return reasons


def _other_constraint_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    for keyword in sorted(old.keys() - _ANNOTATION_KEYWORDS - _HANDLED):
        if keyword not in new:
            reasons.append(f"{where}/{keyword} removed")
        elif not json_equal(old[keyword], new[keyword]):
            reasons.append(f"{where}/{keyword} changed (may accept more)")
    return reasons


def _compact(value: Any) -> str:
    return json_scalar(value) if not isinstance(value, (dict, list)) else "a schema"
