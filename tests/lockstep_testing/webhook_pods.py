"""Pods and MCPServerInterfaces as the webhook tests send them (tests/webhook)."""

from __future__ import annotations

from typing import Any

__all__ = ["NAMESPACE", "plain_pod", "weather_interface"]

NAMESPACE = "agents"


def weather_interface(**endpoint: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
        "metadata": {"name": "weather", "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": {"app": "weather-mcp"}},
                 "endpoint": {"port": 8000, "path": "/mcp", "transport": "streamable-http", **endpoint},
                 "probe": {"interval": "30s", "timeout": "5s", "staleAfter": "90s"},
                 "approved": []},
    }


def plain_pod(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "weather-7d9f-", "namespace": NAMESPACE,
                     "labels": {"app": "weather-mcp", **labels},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "weather-7d9f",
                                          "uid": "6c1e9b3a-0000-4000-8000-00000000000a", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {
            "serviceAccountName": "weather",
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "server", "image": "example.com/weather-mcp:1.4",
                            "ports": [{"name": "mcp", "containerPort": 8000, "protocol": "TCP"}],
                            "volumeMounts": [{"name": "kube-api-access-x1", "mountPath":
                                              "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always",
        },
    }
