"""The MCP methods that carry interface: one table for the reader (what it asks a server), the proxy
(which answers it judges, which calls it checks) and whoever else needs to know.

* the opening of a session (2025: ``initialize``) or of a connection (2026: ``server/discover``), whose
  result carries the ``instructions``;
* a list method per component kind (``tools/list``...), announced by a server capability;
* a call method per kind a client uses by name (``tools/call``...), and the parameter that names it;
* the requests a server sends a client (2025: JSON-RPC requests; 2026-07-28: embedded in a result's
  ``inputRequests``), of which ``sampling/createMessage`` carries tool definitions for the client's model.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.core.model import ComponentKind

__all__ = [
    "CALL_METHODS",
    "ELICITATION_METHOD",
    "INPUT_REQUESTS_KEY",
    "INTERFACE_METHODS",
    "LIST_METHODS",
    "LIST_METHOD_OF",
    "OPENING_METHODS",
    "PROMPT_GET_METHOD",
    "SAMPLING_METHOD",
    "ListMethod",
]


@dataclass(frozen=True)
class ListMethod:
    """A method that lists one kind of component, page by page."""

    method: str
    kind: ComponentKind
    #: The server capability that announces it.
    capability: str
    #: A server may announce the capability without serving the method.
    optional: bool = False

    @property
    def list_key(self) -> str:
        """The key of the list in the result, and in the interface document."""
        return self.kind.list_key


#: Every list method, in the order the reader reads them.
LIST_METHODS = (
    ListMethod("tools/list", ComponentKind.TOOL, "tools"),
    ListMethod("prompts/list", ComponentKind.PROMPT, "prompts"),
    ListMethod("resources/list", ComponentKind.RESOURCE, "resources"),
    ListMethod("resources/templates/list", ComponentKind.RESOURCE_TEMPLATE, "resources", optional=True),
)
#: The list method of each list key (``"resourceTemplates"`` -> ``"resources/templates/list"``).
LIST_METHOD_OF = {method.list_key: method.method for method in LIST_METHODS}
#: The opening of a session (2025) or a connection (2026): their results carry the instructions.
OPENING_METHODS = ("initialize", "server/discover")
#: Methods whose result bears interface, and the list each must hold (None: instructions).
INTERFACE_METHODS: dict[str, str | None] = {
    **{method: None for method in OPENING_METHODS},
    **{method.method: method.list_key for method in LIST_METHODS},
}
#: Methods that use one component, and the parameter that names it.
CALL_METHODS: dict[str, tuple[ComponentKind, str]] = {
    "tools/call": (ComponentKind.TOOL, "name"),
    "prompts/get": (ComponentKind.PROMPT, "name"),
    "resources/read": (ComponentKind.RESOURCE, "uri"),
}
#: The method whose result holds a prompt's messages and its description (the same field prompts/list pins).
PROMPT_GET_METHOD = "prompts/get"
#: Server-to-client requests: sampling (whose ``params.tools`` are tool definitions for the client's model,
#: 2025-11-25+) and elicitation.
SAMPLING_METHOD = "sampling/createMessage"
ELICITATION_METHOD = "elicitation/create"
#: The result key of a 2026-07-28 ``InputRequiredResult``: server-to-client requests by a key of the server's.
INPUT_REQUESTS_KEY = "inputRequests"
