"""The pure parts of the injection: durations, selectors, bindings from MCPServerInterface objects."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep.operator.injection import (
    Binding,
    BindingError,
    InjectionSettings,
    parse_duration,
    plan_injection,
    selector_matches,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("60s", 60.0), ("1m30s", 90.0), ("250ms", 0.25), ("2h", 7200.0), (45, 45.0), ("1.5s", 1.5)])
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10 s", "5d", "-1s", True])
def test_bad_durations(text: Any) -> None:
    with pytest.raises(BindingError):
        parse_duration(text)


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({"matchLabels": {"app": "weather"}}, {"app": "weather", "tier": "x"}, True),
    ({"matchLabels": {"app": "weather"}}, {"app": "news"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, {"app": "b"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {"app": "a"}, False),
    ({"matchExpressions": [{"key": "canary", "operator": "Exists"}]}, {"canary": ""}, True),
    ({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}, {"canary": "1"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Bogus", "values": []}]}, {"app": "a"}, False),
    ({}, {"app": "weather"}, False),
    (None, {"app": "weather"}, False),
])
def test_selectors(selector: Any, labels: dict[str, str], selected: bool) -> None:
    assert selector_matches(selector, labels) is selected


def test_binding_defaults_and_unknown_transport() -> None:
    # no enforcement is Isolate, which runs the in-line proxy on its default port (issue 28)
    assert Binding.from_interface({"metadata": {"name": "w"}, "spec": {}}) == Binding(interface="w", proxy_port=8090)
    assert Binding.from_interface({"metadata": {"name": "w"}, "spec": {"enforcement": "Audit"}}) == Binding(
        interface="w", enforcement="Audit")
    with pytest.raises(BindingError, match="websocket"):
        Binding.from_interface({"metadata": {"name": "w"}, "spec": {"endpoint": {"transport": "websocket"}}})


def test_a_named_port_the_pod_lacks_is_an_error() -> None:
    pod = {"spec": {"containers": [{"name": "server"}]}}
    with pytest.raises(BindingError, match="'mcp'"):
        plan_injection(pod, InjectionSettings(image="i", report_url="https://op"), Binding(port="mcp"))


def test_token_expiry_is_never_below_the_api_servers_minimum() -> None:
    ops = plan_injection({"spec": {"containers": [{"name": "server"}]}},
                         InjectionSettings(image="i", report_url="https://op", token_expiration_seconds=60), Binding())
    [volumes] = [op["value"] for op in ops if op["path"] == "/spec/volumes"]
    assert volumes[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 600
