"""Lockstep pins the public interface of MCP servers running in Kubernetes.

The public API is the pure core's (``lockstep.core``), re-exported here.
"""

from lockstep.core import *
from lockstep.core import __all__ as _core_all

__version__ = "0.1.0"
__all__ = [*_core_all, "__version__"]  # noqa: PLE0604
