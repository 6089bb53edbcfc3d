"""``lockstep demo``: Lockstep's whole loop on one machine, with real parts.

The real operator (kopf, report endpoint, admission webhooks), the example MCP server (weather_server.py) and
the real sidecar run as they do in a cluster; a pod is admitted through the mutating webhook; the demo plays
the kubelet's part only. An agent (the ``mcp`` SDK's client) holds one session through the sidecar's in-line
proxy across the rug pull, and the demo fails if it ever receives the poisoned description. The API server is
a real control plane (kube-apiserver + etcd + kube-controller-manager) when KUBEBUILDER_ASSETS names them and
a source checkout has the chart, and the kmock emulation otherwise; the first line says which. It exits
non-zero if any step does not happen as narrated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from lockstep.core.names import API_VERSION, POLICY_KIND
from lockstep.demo.agent import AGENT_INTERVAL, ConnectedAgent
from lockstep.demo.backends import (
    GATE,
    NAMESPACE,
    Backend,
    EmulatedBackend,
    RealBackend,
    pod_condition,
    weather_pod,
    weather_server_argv,
)
from lockstep.demo.control_plane import assets_folder, free_port
from lockstep.demo.install import ChartNotFound, find_chart
from lockstep.demo.narrator import DemoFailed, Narrator, run_cli

__all__ = ["run_demo"]


async def story(backend: Backend, narrator: Narrator, folder: Path, keep: bool) -> None:
    await backend.start(narrator)
    port = free_port()
    reference = await asyncio.create_subprocess_exec(*weather_server_argv(port), stdout=asyncio.subprocess.DEVNULL,
                                                     stderr=asyncio.subprocess.DEVNULL)
    try:
        await narrator.until("the reviewed example MCP server answers", lambda: _listening(port))
        manifest_text = await run_cli(narrator, "snapshot", f"http://127.0.0.1:{port}/mcp", "--name", "weather",
                                "-n", NAMESPACE, expect=0, show=12)
    finally:
        reference.terminate()
        await reference.wait()
    (folder / "weather.yaml").write_text(manifest_text)
    key = await _enforce_signed_approvals(backend, narrator, folder)
    await run_cli(narrator, "sign", str(folder / "weather.yaml"), "--key", str(key), expect=0)
    manifest = yaml.safe_load((folder / "weather.yaml").read_text())
    await backend.apply(manifest)
    narrator.say(f"pinned: MCPServerInterface {NAMESPACE}/weather approves revision "
                 f"{manifest['spec']['approved'][0]['digest'][:19]}…, signed by the approver "
                 f"(written to {folder / 'weather.yaml'})")

    admitted = await backend.create_pod(weather_pod())
    sidecars = [c["name"] for c in admitted["spec"].get("initContainers") or []]
    if "lockstep-sidecar" not in sidecars:
        raise DemoFailed("the mutating webhook did not inject the sidecar")
    narrator.say("pod agents/weather-0 admitted: the webhook injected lockstep-sidecar, the readiness gate "
                 "and a projected token (audience lockstep.dev)")
    rug_pull = await backend.run_pod("weather-0", port)
    narrator.say("kubelet's part: the MCP server and the sidecar run as processes")
    await narrator.until("the sidecar reports and the operator verifies the pod",
                         lambda: (pod_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "True")
    narrator.say(f"the server listens on 127.0.0.1 only: the sidecar's check found nothing answering on the "
                 f"pod's IP ({backend.local_ip} here) past the in-line proxy (else: False, ServerExposed)")
    await narrator.until(f"the pod is in Service agents/weather ({backend.service_note()})",
                         lambda: backend.in_service("weather-0") is True)
    if backend.proxy_port is None:
        raise DemoFailed("the webhook did not run the sidecar's in-line proxy (enforcement Isolate)")
    agent = ConnectedAgent(f"http://127.0.0.1:{backend.proxy_port}/mcp", narrator)
    await agent.connect()
    try:
        caught_ms = await rug_pull_story(backend, narrator, agent, rug_pull)
    finally:
        await agent.disconnect()
    agent.show("the connected agent, until it hangs up before the review:")
    if agent.poisoned:
        raise DemoFailed(f"the connected agent received the poisoned description {agent.poisoned} time(s)")
    answers = [kind for _, kind, _ in agent.entries if kind not in ("list_changed",)]
    narrator.say(f"connected agent: {len(answers)} answers on one session, {agent.count('clean')} clean before "
                 f"the pull, {agent.count('refused')} refused and {agent.count('isolated')} isolated after it, "
                 f"0 poisoned ✓")

    kube = ["--kubeconfig", str(backend.kubeconfig)]
    await run_cli(narrator, "diff", "weather", "-n", NAMESPACE, *kube, expect=1)
    await run_cli(narrator, "approve", "weather", "-n", NAMESPACE, "--apply", "--sign", str(key), *kube, expect=0)
    await narrator.until("the operator re-judges the pod's last report against the new revision",
                         lambda: (pod_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "True")
    await narrator.until("the pod is back in Service agents/weather", lambda: backend.in_service("weather-0") is True)
    print(f"""
Done: pinned → verified and in the Service → rug pull caught in {caught_ms:.0f} ms, pod out of the Service,
the agent connected through the in-line proxy refused, never poisoned → reviewed with lockstep diff →
approved and signed with lockstep approve --sign → back in the Service.

Where to go next:
  • put it on a cluster:       helm install lockstep charts/lockstep (docs/helm.md)
  • approve by pull request:   docs/gitops.md (Argo CD, Flux)
  • watch drift in Grafana:    docs/dashboard.md, alerts in docs/alerts.md
  • gate CI on the pin:        lockstep verify URL --against weather.yaml""", flush=True)
    if keep:
        print(f"\nStill running (--keep): metrics at {backend.metrics_url}, kubeconfig {backend.kubeconfig}. "
              "Ctrl-C stops.", flush=True)
        await asyncio.Event().wait()


async def _enforce_signed_approvals(backend: Backend, narrator: Narrator, folder: Path) -> Path:
    """The approver's key, and an MCPApprovalPolicy that makes the operator trust only what that key signed in the
    demo's namespace (docs/gitops.md, "Two approvers"). Returns the private key's path."""
    entry = await run_cli(narrator, "keys", "generate", "approver", "--out", str(folder), expect=0)
    policy = {"apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": "demo-approvers"},
              "spec": {"threshold": 1, "keys": yaml.safe_load(entry),
                       "scopes": [{"namespaces": [NAMESPACE], "mode": "Enforce"}]}}
    (folder / "approvers.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    await backend.apply_policy(policy)
    narrator.say(f"MCPApprovalPolicy demo-approvers: in namespace {NAMESPACE} only revisions signed by the "
                 "approver's key are trusted, whoever writes the resource")
    return folder / "approver.key"


async def rug_pull_story(backend: Backend, narrator: Narrator, agent: ConnectedAgent,
                         rug_pull: Callable[[], None]) -> float:
    """The rug pull, with an agent connected: returns the milliseconds from the pull to the verdict."""
    agent.show(f"an agent connects through the pod's in-line proxy (what Service targetPort lockstep-mcp reaches; "
               f"here {agent.url}) and holds ONE session (Mcp-Session-Id {(agent.session_id or '?')[:12]}…), "
               f"listing tools on every list_changed and every {AGENT_INTERVAL:g} s:")
    if agent.count("clean") < 1:
        raise DemoFailed("the connected agent got no clean list before the rug pull")

    narrator.say("RUG PULL: get_forecast's description gains hidden <IMPORTANT> instructions and the tool "
                 "quietly becomes destructive (readOnlyHint true → false, destructiveHint true)")
    pulled, pulled_at = time.monotonic(), len(agent.entries)
    rug_pull()
    await narrator.until("the drift is caught",
                         lambda: (pod_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "False")
    caught_ms = (time.monotonic() - pulled) * 1000
    verdict = pod_condition(backend.pod("weather-0"), GATE) or {}
    narrator.say(f"drift caught in {caught_ms:.0f} ms (list_changed → sidecar → operator): condition {GATE}="
                 f"False, reason {verdict.get('reason')}")
    await narrator.until("the pod leaves Service agents/weather", lambda: backend.in_service("weather-0") is False)
    drift_events = await narrator.until("a Warning Event about the pod", lambda: [
        e for e in backend.events("weather-0") if e.get("type") == "Warning"], timeout=15)
    narrator.say(f"Event: {drift_events[-1]['type']} {drift_events[-1]['reason']} pod/weather-0: "
                 f"{drift_events[-1]['message'][:110]}")
    metric = await narrator.until("the drifted pod in the operator's metrics",
                                  lambda: _metric_line(backend.metrics_url, 'lockstep_pods{', 'state="drifted"'),
                                  timeout=15)
    narrator.say(f"metric: {metric}")

    # The agent's session is still open: kube-proxy keeps established flows to a pod that left its Service,
    # so only the proxy on the path stands between it and the poisoned list.
    await narrator.until("the connected agent's session is isolated by the proxy (every request refused)",
                         lambda: agent.count("isolated", since=pulled_at) >= 2 or agent.poisoned, timeout=15)
    agent.show("the connected agent, same session, since the rug pull:")
    if agent.poisoned:
        raise DemoFailed(f"the connected agent received the poisoned description {agent.poisoned} time(s)")
    return caught_ms


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _metric_line(url: str, prefix: str, needle: str) -> str | None:
    """The first non-zero sample of the metric whose labels contain ``needle``."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(prefix) and needle in line and not line.endswith(" 0.0"):
            return line
    return None



def choose_backend(name: str) -> bool:
    """Whether to run on a real control plane: ``real`` asked for (ChartNotFound or DemoFailed when it cannot
    run here), or ``auto`` with KUBEBUILDER_ASSETS set and a checkout's chart at hand."""
    if name == "emulated":
        return False
    if name == "real":
        if assets_folder() is None:
            raise DemoFailed("--backend real needs KUBEBUILDER_ASSETS (a folder with etcd, kube-apiserver and "
                             "kube-controller-manager)")
        find_chart()
        return True
    with contextlib.suppress(ChartNotFound):
        return assets_folder() is not None and find_chart() is not None
    return False


async def run_story(real: bool, keep: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="lockstep-demo-") as tmp:
        folder = Path(tmp)
        backend: Backend = RealBackend(folder) if real else EmulatedBackend(folder)
        narrator = Narrator()
        print(f"Lockstep demo on {backend.describe()}\n", flush=True)
        try:
            await story(backend, narrator, folder, keep)
        except DemoFailed as failure:
            print(f"\ndemo failed: {failure}", file=sys.stderr, flush=True)
            return 1
        finally:
            await backend.stop()
    return 0


def run_demo(backend: str = "auto", keep: bool = False) -> int:
    """The whole demo; its exit code (0 when every step happened as narrated, 1 when one did not, 2 when the
    asked-for backend cannot run here, 130 on Ctrl-C)."""
    try:
        real = choose_backend(backend)
    except (ChartNotFound, DemoFailed) as error:
        print(f"lockstep demo: {error}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    logging.basicConfig(level=logging.CRITICAL)  # the operator's own logs would drown the story
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run_story(real, keep))
    return 130
