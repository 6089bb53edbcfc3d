"""The client capabilities the probe announces (issue 17 item 4): a pure module, so that the sidecar's
settings and the operator can use it without importing the ``mcp`` SDK.

A server may show more tools to a client that announces a capability (``@modelcontextprotocol/server-everything``
lists get-roots-list, trigger-sampling-request, trigger-elicitation-request and trigger-url-elicitation only
then). A probe that announces none pins a view no real agent gets, and in quarantine those tools are
withheld from every agent. So the probe announces what agents announce; see docs/reader.md.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CLIENT_CAPABILITIES", "DEFAULT_CLIENT_CAPABILITIES", "format_client_capabilities",
           "parse_client_capabilities"]

#: What the probe can announce. ``elicitation`` is announced with both modes (form and url).
CLIENT_CAPABILITIES = ("sampling", "elicitation", "roots")
#: The default: the union of what widely used agents announce (VS Code all three; Claude Code roots and
#: elicitation). The union pins the largest view; an agent announcing fewer gets a subset of it, which
#: the proxy's gate passes component by component. A server that gives one tool a *different* definition
#: per capability needs each view pinned: ``lockstep snapshot URL --add-to FILE --client-capabilities none``.
DEFAULT_CLIENT_CAPABILITIES = CLIENT_CAPABILITIES


def parse_client_capabilities(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"sampling,roots"`` or a list of names -> the names in canonical order; ``"none"`` or ``[]`` -> ().

    Raises ValueError for an unknown name.
    """
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    names = [name for name in names if name]
    if names == ["none"]:
        return ()
    unknown = sorted(set(names) - set(CLIENT_CAPABILITIES))
    if unknown:
        raise ValueError(f"unknown client capability {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(CLIENT_CAPABILITIES)} or none")
    return tuple(name for name in CLIENT_CAPABILITIES if name in names)


def format_client_capabilities(capabilities: Iterable[str]) -> str:
    """The inverse of :func:`parse_client_capabilities`: ``"sampling,roots"``, or ``"none"``."""
    return ",".join(capabilities) or "none"
