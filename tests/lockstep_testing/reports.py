"""What a sidecar reports, for the operator's tests: the one builder of observations and report bodies.

``observation(tools)`` reads the interface of ``tools`` (default: the weather server's, kmock_support.TOOLS)
as the sidecar would; ``report_body(tools)`` is its wire form, a fresh copy each call (tests change them),
with the definitions, or, with ``digests_only``, without them as the sidecar sends once the operator took
the digests. ``at`` is when it was observed: a fixed moment (AT) unless the test needs a fresh one ("now").
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from lockstep.core import Interface
from lockstep.core.report import Observation

__all__ = ["AT", "observation", "report_body"]

AT = "2026-11-22T02:00:00Z"


def observation(tools: list[dict[str, Any]] | None = None, *, document: dict[str, Any] | None = None,
                at: str = AT) -> Observation:
    """The observation of ``document`` (default: ``{"tools": tools}``, tools default kmock_support.TOOLS)."""
    if document is None:
        from lockstep_testing.kmock_support import TOOLS

        document = {"tools": copy.deepcopy(TOOLS if tools is None else tools)}
    moment = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if at == "now" else at
    return Observation.of_interface(Interface.from_document(copy.deepcopy(document)), moment)


def report_body(tools: list[dict[str, Any]] | None = None, *, document: dict[str, Any] | None = None,
                at: str = AT, digests_only: bool = False) -> dict[str, Any]:
    """The report body of :func:`observation` (a deep copy), without ``definitions`` if ``digests_only``."""
    body = copy.deepcopy(observation(tools, document=document, at=at).to_dict())
    if digests_only:
        del body["definitions"]  # as the sidecar sends it (Observation.to_dict(with_definitions=False))
    return body
