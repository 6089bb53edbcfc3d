"""The kmock emulation of the Kubernetes API that ``lockstep demo --backend emulated`` (and the tests) run
Lockstep against: kmock's emulator with the fixes Lockstep needs, the resources it serves, and TokenReviews
answered for pod-bound projected tokens as a real API server answers them.

Each fix names the kmock 0.8 behaviour it works around. A test module selects the emulator with::

    pytestmark = pytest.mark.kmock(cls=Emulator)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock

from lockstep.core.names import API_VERSION, KIND, PLURAL, POLICY_KIND, POLICY_PLURAL, TOKEN_AUDIENCE
from lockstep.operator.shard import LabelSelector

__all__ = ["CRD_RESOURCE", "POLICY_RESOURCE", "Emulator", "Identity", "TokenBook", "declare_resources", "jwt_shaped"]

CRD_RESOURCE = f"{API_VERSION}/{PLURAL}"
POLICY_RESOURCE = f"{API_VERSION}/{POLICY_PLURAL}"
TOKEN_REVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator with three fixes.

    * kmock changes its object store BEFORE it looks at reactions, so a test reaction on a
      POST/PATCH (an injected 409) still stores or patches the object, and every POST without
      ``metadata.name`` is stored under the name None (the second one gets 409 "Object Already
      Exists"). Requests matching a view in ``bypass`` skip the object store and get the reactions only.
    * kmock ignores ``generateName``: such objects get ``<generateName><n>`` here.
    * kmock matches every request against a reaction by re-filtering its whole request history
      (``request in view`` walks all requests recorded so far), so a reaction makes each request
      cost O(requests so far): a benchmark of thousands of reports slows to a crawl. TokenReviews,
      which every report needs, are answered here by ``token_reviews`` instead, without a reaction.
      The emulator's own CRUD is built from reactions too: with ``history=False`` (benchmarks) each
      request is forgotten once served, so that the walk covers only the requests in flight; the
      ``pod_status_writes`` counter (the operator's writes) then stands in for the request assertions.
    * kmock finds the object of every GET/PATCH/DELETE by scanning all stored objects (O(objects) per
      request: 20 ms per request at 10,000 pods). A request that names one object is looked up by
      its key here instead; any other request takes kmock's scan.
    * kmock ignores ``labelSelector``: a list or watch with one gets only the matching objects here.
    """

    bypass: list[Any] = attrs.field(factory=list)
    token_reviews: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    history: bool = True
    pod_status_writes: int = 0
    _seq: int = 0

    async def _handle(self, request: kmock.Request) -> Any:
        if request.method == kmock.method.PATCH and request.url.path.endswith("/status") \
                and "/pods/" in request.url.path and request.headers.get("User-Agent") == "lockstep-operator":
            self.pod_status_writes += 1
        try:
            return await self._serve(request)
        finally:
            if not self.history:
                self._requests[:] = [seen for seen in self._requests if seen is not request]

    def _KubernetesEmulator__get_objs(self, request: kmock.Request, strict: bool) -> list[Any]:
        if strict and request.name is not None and request.resource is not None:
            found = self._objects._objects.get((request.resource, request.namespace, request.name))
            return [found] if found is not None else []
        found = list(super()._KubernetesEmulator__get_objs(request, strict))  # type: ignore[misc]
        if not strict and request.params.get("labelSelector"):  # a list or watch with a labelSelector
            selector = LabelSelector.parse(request.params["labelSelector"])
            found = [obj for obj in found if selector.matches((obj.raw.get("metadata") or {}).get("labels"))]
        return found

    async def _serve(self, request: kmock.Request) -> Any:
        if self.token_reviews is not None and request.method == kmock.method.POST \
                and request.url.path == TOKEN_REVIEWS_PATH:
            return aiohttp.web.json_response(self.token_reviews(request.data), status=201)
        if self.bypass and any(request in view for view in self.bypass):
            return await kmock.RawHandler._handle(self, request)
        meta = request.data.get("metadata", {}) if isinstance(request.data, dict) else {}
        if request.action == kmock.action.CREATE and not meta.get("name") and meta.get("generateName"):
            self._seq += 1
            meta["name"] = f"{meta['generateName']}{self._seq}"
        return await super()._handle(request)


def declare_resources(emulator: Any) -> None:
    """Declare the built-in resources and the CRD, with verbs and subresources: without them kmock
    serves ``namespaced: None`` and no verbs in discovery, and kopf does not watch the resource."""
    emulator.resources.load_bundled()
    emulator.resources[CRD_RESOURCE] = kmock.ResourceInfo(
        kind=KIND, singular=KIND.lower(), namespaced=True,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"}, subresources={"status"})
    emulator.resources[POLICY_RESOURCE] = kmock.ResourceInfo(
        kind=POLICY_KIND, singular=POLICY_KIND.lower(), namespaced=False,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"}, subresources={"status"})


@dataclass(frozen=True)
class Identity:
    namespace: str
    pod: str
    uid: str
    audience: str = TOKEN_AUDIENCE


def jwt_shaped(claims: dict[str, Any]) -> str:
    """A token in a bound service-account token's form (a compact JWS: three base64url parts; the
    emulated TokenReview knows it by value, so the signature is filler). The report endpoint refuses
    anything else without a review."""
    def part(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'kid': 'kmock'})}.{part(claims)}.{part('signature')}"


class TokenBook:
    """Answers TokenReviews like a real API server for pod-bound projected tokens: the pod's name
    and uid in ``extra``, unauthenticated for unknown tokens or another audience."""

    def __init__(self, emulator: Any) -> None:
        self.tokens: dict[str, Identity] = {}
        self.reviews = 0
        emulator.token_reviews = self._answer  # never stored, and no reaction (see Emulator)

    def issue(self, namespace: str, pod: str, uid: str, *, audience: str = TOKEN_AUDIENCE) -> str:
        token = jwt_shaped({"aud": [audience], "sub": f"system:serviceaccount:{namespace}:default",
                            "kubernetes.io": {"namespace": namespace, "pod": {"name": pod, "uid": uid}},
                            "n": len(self.tokens)})
        self.tokens[token] = Identity(namespace, pod, uid, audience)
        return token

    def _answer(self, review: dict[str, Any]) -> dict[str, Any]:
        self.reviews += 1
        spec = review["spec"]
        identity = self.tokens.get(spec.get("token", ""))
        status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
        if identity is not None and identity.audience in (spec.get("audiences") or [identity.audience]):
            status = {
                "authenticated": True, "audiences": [identity.audience],
                "user": {"username": f"system:serviceaccount:{identity.namespace}:default", "uid": "sa-uid",
                         "extra": {"authentication.kubernetes.io/pod-name": [identity.pod],
                                   "authentication.kubernetes.io/pod-uid": [identity.uid]}},
            }
        # The client parses the echoed spec back (the `kubernetes` client fails without it).
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec, "status": status}

