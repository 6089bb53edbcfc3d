"""The pure core of Lockstep: interface model, canonical form, digests, diff.

Nothing here imports Kubernetes, network or MCP SDK code (a test enforces it):
the operator, the sidecar and the CLI depend on the core, never the reverse.
"""

from lockstep.core.canonical import canonical_json
from lockstep.core.digest import FORMULA, ComponentDigest, InterfaceDigest, component_digest, digest_interface
from lockstep.core.errors import (
    DuplicateComponentError,
    FormulaError,
    IgnoreRuleError,
    InterfaceError,
    LockstepError,
    MalformedInterfaceError,
    MissingKeyError,
    NestingTooDeepError,
    NonFiniteNumberError,
    PayloadTooLargeError,
)
from lockstep.core.ignore import IgnoreRule, IgnoreRules, parse_ignore_rules
from lockstep.core.model import DEFAULT_LIMITS, Component, ComponentKind, Interface, Limits

__all__ = [
    "DEFAULT_LIMITS",
    "FORMULA",
    "Component",
    "ComponentDigest",
    "ComponentKind",
    "DuplicateComponentError",
    "FormulaError",
    "IgnoreRule",
    "IgnoreRuleError",
    "IgnoreRules",
    "Interface",
    "InterfaceDigest",
    "InterfaceError",
    "Limits",
    "LockstepError",
    "MalformedInterfaceError",
    "MissingKeyError",
    "NestingTooDeepError",
    "NonFiniteNumberError",
    "PayloadTooLargeError",
    "canonical_json",
    "component_digest",
    "digest_interface",
    "parse_ignore_rules",
]
