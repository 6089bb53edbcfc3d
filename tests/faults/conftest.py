"""The fault-injection tier: Lockstep on its own real control plane (etcd, kube-apiserver,
kube-controller-manager from KUBEBUILDER_ASSETS) with its operator as a real process, real sidecars run
by the kubelet stand-in, and faults injected into every part: the API server killed, frozen and away for
minutes, etcd killed, the operator frozen, its leader killed, a second writer on the pods' status, and a
partition between sidecars and operator. Every test here is marked ``faults`` (select with ``-m faults``)
and skipped without KUBEBUILDER_ASSETS. The figures of each fault are printed at the end of the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lockstep.demo.control_plane import SKIP_REASON, assets_folder
from lockstep_testing.operator_process import FIGURES

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: fault injection on a real control plane (KUBEBUILDER_ASSETS)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = None if assets_folder() else pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.xdist_group("faults"))  # one rig, the faults in order, on one worker
            if skip is not None:
                item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand the figures to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and FIGURES:
        workeroutput["fault_figures"] = json.dumps(FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the pytest-xdist controller: the figures of the worker that ran the faults."""
    FIGURES.extend(json.loads(getattr(node, "workeroutput", {}).get("fault_figures", "[]")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fault figures")
    terminalreporter.write_line("| fault | traffic during | verdicts lost | flaps | time to converge |")
    terminalreporter.write_line("| --- | --- | --- | --- | --- |")
    for row in FIGURES:
        terminalreporter.write_line(f"| {row['fault']} | {row['traffic']} | {row['lost']} | {row['flaps']} | "
                                    f"{row['converge']:.1f} s |")
    target = os.environ.get("LOCKSTEP_FAULT_FIGURES")
    if target:
        Path(target).write_text(json.dumps(FIGURES, indent=2))
