"""The interface model: what an MCP server tells a client about itself.

An interface is the server's ``instructions`` plus every tool, prompt, resource
and resource template, each kept whole: every field the server sent, known to
the protocol or not. Its document form is the JSON object that ``lockstep hash
--save`` writes and every command reads::

    {"instructions": "...", "tools": [...], "prompts": [...],
     "resources": [...], "resourceTemplates": [...]}

A missing key means none; ``serverInfo`` may be present and is not part of the
interface. Building an :class:`Interface` validates it (see :class:`Limits`).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.errors import (
    DuplicateComponentError,
    MalformedInterfaceError,
    MissingKeyError,
    NestingTooDeepError,
    NonFiniteNumberError,
    PayloadTooLargeError,
)

__all__ = [
    "DEFAULT_LIMITS",
    "Component",
    "ComponentKind",
    "Interface",
    "JSONValue",
    "Limits",
    "check_json_value",
    "escape_pointer_token",
]

JSONValue = Any  # dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None


class ComponentKind(str, enum.Enum):
    """The kinds of component an interface holds. Values appear in digests and CRs."""

    INSTRUCTIONS = "instructions"
    TOOL = "tool"
    PROMPT = "prompt"
    RESOURCE = "resource"
    RESOURCE_TEMPLATE = "resourceTemplate"

    @property
    def list_key(self) -> str:
        """The key of this kind in the interface document (``tools``...)."""
        return _LIST_KEYS[self]

    @property
    def key_field(self) -> str | None:
        """The field that identifies a component of this kind; None for instructions."""
        return _KEY_FIELDS[self]

    @classmethod
    def from_list_key(cls, list_key: str) -> ComponentKind:
        for kind, key in _LIST_KEYS.items():
            if key == list_key:
                return kind
        raise KeyError(list_key)


_LIST_KEYS = {
    ComponentKind.INSTRUCTIONS: "instructions",
    ComponentKind.TOOL: "tools",
    ComponentKind.PROMPT: "prompts",
    ComponentKind.RESOURCE: "resources",
    ComponentKind.RESOURCE_TEMPLATE: "resourceTemplates",
}
_KEY_FIELDS: dict[ComponentKind, str | None] = {
    ComponentKind.INSTRUCTIONS: None,
    ComponentKind.TOOL: "name",
    ComponentKind.PROMPT: "name",
    ComponentKind.RESOURCE: "uri",
    ComponentKind.RESOURCE_TEMPLATE: "uriTemplate",
}
LIST_KINDS = (ComponentKind.TOOL, ComponentKind.PROMPT, ComponentKind.RESOURCE, ComponentKind.RESOURCE_TEMPLATE)
#: The name under which the single instructions component is listed.
INSTRUCTIONS_NAME = "instructions"
#: Top-level keys of an interface document that are not part of the interface.
IGNORED_DOCUMENT_KEYS = frozenset({"serverInfo", "protocolVersion", "capabilities"})


@dataclass(frozen=True)
class Limits:
    """Bounds that make a hostile server's interface invalid instead of expensive."""

    max_depth: int = 64
    max_bytes: int = 16 * 1024 * 1024
    max_components: int = 10_000
    max_string: int = 1024 * 1024


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Component:
    """One tool, prompt, resource, resource template, or the instructions."""

    kind: ComponentKind
    name: str
    definition: JSONValue = field(compare=True)

    @property
    def ref(self) -> str:
        """A human-readable reference such as ``tool/get_forecast``."""
        return f"{self.kind.value}/{self.name}"


@dataclass(frozen=True)
class Interface:
    """A validated MCP interface. Build it with :meth:`from_document`."""

    components: tuple[Component, ...]

    @classmethod
    def from_document(cls, document: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> Interface:
        """Validate an interface document and build the model from it."""
        if not isinstance(document, Mapping):
            raise MalformedInterfaceError(f"an interface must be a JSON object, not {_type_name(document)}")
        unknown = set(document) - set(_LIST_KEYS.values()) - IGNORED_DOCUMENT_KEYS
        if unknown:
            raise MalformedInterfaceError(
                f"unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}; expected instructions, "
                "tools, prompts, resources, resourceTemplates"
            )
        size = check_json_value(
            {key: value for key, value in document.items() if key not in IGNORED_DOCUMENT_KEYS}, limits
        )
        if size > limits.max_bytes:
            raise PayloadTooLargeError(f"interface is {size} bytes, more than the limit of {limits.max_bytes}")
        return cls(tuple(_components(document, limits)))

    @classmethod
    def from_components(cls, components: Iterable[Component]) -> Interface:
        return cls(tuple(components))

    @property
    def instructions(self) -> str | None:
        for component in self.components:
            if component.kind is ComponentKind.INSTRUCTIONS:
                return str(component.definition)
        return None

    def of_kind(self, kind: ComponentKind) -> list[Component]:
        return [component for component in self.components if component.kind is kind]

    def get(self, kind: ComponentKind, name: str) -> Component | None:
        for component in self.components:
            if component.kind is kind and component.name == name:
                return component
        return None

    def __iter__(self) -> Iterator[Component]:
        return iter(self.components)

    def __len__(self) -> int:
        return len(self.components)

    def to_document(self) -> dict[str, Any]:
        """The document form, lists sorted by key so that files diff well."""
        document: dict[str, Any] = {}
        if (instructions := self.instructions) is not None:
            document["instructions"] = instructions
        for kind in LIST_KINDS:
            items = sorted(self.of_kind(kind), key=lambda component: component.name)
            if items:
                document[kind.list_key] = [component.definition for component in items]
        return document


def _components(document: Mapping[str, Any], limits: Limits) -> Iterator[Component]:
    instructions = document.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise MalformedInterfaceError(
                f"instructions must be a string, not {_type_name(instructions)}", pointer="/instructions"
            )
        yield Component(ComponentKind.INSTRUCTIONS, INSTRUCTIONS_NAME, instructions)
    count = 0
    for kind in LIST_KINDS:
        items = document.get(kind.list_key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise MalformedInterfaceError(
                f"{kind.list_key} must be a list, not {_type_name(items)}", pointer=f"/{kind.list_key}"
            )
        count += len(items)
        if count > limits.max_components:
            raise PayloadTooLargeError(f"more than {limits.max_components} components")
        seen: dict[str, int] = {}
        for index, item in enumerate(items):
            pointer = f"/{kind.list_key}/{index}"
            key_field = kind.key_field
            assert key_field is not None
            if not isinstance(item, dict):
                raise MalformedInterfaceError(
                    f"each {kind.value} must be a JSON object, not {_type_name(item)}", pointer=pointer
                )
            name = item.get(key_field)
            if not isinstance(name, str) or not name:
                raise MissingKeyError(f"{kind.value} without a {key_field!r} string", pointer=pointer)
            if name in seen:
                raise DuplicateComponentError(
                    f"duplicate {kind.value} {key_field} {name!r} at indexes {seen[name]} and {index}",
                    pointer=pointer,
                )
            seen[name] = index
            yield Component(kind, name, item)


def check_json_value(value: Any, limits: Limits = DEFAULT_LIMITS) -> int:
    """Check that ``value`` is plain, finite JSON within the limits; return its approximate size.

    Iterative, so a hostile nesting depth cannot exhaust the Python stack. Paths are kept
    as linked tuples and turned into JSON pointers only when an error is raised.
    """
    size = 0
    stack: list[tuple[Any, int, _Path]] = [(value, 1, None)]
    while stack:
        item, depth, path = stack.pop()
        if depth > limits.max_depth:
            raise NestingTooDeepError(f"nesting deeper than {limits.max_depth} levels", pointer=_pointer(path))
        if isinstance(item, dict):
            size += 2
            for key, child in item.items():
                if not isinstance(key, str):
                    raise MalformedInterfaceError(f"object key {key!r} is not a string", pointer=_pointer(path))
                if not key.isascii() and _SURROGATE.search(key):
                    raise MalformedInterfaceError("a key holds a lone UTF-16 surrogate", pointer=_pointer(path))
                size += len(key) + 4
                stack.append((child, depth + 1, (path, key)))
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend((child, depth + 1, (path, index)) for index, child in enumerate(item))
        elif isinstance(item, str):
            if len(item) > limits.max_string:
                raise PayloadTooLargeError(
                    f"a string of {len(item)} characters, more than {limits.max_string}", pointer=_pointer(path)
                )
            if not item.isascii() and _SURROGATE.search(item):
                raise MalformedInterfaceError(
                    "a string holds a lone UTF-16 surrogate, which is not Unicode text", pointer=_pointer(path)
                )
            size += len(item) + 2
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise NonFiniteNumberError(f"{item!r} is not a JSON number", pointer=_pointer(path))
            size += 24
        elif isinstance(item, int):
            if item.bit_length() > 1023:
                raise NonFiniteNumberError(
                    "an integer beyond the range of IEEE 754 doubles is not a JSON number", pointer=_pointer(path)
                )
            size += item.bit_length() // 3 + 1
        else:
            raise MalformedInterfaceError(f"{_type_name(item)} is not a JSON value", pointer=_pointer(path))
        if size > limits.max_bytes:
            raise PayloadTooLargeError(f"interface larger than the limit of {limits.max_bytes} bytes")
    return size


_Path = tuple[Any, str | int] | None
_SURROGATE = re.compile("[\ud800-\udfff]")


def _pointer(path: _Path) -> str:
    tokens: list[str] = []
    while path is not None:
        path, token = path
        tokens.append(escape_pointer_token(token) if isinstance(token, str) else str(token))
    return "".join(f"/{token}" for token in reversed(tokens))


def escape_pointer_token(token: str) -> str:
    """One JSON pointer (RFC 6901) token: '~' as '~0', '/' as '~1'."""
    return token.replace("~", "~0").replace("/", "~1")


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


#: Integers longer than this are refused while parsing (beyond 2**53 a digest would refuse them anyway;
#: Python's own limit is 4,300 digits and raises a bare ValueError).
MAX_INTEGER_DIGITS = 400


def _refuse_constant(constant: str) -> Any:
    raise NonFiniteNumberError(f"{constant} is not a JSON number")


def _refuse_long_integer(digits: str) -> Any:
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise MalformedInterfaceError(f"an integer of {len(digits)} digits is beyond any JSON number Lockstep "
                                      "accepts")
    return int(digits)


#: One decoder for every call (json.loads with hooks builds a new one each time; the decoder keeps no state).
_STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_refuse_long_integer)


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN and Infinity instead of producing them."""
    # What json.loads does before decoding: bytes in any JSON encoding, no byte order mark in a str.
    if isinstance(text, str):
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    elif isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    else:
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
    try:
        return _STRICT_DECODER.decode(text)
    except RecursionError:
        raise NestingTooDeepError("the JSON nests deeper than the parser can follow") from None
