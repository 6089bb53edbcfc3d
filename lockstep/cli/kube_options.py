"""The kubectl-style options (``--kubeconfig``, ``--context``, ``-n``) and the target they name.

Apart from lockstep.cli.cluster so that a command which reads a cluster only for some arguments
(``lockstep diff NAME``, not ``lockstep diff FILE FILE``) imports the cluster code when it needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

__all__ = ["ClusterTarget", "cluster_options"]


@dataclass(frozen=True)
class ClusterTarget:
    """Where to find the resource: the ``--kubeconfig``, ``--context`` and ``-n`` options."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


def cluster_options(function: Any) -> Any:
    """The kubectl-style options of every command that reads the cluster."""
    function = click.option("--kubeconfig", default=None, metavar="FILE",
                            help="Path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config).")(function)
    function = click.option("--context", default=None, help="kubeconfig context to use.")(function)
    function = click.option("-n", "--namespace", default=None,
                            help="Namespace of the MCPServerInterface (default: the context's).")(function)
    return function
