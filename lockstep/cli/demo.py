"""``lockstep demo``: Lockstep's whole loop on one machine (lockstep/demo/story.py).

Runs from an installed package with the ``demo`` extra (``pip install 'mcp-lockstep[demo]'``); only the real
control-plane backend also needs a source checkout, for the Helm chart it installs."""

from __future__ import annotations

import sys

import click

from lockstep.cli.targets import UsageError

__all__ = ["demo_command"]

DEMO_EXTRA = "pip install 'mcp-lockstep[demo]'"


@click.command("demo")
@click.option("--keep", is_flag=True, help="Leave everything running at the end and print the metrics URL.")
@click.option("--backend", type=click.Choice(["auto", "real", "emulated"]), default="auto", show_default=True,
              help="A real control plane (needs KUBEBUILDER_ASSETS and a source checkout's chart), the kmock "
                   "emulation, or the first that works.")
def demo_command(keep: bool, backend: str) -> None:
    """Run the whole loop: pin, verify, rug pull, isolate, diff, approve, back in the Service.

    \b
    Uses a real kube-apiserver + etcd + kube-controller-manager when KUBEBUILDER_ASSETS names them
    (export KUBEBUILDER_ASSETS="$(../shared/envtest/install)", or setup-envtest use 1.36 -p path) and
    a source checkout has the chart (charts/lockstep), and the kmock emulation otherwise.
    """
    try:
        from lockstep.demo.story import run_demo
    except ModuleNotFoundError as missing:
        raise UsageError(f"lockstep demo needs the demo extra ({missing.name} is not installed): "
                         f"{DEMO_EXTRA}") from missing
    sys.exit(run_demo(backend, keep))
