"""A small asyncio Kubernetes API client on aiohttp, for the calls the operator makes itself.

kopf owns the watches; this client makes the writes (pods/status, the resource's status, Events,
the ConfigMaps of large observed definitions) and the TokenReviews inside the operator's event
loop, with the credentials kopf logged in with.
Every PATCH is a JSON merge patch and says so in its Content-Type.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import aiohttp
import kopf

from lockstep.core.names import GROUP, PLURAL, VERSION

__all__ = ["GROUP", "MERGE_PATCH", "PLURAL", "VERSION", "KubeApiError", "KubeClient"]

MERGE_PATCH = "application/merge-patch+json"


class KubeApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API answered {status}: {message}")
        self.status = status


class KubeClient:
    """Authenticated JSON requests to one API server."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self._server = info.server.rstrip("/")
        headers = dict(info.as_http_headers())
        headers.setdefault("User-Agent", "lockstep-operator")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, ssl=info.as_ssl_context()),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=30),
        )
        #: Requests made, by "VERB kind" (kind: the path's last resource name, e.g. "PATCH pods/status"),
        #: and the bytes of their bodies sent and received: what the operator costs the API server
        #: (served as JSON on the metrics port at /debug/api-requests; bench/operator.py reads it).
        self.requests: Counter[str] = Counter()
        self.bytes_sent = 0
        self.bytes_received = 0

    async def close(self) -> None:
        await self._session.close()

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json", params: Mapping[str, str] | None = None) -> Any:
        data = json.dumps(body, separators=(",", ":")) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        self.requests[f"{method} {_kind(path)}"] += 1
        self.bytes_sent += len(data) if data is not None else 0
        async with self._session.request(method, self._server + path, data=data, headers=headers,
                                         params=params) as response:
            text = await response.text()
            self.bytes_received += len(text)
            if response.status >= 400:
                raise KubeApiError(response.status, _status_message(text))
            return json.loads(text) if text else None

    async def list_all(self, path: str, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        selection = {"labelSelector": label_selector} if label_selector else {}
        params: dict[str, str] = {"limit": "500", **selection}
        while True:
            page = await self.request("GET", path, params=params)
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            params = {"limit": "500", "continue": token, **selection}

    async def get(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", path)
        return result

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("PATCH", path, body, content_type=MERGE_PATCH)
        return result

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("POST", path, body)
        return result

    async def delete(self, path: str) -> None:
        await self.request("DELETE", path)

    async def token_review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                  "spec": {"token": token, "audiences": audiences}}
        result = await self.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
        return dict((result or {}).get("status") or {})

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        await self.request("POST", f"/api/v1/namespaces/{namespace}/events", event)

    # paths
    @staticmethod
    def pod_status_path(namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}/status"

    @staticmethod
    def resource_status_path(namespace: str, name: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"

    @staticmethod
    def configmaps_path(namespace: str | None) -> str:
        return f"/api/v1/namespaces/{namespace}/configmaps" if namespace else "/api/v1/configmaps"

    @staticmethod
    def configmap_path(namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/configmaps/{name}"

    @staticmethod
    def pods_path(namespace: str | None) -> str:
        return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"

    @staticmethod
    def resources_path(namespace: str | None) -> str:
        base = f"/apis/{GROUP}/{VERSION}"
        return f"{base}/namespaces/{namespace}/{PLURAL}" if namespace else f"{base}/{PLURAL}"


def _kind(path: str) -> str:
    """The resource a request is about, for counting: "pods/status", "events", "tokenreviews"..."""
    parts = [part for part in path.split("?", 1)[0].split("/") if part]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2:]
    elif parts and parts[0] in ("api", "apis"):
        parts = parts[2:] if parts[0] == "api" else parts[3:]
    if len(parts) >= 3:
        return f"{parts[0]}/{parts[2]}"  # a subresource: pods/status
    return parts[0] if parts else "/"


def api_counts(client: KubeClient) -> dict[str, Any]:
    return {"requests": dict(client.requests), "total": sum(client.requests.values()),
            "bytesSent": client.bytes_sent, "bytesReceived": client.bytes_received}


def _status_message(text: str) -> str:
    try:
        return str(json.loads(text).get("message") or text)[:300]
    except (ValueError, AttributeError):
        return text[:300]
