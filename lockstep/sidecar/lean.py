"""Load only the client half of the ``mcp`` SDK.

``import mcp.types`` runs ``mcp/__init__.py`` first, which imports the SDK's client
*and* server stacks (starlette, the low-level server, the session managers): about
15 MB of RSS and a second of start time that a sidecar never uses. Before the reader
is imported, :func:`skip_package_inits` registers the packages ``mcp`` and ``mcp.client``
as plain namespaces (their ``__path__`` only), so that importing their submodules
(``mcp.types``, ``mcp.client.session``, ``mcp.client.streamable_http``...) loads just
what those submodules need. It does nothing when the SDK is already imported.
"""

from __future__ import annotations

import importlib.util
import sys
import types

__all__ = ["skip_package_inits"]

PACKAGES = ("mcp", "mcp.client")


def skip_package_inits(packages: tuple[str, ...] = PACKAGES) -> bool:
    """Register ``packages`` without running their ``__init__``; False if one is already imported."""
    if any(name in sys.modules for name in packages):
        return False
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            return False
        module = types.ModuleType(name, f"{name} (package __init__ skipped by lockstep.sidecar.lean)")
        module.__path__ = list(spec.submodule_search_locations)
        module.__spec__ = spec
        module.__file__ = spec.origin
        module.__package__ = name
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return True
