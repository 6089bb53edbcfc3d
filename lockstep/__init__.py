"""Lockstep pins the public interface of MCP servers running in Kubernetes.

The public API is the pure core's (``lockstep.core``), re-exported here. ``__version__`` is the one home of
Lockstep's version: the distribution's (pyproject.toml reads it), the chart's version and appVersion (a test
keeps them equal), the image's tag and label, ``lockstep --version`` and the sidecar's reports.
"""

from lockstep.core import *
from lockstep.core import __all__ as _core_all

__version__ = "0.2.0"
__all__ = [*_core_all, "__version__"]  # noqa: PLE0604
