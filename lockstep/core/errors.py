"""Errors of the pure core.

    LockstepError
    └── InterfaceError               the interface cannot be digested or judged
        ├── MalformedInterfaceError  not the shape of an MCP interface (wrong types, unknown keys)
        ├── MissingKeyError          a component without its key (tool name, resource uri, ...)
        ├── DuplicateComponentError  two components of one kind with the same key
        ├── NonFiniteNumberError     NaN or an infinity somewhere in a definition
        ├── NestingTooDeepError      deeper than Limits.max_depth
        ├── PayloadTooLargeError     larger than Limits.max_bytes or Limits.max_components
        └── IgnoreRuleError          an ignore rule that is not a valid, allowed JSON pointer
    └── FormulaError                 a digest formula this version does not know

Every InterfaceError carries ``reason`` (a CamelCase word for machines, used as the
Kubernetes condition reason ``InterfaceInvalid``'s detail) and a one-line message.
"""

from __future__ import annotations

__all__ = [
    "DuplicateComponentError",
    "FormulaError",
    "IgnoreRuleError",
    "InterfaceError",
    "LockstepError",
    "MalformedInterfaceError",
    "MissingKeyError",
    "NestingTooDeepError",
    "NonFiniteNumberError",
    "PayloadTooLargeError",
]


class LockstepError(Exception):
    """Root of every error Lockstep raises on purpose."""


class InterfaceError(LockstepError):
    """The interface is invalid: Lockstep refuses to digest or approve it."""

    reason = "InterfaceInvalid"

    def __init__(self, message: str, *, pointer: str = "") -> None:
        super().__init__(f"{message} (at {pointer})" if pointer else message)
        self.pointer = pointer


class MalformedInterfaceError(InterfaceError):
    """The document is not shaped like an MCP interface."""

    reason = "Malformed"


class MissingKeyError(InterfaceError):
    """A component lacks the field that identifies it."""

    reason = "MissingKey"


class DuplicateComponentError(InterfaceError):
    """Two components of one kind share a key; they are never merged."""

    reason = "DuplicateName"


class NonFiniteNumberError(InterfaceError):
    """NaN or an infinity: JSON cannot carry them, so neither can a digest."""

    reason = "NonFiniteNumber"


class NestingTooDeepError(InterfaceError):
    """The definitions nest deeper than the configured limit."""

    reason = "TooDeep"


class PayloadTooLargeError(InterfaceError):
    """The interface is larger than the configured limit."""

    reason = "TooLarge"


class IgnoreRuleError(InterfaceError):
    """An ignore rule is not a JSON pointer Lockstep accepts."""

    reason = "BadIgnoreRule"


class FormulaError(LockstepError):
    """A digest formula this version of Lockstep does not implement."""
