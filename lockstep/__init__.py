"""Lockstep pins the public interface of MCP servers running in Kubernetes."""

from lockstep.core import *  # noqa: F403
from lockstep.core import __all__ as _core_all

__version__ = "0.1.0"
__all__ = sorted([*_core_all, "__version__"])
