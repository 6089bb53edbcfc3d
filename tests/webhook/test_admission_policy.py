"""The side doors a pod author tried, each as a real AdmissionReview through kopf's admission engine:
every one is refused with a message that names the field (issue: close the bypasses)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lockstep_testing.webhook_pods import NAMESPACE, plain_pod, weather_interface

#: What `kubectl debug --profile=restricted` sets on an ephemeral container.
RESTRICTED_DEBUG = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"}}
TOKEN_SOURCE = {"serviceAccountToken": {"audience": "lockstep.dev", "path": "token", "expirationSeconds": 900}}


def refusal(admitted: Any) -> str:
    response = admitted.response["response"]
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


async def test_a_pod_may_not_opt_out_in_an_opted_in_namespace_by_default(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    message = refusal(await admit(plain_pod(**{"lockstep.dev/inject": "disabled"})))
    assert "may not opt out" in message and "webhook.allowOptOut" in message


async def test_opting_out_where_the_platform_allows_it(config: Any, admit: Any, interfaces: list[Any]) -> None:
    config.allow_opt_out = (NAMESPACE,)
    interfaces.append(weather_interface())
    pod = plain_pod(**{"lockstep.dev/inject": "disabled"})
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True and admitted.pod == pod


async def test_a_counterfeit_sidecar_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """Before: the webhook skipped injection when a container had the sidecar's name, but still added
    the gate and the token volume, and a report of the approved digests with that token was accepted."""
    interfaces.append(weather_interface())
    genuine = (await admit(plain_pod())).pod["spec"]["initContainers"][-1]
    fake = copy.deepcopy(genuine)
    fake["image"] = "evil.example.com/always-approved:1"
    pod = plain_pod()
    pod["spec"]["initContainers"] = [fake]
    message = refusal(await admit(pod))
    assert "lockstep-sidecar that Lockstep did not inject (differs in image)" in message


async def test_the_sidecar_name_on_an_app_container_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"].append({"name": "lockstep-sidecar", "image": "evil.example.com/fake:1"})
    assert "spec.containers[1].name: lockstep-sidecar is reserved" in refusal(await admit(pod))


async def test_the_proxy_port_name_on_an_app_container_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """A Service targeting lockstep-mcp could otherwise resolve to the server itself, past the proxy."""
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0].setdefault("ports", []).append({"name": "lockstep-mcp", "containerPort": 8080})
    assert "spec.containers[0].ports: the port name lockstep-mcp is reserved" in refusal(await admit(pod))


async def test_a_lockstep_token_for_the_app_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["volumes"] = [{"name": "stolen", "projected": {"sources": [TOKEN_SOURCE]}}]
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "stolen", "mountPath": "/tok"})
    assert "projected token for audience lockstep.dev is for the injected sidecar only" in \
        refusal(await admit(pod))


async def test_mounting_the_injected_token_volume_into_the_app_is_refused(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "lockstep-token", "mountPath": "/tok"})
    assert "spec.containers[0].volumeMounts: only the sidecar may mount lockstep-token" in refusal(await admit(pod))


@pytest.mark.parametrize(("field", "expected"), [("shareProcessNamespace", "read the sidecar's token"),
                                                  ("hostNetwork", "node's loopback")])
async def test_pod_level_settings_that_reach_the_sidecar_are_refused(admit: Any, interfaces: list[Any],
                                                                    field: str, expected: str) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"][field] = True
    message = refusal(await admit(pod))
    assert f"spec.{field}" in message and expected in message


def _lax(name: str, **spec: Any) -> dict[str, Any]:
    interface = weather_interface()
    interface["metadata"]["name"] = name
    interface["spec"].update(spec)
    return interface


@pytest.mark.parametrize("lax", [{"enforcement": "Audit"}, {"approval": "FirstSeen"}])
async def test_the_annotation_may_not_choose_a_weaker_interface(admit: Any, interfaces: list[Any],
                                                               lax: dict[str, str]) -> None:
    interfaces += [weather_interface(), _lax("lenient", selector={"matchLabels": {"app": "other"}}, **lax)]
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "lenient"}
    message = refusal(await admit(pod))
    assert "names 'lenient', which is less strict than weather" in message


async def test_the_annotation_may_choose_an_equally_strict_interface(admit: Any, interfaces: list[Any]) -> None:
    interfaces += [weather_interface(), _lax("weather-v2", selector={"matchLabels": {"app": "other"}})]
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "weather-v2"}
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True
    [sidecar] = admitted.pod["spec"]["initContainers"]
    assert {"name": "LOCKSTEP_INTERFACE", "value": "weather-v2"} in sidecar["env"]


async def test_reinvocation_of_a_genuinely_injected_pod_is_allowed(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    once = await admit(plain_pod())
    again = await admit(once.pod)
    assert again.response["response"]["allowed"] is True and again.ops == []


# ---------------------------------------------------------------- UPDATE and ephemeral containers


async def _injected(admit: Any, interfaces: list[Any]) -> dict[str, Any]:
    interfaces.append(weather_interface())
    pod = (await admit(plain_pod())).pod
    pod["metadata"]["name"] = "weather-7d9f-abcde"
    return dict(pod)


async def test_an_update_that_swaps_the_sidecar_image_is_refused(admit: Any, interfaces: list[Any]) -> None:
    """A pod's container images are mutable: an UPDATE could replace the sidecar with a fake."""
    old = await _injected(admit, interfaces)
    new = copy.deepcopy(old)
    new["spec"]["initContainers"][-1]["image"] = "evil.example.com/always-approved:1"
    message = refusal(await admit(new, webhook="validate-pods", operation="UPDATE", old=old))
    assert "the injected sidecar cannot be changed" in message


async def test_an_ephemeral_container_may_not_reach_the_sidecar(admit: Any, interfaces: list[Any]) -> None:
    old = await _injected(admit, interfaces)
    for debug, expected in (
            ({"name": "debug", "image": "busybox", "targetContainerName": "lockstep-sidecar"},
             "targetContainerName: no container may join the sidecar's process namespace"),
            ({"name": "debug", "image": "busybox", "volumeMounts": [{"name": "lockstep-token", "mountPath": "/t"}]},
             "spec.ephemeralContainers[0].volumeMounts: only the sidecar may mount lockstep-token")):
        new = copy.deepcopy(old)
        new["spec"]["ephemeralContainers"] = [debug]
        admitted = await admit(new, webhook="validate-pods", operation="UPDATE", old=old,
                               sub_resource="ephemeralcontainers")
        assert expected in refusal(admitted)


async def test_an_ordinary_update_and_a_harmless_debug_container_are_allowed(admit: Any,
                                                                            interfaces: list[Any]) -> None:
    old = await _injected(admit, interfaces)
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"]["release"] = "canary"
    assert (await admit(labelled, webhook="validate-pods", operation="UPDATE", old=old)
            ).response["response"]["allowed"] is True
    debugged = copy.deepcopy(old)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "targetContainerName": "server",
                                                "securityContext": RESTRICTED_DEBUG}]
    assert (await admit(debugged, webhook="validate-pods", operation="UPDATE", old=old,
                        sub_resource="ephemeralcontainers")).response["response"]["allowed"] is True


# ---------------------------------------------------------------- Pod Security baseline (issue 25)

BASELINE = "Lockstep enforces Pod Security baseline on pods it guards"


def _app(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["spec"]["containers"][0])


def _host_pid(pod: dict[str, Any]) -> None:
    pod["spec"]["hostPID"] = True


def _host_ipc(pod: dict[str, Any]) -> None:
    pod["spec"]["hostIPC"] = True


def _host_path(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"] = [{"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet/pods"}}]
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "kubelet", "mountPath": "/host"})


def _privileged(kind: str) -> Any:
    def change(pod: dict[str, Any]) -> None:
        if kind == "containers":
            pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        else:
            pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox",
                                              "securityContext": {"privileged": True}}]
    return change


def _capability(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_PTRACE"]}}


def _proc_mount(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"procMount": "Unmasked"}


def _host_process(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"] = {"windowsOptions": {"hostProcess": True}}


def _host_port(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]


def _seccomp(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}


def _sysctl(pod: dict[str, Any]) -> None:
    pod["spec"]["securityContext"] = {"sysctls": [{"name": "kernel.core_pattern", "value": "|/evil"}]}


def _selinux(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"seLinuxOptions": {"type": "spc_t"}}


@pytest.mark.parametrize(("change", "field", "rule"), [
    (_host_pid, "spec.hostPID", "host namespaces are not allowed"),
    (_host_ipc, "spec.hostIPC", "host namespaces are not allowed"),
    (_host_path, "spec.volumes[0].hostPath (kubelet: /var/lib/kubelet/pods)", "hostPath volumes are not allowed"),
    (_privileged("containers"), "spec.containers[0].securityContext.privileged", "privileged containers"),
    (_privileged("initContainers"), "spec.initContainers[0].securityContext.privileged", "privileged containers"),
    (_capability, "spec.containers[0].securityContext.capabilities.add (SYS_PTRACE)",
     "only these capabilities may be added: AUDIT_WRITE, CHOWN"),
    (_proc_mount, "spec.containers[0].securityContext.procMount (Unmasked)", "procMount must be Default"),
    (_host_process, "spec.securityContext.windowsOptions.hostProcess", "Windows host processes"),
    (_host_port, "spec.containers[0].ports[0].hostPort (8080)", "host ports are not allowed"),
    (_seccomp, "spec.containers[0].securityContext.seccompProfile.type", "seccomp may not be Unconfined"),
    (_sysctl, "spec.securityContext.sysctls[0] (kernel.core_pattern=|/evil)", "only the safe sysctls"),
    (_selinux, "spec.containers[0].securityContext.seLinuxOptions.type (spc_t)", "the SELinux type must be"),
], ids=["hostPID", "hostIPC", "hostPath", "privileged", "privileged-init", "capabilities", "procMount",
        "hostProcess", "hostPort", "seccomp", "sysctls", "selinux"])
async def test_each_field_pod_security_baseline_forbids_is_refused(admit: Any, interfaces: list[Any], change: Any,
                                                                  field: str, rule: str) -> None:
    """Issue 25: each of these lets a container beside the sidecar reach its token file (or the node)."""
    interfaces.append(weather_interface())
    pod = plain_pod()
    change(pod)
    message = refusal(await admit(pod))
    assert f"{field}: {BASELINE}: {rule}" in message, message


async def test_baseline_allows_what_baseline_allows(admit: Any, interfaces: list[Any]) -> None:
    """The capabilities on the baseline list, a safe sysctl, RuntimeDefault seccomp, procMount Default."""
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["securityContext"] = {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_BIND_SERVICE", "CAP_CHOWN"]},
                                                       "procMount": "Default", "privileged": False}
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    assert (await admit(pod)).response["response"]["allowed"] is True


async def test_the_injected_sidecar_passes_and_a_live_injected_pod_has_no_violation(admit: Any,
                                                                                   interfaces: list[Any]) -> None:
    from lockstep.operator.admission_policy import pod_violations

    pod = await _injected(admit, interfaces)
    assert pod_violations(pod) == []
    assert any(c["name"] == "lockstep-sidecar" for c in pod["spec"]["initContainers"])


@pytest.mark.parametrize("change", [_host_pid, _host_path, _privileged("containers"), _capability],
                         ids=["hostPID", "hostPath", "privileged", "capabilities"])
async def test_pod_violations_judges_a_live_pod_admitted_without_the_webhook(admit: Any, interfaces: list[Any],
                                                                            change: Any) -> None:
    """What the operator calls on a pod it is about to judge: a pod admitted while the webhook was off
    (or set to Ignore) is never verified."""
    from lockstep.operator.admission_policy import pod_violations

    pod = await _injected(admit, interfaces)
    change(pod)
    assert any(BASELINE in problem for problem in pod_violations(pod))


async def test_pod_violations_names_the_side_doors_too(admit: Any, interfaces: list[Any]) -> None:
    from lockstep.operator.admission_policy import pod_violations

    pod = await _injected(admit, interfaces)
    pod["spec"]["shareProcessNamespace"] = True
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "lockstep-token", "mountPath": "/t"})
    problems = pod_violations(pod)
    assert any("shareProcessNamespace" in p for p in problems)
    assert any("only the sidecar may mount lockstep-token" in p for p in problems)


async def test_a_privileged_ephemeral_container_is_refused_on_update(admit: Any, interfaces: list[Any]) -> None:
    """`kubectl debug --profile=sysadmin` adds a privileged ephemeral container: it could read every file
    of the node, the sidecar's token among them."""
    old = await _injected(admit, interfaces)
    for debug, field in (
            ({"name": "debug", "image": "busybox", "securityContext": {"privileged": True}},
             "spec.ephemeralContainers[0].securityContext.privileged"),
            ({"name": "debug", "image": "busybox", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}},
             "spec.ephemeralContainers[0].securityContext.capabilities.add (SYS_PTRACE)")):
        new = copy.deepcopy(old)
        new["spec"]["ephemeralContainers"] = [debug]
        admitted = await admit(new, webhook="validate-pods", operation="UPDATE", old=old,
                               sub_resource="ephemeralcontainers")
        assert f"{field}: {BASELINE}" in refusal(admitted)


async def test_an_update_of_a_pod_that_already_broke_baseline_is_not_blocked(admit: Any,
                                                                            interfaces: list[Any]) -> None:
    """A pod admitted before these rules (or while the webhook was off) still takes its controllers'
    metadata updates (finalizers, owner references): only what an UPDATE adds is refused."""
    old = await _injected(admit, interfaces)
    old["spec"]["hostPID"] = True
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert (await admit(new, webhook="validate-pods", operation="UPDATE", old=old)
            ).response["response"]["allowed"] is True
