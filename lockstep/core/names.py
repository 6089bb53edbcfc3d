"""The names every part of Lockstep shares (design.md, "Names"): the API, the pod's condition, the
labels and annotations, the sidecar's token and the names of its environment variables.

This is the one place these strings are written; every other module imports them
(``tests/unit/test_one_home.py`` fails when a second module defines one). Pure: no imports.
"""

from __future__ import annotations

__all__ = [
    "API_VERSION",
    "APPROVAL_PREDICATE_TYPE",
    "CONDITION_TYPE",
    "DIGEST_ANNOTATION",
    "DIGEST_LABEL",
    "ENV_HEADERS_DIR",
    "ENV_INTERFACE",
    "ENV_MCP_PATH",
    "ENV_MCP_PORT",
    "ENV_MCP_TRANSPORT",
    "ENV_MCP_URL",
    "ENV_OPERATOR_CA",
    "ENV_OPERATOR_URL",
    "ENV_PROBE_CLIENT_CAPABILITIES",
    "ENV_PROBE_INTERVAL",
    "ENV_PROBE_TIMEOUT",
    "ENV_POD_IP",
    "ENV_PROXY_MODE",
    "ENV_PROXY_PORT",
    "ENV_SIDECAR_PORT",
    "ENV_TOKEN_PATH",
    "GROUP",
    "HEADERS_DIR",
    "INJECT_LABEL",
    "INTERFACE_ANNOTATION",
    "INTERFACE_LABEL",
    "KIND",
    "PLURAL",
    "POLICY_KIND",
    "POLICY_PLURAL",
    "PROXY_PORT_NAME",
    "REPORT_PATH",
    "REPORT_STAMP_ANNOTATION",
    "SHORT_NAME",
    "SIDECAR_ENV",
    "SIDECAR_NAME",
    "TOKEN_AUDIENCE",
    "TOKEN_DIR",
    "TOKEN_PATH",
    "VERSION",
]

# ---------------------------------------------------------------- the custom resource

#: API group and version of MCPServerInterface.
GROUP = "lockstep.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MCPServerInterface"
PLURAL = "mcpserverinterfaces"
SHORT_NAME = "mcpi"

#: The cluster-scoped trust policy of signed approvals, and the in-toto predicate an approver signs.
POLICY_KIND = "MCPApprovalPolicy"
POLICY_PLURAL = "mcpapprovalpolicies"
APPROVAL_PREDICATE_TYPE = "https://lockstep.dev/approval/v1"

# ---------------------------------------------------------------- pods

#: The pod readiness gate and the condition type the operator writes.
CONDITION_TYPE = "lockstep.dev/interface-verified"
#: Opt-in label of a namespace or a pod (``enabled``; ``disabled`` opts a pod out where allowed).
INJECT_LABEL = "lockstep.dev/inject"
#: The optional annotation that binds a pod to one MCPServerInterface by name.
INTERFACE_ANNOTATION = "lockstep.dev/interface"
#: The injected sidecar container, and the name of its in-line proxy's port (enforcement Quarantine).
SIDECAR_NAME = "lockstep-sidecar"
PROXY_PORT_NAME = "lockstep-mcp"

# ---------------------------------------------------------------- the sidecar's token

#: Audience of the sidecar's projected service-account token (a TokenReview asks for it).
TOKEN_AUDIENCE = "lockstep.dev"
#: Where the token is mounted in the sidecar, and its file.
TOKEN_DIR = "/var/run/secrets/lockstep.dev"
TOKEN_PATH = f"{TOKEN_DIR}/token"
#: Where the Secret of MCP request headers is mounted in the sidecar (one file per header).
HEADERS_DIR = "/etc/lockstep/headers"

# ---------------------------------------------------------------- ConfigMaps of observed definitions

#: Label naming the MCPServerInterface a ConfigMap belongs to: the same key as the pod annotation.
INTERFACE_LABEL = INTERFACE_ANNOTATION
#: Label with the first 12 hex digits of the observed digest, and annotation with the whole digest.
DIGEST_LABEL = "lockstep.dev/observed-digest"
DIGEST_ANNOTATION = "lockstep.dev/digest"

# ---------------------------------------------------------------- the sidecar's environment (names only)

ENV_MCP_URL = "LOCKSTEP_MCP_URL"
ENV_MCP_PORT = "LOCKSTEP_MCP_PORT"
ENV_MCP_PATH = "LOCKSTEP_MCP_PATH"
ENV_MCP_TRANSPORT = "LOCKSTEP_MCP_TRANSPORT"
ENV_INTERFACE = "LOCKSTEP_INTERFACE"
ENV_PROBE_INTERVAL = "LOCKSTEP_PROBE_INTERVAL"
ENV_PROBE_TIMEOUT = "LOCKSTEP_PROBE_TIMEOUT"
ENV_OPERATOR_URL = "LOCKSTEP_OPERATOR_URL"
ENV_TOKEN_PATH = "LOCKSTEP_TOKEN_PATH"
ENV_OPERATOR_CA = "LOCKSTEP_OPERATOR_CA"
ENV_HEADERS_DIR = "LOCKSTEP_HEADERS_DIR"
ENV_SIDECAR_PORT = "LOCKSTEP_SIDECAR_PORT"
ENV_PROXY_PORT = "LOCKSTEP_PROXY_PORT"
ENV_PROBE_CLIENT_CAPABILITIES = "LOCKSTEP_PROBE_CLIENT_CAPABILITIES"
ENV_PROXY_MODE = "LOCKSTEP_PROXY_MODE"
ENV_POD_IP = "LOCKSTEP_POD_IP"
#: Every variable the webhook sets on the sidecar, in the order it writes them.
SIDECAR_ENV = (
    ENV_MCP_URL, ENV_MCP_PORT, ENV_MCP_PATH, ENV_MCP_TRANSPORT, ENV_INTERFACE, ENV_PROBE_INTERVAL,
    ENV_PROBE_TIMEOUT, ENV_OPERATOR_URL, ENV_TOKEN_PATH, ENV_OPERATOR_CA, ENV_HEADERS_DIR, ENV_SIDECAR_PORT,
    ENV_PROXY_PORT, ENV_PROBE_CLIENT_CAPABILITIES, ENV_PROXY_MODE, ENV_POD_IP,
)

#: The operator's report endpoint: sidecars post there, through the Service or to a replica's address.
REPORT_PATH = "/v1/reports"

#: The stamp of the report behind a pod's verdict (lockstep.core.replay), written by the operator.
REPORT_STAMP_ANNOTATION = "lockstep.dev/last-report"
