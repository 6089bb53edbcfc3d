"""``lockstep demo``: Lockstep's whole loop on one machine (examples/demo.py).

The demo plays the kubelet's part and runs a control plane or the kmock emulation: test support that
lives in the source checkout (tests/lockstep_testing), which the installed product does not ship and
never imports. So this command only finds the checkout and runs the demo program there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from lockstep.cli.targets import UsageError

__all__ = ["demo_command", "find_demo"]

DEMO = Path("examples") / "demo.py"


def find_demo() -> Path:
    """examples/demo.py of the checkout this package runs from (an editable install), or of the
    current directory; a one-line error elsewhere."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / DEMO).is_file() and (root / "tests" / "lockstep_testing").is_dir():
            return root / DEMO
    raise UsageError("lockstep demo runs from a source checkout (git clone …, then `make demo`); "
                     "this installation has no examples/demo.py")


@click.command("demo")
@click.option("--keep", is_flag=True, help="Leave everything running at the end and print the metrics URL.")
@click.option("--backend", type=click.Choice(["auto", "real", "emulated"]), default="auto", show_default=True,
              help="A real control plane (needs KUBEBUILDER_ASSETS), the kmock emulation, or the first that works.")
def demo_command(keep: bool, backend: str) -> None:
    """Run the whole loop: pin, verify, rug pull, isolate, diff, approve, back in the Service.

    \b
    Uses a real kube-apiserver + etcd + kube-controller-manager when KUBEBUILDER_ASSETS names them
    (export KUBEBUILDER_ASSETS="$(../shared/envtest/install)", or setup-envtest use 1.36 -p path),
    and the kmock emulation otherwise.
    """
    argv = [sys.executable, str(find_demo()), "--backend", backend, *(["--keep"] if keep else [])]
    try:
        code = subprocess.run(argv, check=False, env=os.environ.copy()).returncode
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
