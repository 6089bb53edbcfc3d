"""The MCPServerInterface CRD: its structural schema and CEL rules accept what users apply and
what ``lockstep snapshot`` prints, and refuse broken manifests.

The structural part is checked with ``jsonschema`` (the OpenAPI v3 subset a CRD uses is JSON Schema);
the ``x-kubernetes-validations`` rules are evaluated with ``cel-python`` after the schema's defaults
are applied, as the API server does. ``x-kubernetes-list-type: map`` keys are checked by hand.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from lockstep.cli import cli
from lockstep.core import Interface
from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "mcpserverinterfaces.lockstep.dev.yaml"

INTERFACE = {
    "instructions": "Weather forecasts.",
    "tools": [
        {"name": "get_forecast", "description": "Forecast for a city.",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "get_alerts", "inputSchema": {"type": "object"}},
    ],
    "prompts": [{"name": "summary", "description": "Summarise the week."}],
}


class ManifestInvalid(Exception):
    """The manifest breaks the CRD's schema or one of its CEL rules."""


def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def _schema() -> dict[str, Any]:
    return _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _apply_defaults(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        return [_apply_defaults(item, schema["items"]) for item in value]
    return value


def _cel_rules(value: Any, schema: dict[str, Any], path: str = "") -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        env = celpy.Environment()
        program = env.program(env.compile(rule["rule"]))
        if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
            raise ManifestInvalid(f"{path or '<root>'}: {rule['message']}")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _cel_rules(value[key], sub, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        keys = schema.get("x-kubernetes-list-map-keys")
        if schema.get("x-kubernetes-list-type") == "map" and keys:
            seen = [tuple(item.get(key) for key in keys) for item in value]
            if len(seen) != len(set(seen)):
                raise ManifestInvalid(f"{path}: duplicate entries for keys {keys}")
        for index, item in enumerate(value):
            _cel_rules(item, schema["items"], f"{path}[{index}]")


def _json_schema(schema: Any) -> Any:
    """The OpenAPI v3 schema as plain JSON Schema: drop the x-kubernetes-* extensions, and refuse unknown
    fields where the API server would (kubectl's default strict field validation)."""
    if isinstance(schema, dict):
        converted = {key: _json_schema(sub) for key, sub in schema.items() if not key.startswith("x-kubernetes")}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            converted.setdefault("additionalProperties", False)
        return converted
    if isinstance(schema, list):
        return [_json_schema(item) for item in schema]
    return schema


def validate(manifest: dict[str, Any]) -> dict[str, Any]:
    """Validate like the API server: structure, defaults, then CEL. Returns the defaulted object."""
    schema = _schema()
    try:
        jsonschema.validate(manifest, _json_schema(schema))
    except jsonschema.ValidationError as error:
        raise ManifestInvalid(error.message) from None
    defaulted = _apply_defaults(copy.deepcopy(manifest), schema)
    _cel_rules(defaulted, schema)
    return defaulted


def _manifest(**spec: Any) -> dict[str, Any]:
    manifest = build_manifest(Revision.of(Interface.from_document(INTERFACE)), name="weather", namespace="agents")
    manifest["spec"].update(spec)
    return manifest


def test_crd_names_and_subresources() -> None:
    crd = _crd()
    assert crd["metadata"]["name"] == "mcpserverinterfaces.lockstep.dev"
    assert crd["spec"]["names"]["shortNames"] == ["mcpi"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {column["name"] for column in version["additionalPrinterColumns"]}
    assert {"Phase", "Ready", "Drifted", "Approved", "Age"} <= columns


def test_every_spec_field_has_a_description() -> None:
    spec = _schema()["properties"]["spec"]
    missing = [name for name, sub in spec["properties"].items() if "description" not in sub]
    assert missing == []


def test_accepts_the_manifest_that_snapshot_prints(tmp_path: Path) -> None:
    snapshot = tmp_path / "weather.json"
    snapshot.write_text(json.dumps(INTERFACE))
    for extra in ([], ["--digests-only"], ["--ignore", "/tools/*/description"]):
        result = CliRunner().invoke(cli, ["snapshot", str(snapshot), "--name", "weather", "-n", "agents", *extra])
        assert result.exit_code == 0, result.output
        defaulted = validate(yaml.safe_load(result.stdout))
        assert defaulted["spec"]["probe"] == {"interval": "60s"}  # timeout and staleAfter follow interval


def test_accepts_every_example() -> None:
    examples = sorted((ROOT / "examples").glob("**/*.yaml"))
    checked = 0
    for path in examples:
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "MCPServerInterface":
                validate(document)
                checked += 1
    if checked == 0:
        pytest.skip("examples/ holds no MCPServerInterface yet")


def test_first_seen_needs_no_approved_revision() -> None:
    manifest = _manifest(approval="FirstSeen")
    del manifest["spec"]["approved"]
    assert validate(manifest)["spec"]["enforcement"] == "Isolate"


def test_a_short_interval_alone_is_accepted() -> None:
    """Defaults are applied before CEL: a fixed default timeout of 10s would refuse this."""
    assert validate(_manifest(probe={"interval": "5s"}))["spec"]["probe"] == {"interval": "5s"}


def test_probe_defaults_follow_the_interval() -> None:
    from lockstep.operator.injection import probe_stale_after, probe_timeout

    assert (probe_timeout({"interval": "5s"}), probe_stale_after({"interval": "5s"})) == (5.0, 180.0)
    assert (probe_timeout({"interval": "2m"}), probe_stale_after({"interval": "2m"})) == (10.0, 360.0)
    assert (probe_timeout({"timeout": "3s"}), probe_stale_after({"staleAfter": "90s"})) == (3.0, 90.0)


def test_audit_with_explicit_probe_and_headers() -> None:
    validate(_manifest(enforcement="Audit", probe={"interval": "30s", "timeout": "5s", "staleAfter": "2m"},
                       endpoint={"port": 9000, "path": "/sse", "transport": "sse",
                                 "headersFrom": {"secretName": "weather-token"}}))


BROKEN: list[tuple[str, dict[str, Any], str]] = [
    ("manual without approved revisions", {"approved": []}, "at least one approved revision"),
    ("bad digest", {"approved": [{"digest": "sha256:XYZ", "formula": "lockstep/v1"}]}, "does not match"),
    ("unknown formula", {"approved": [{"digest": "sha256:" + "a" * 64, "formula": "lockstep/v9"}]}, "is not one of"),
    ("same digest twice", {"approved": [{"digest": "sha256:" + "a" * 64, "formula": "lockstep/v1"}] * 2},
     "duplicate entries for keys \\['digest'\\]"),
    ("unknown enforcement", {"enforcement": "Block"}, "is not one of"),
    ("unknown approval", {"approval": "Auto"}, "is not one of"),
    ("bad transport", {"endpoint": {"transport": "stdio"}}, "is not one of"),
    ("port out of range", {"endpoint": {"port": 70000}}, "maximum"),
    ("path without slash", {"endpoint": {"path": "mcp"}}, "does not match"),
    ("bad duration", {"probe": {"interval": "soon"}}, "does not match"),
    ("stale before interval", {"probe": {"interval": "60s", "staleAfter": "30s"}}, "staleAfter must be longer"),
    ("timeout over interval", {"probe": {"interval": "10s", "timeout": "1m"}}, "timeout must not"),
    ("empty selector", {"selector": {}}, "must not be empty"),
    ("ignore outside the interface", {"ignore": ["/serverInfo/version"]}, "does not match"),
    ("duplicate component", {"approved": [{"digest": "sha256:" + "a" * 64, "formula": "lockstep/v1", "components": [
        {"kind": "tool", "name": "x", "digest": "sha256:" + "b" * 64}] * 2}]}, "duplicate entries"),
    ("unknown spec field", {"approvedd": []}, "Additional properties"),
]


@pytest.mark.parametrize(("change", "expected"), [(case[1], case[2]) for case in BROKEN],
                         ids=[case[0] for case in BROKEN])
def test_rejects_broken_manifests(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(ManifestInvalid, match=expected):
        validate(_manifest(**change))


def test_the_status_the_operator_writes_fits_the_schema() -> None:
    from lockstep.operator.cache import PodRecord
    from lockstep.operator.judge import Policy, judge
    from lockstep.operator.state import PodTrack, ResourceMemory
    from lockstep.operator.status import build_status

    from lockstep.core.report import Observation

    manifest = _manifest(approval="FirstSeen")
    manifest["metadata"]["generation"] = 4
    policy = Policy.from_resource(manifest)
    changed = {**INTERFACE, "tools": [{**INTERFACE["tools"][0], "description": "Now also reads your mail."},
                                      INTERFACE["tools"][1]]}
    tracks = []
    for name, document, was_verified in (("p1", INTERFACE, True), ("p2", changed, True), ("p3", None, False)):
        pod = PodRecord.from_body({"metadata": {"namespace": "agents", "name": name, "uid": name}})
        track = None
        if document is not None:
            observation = Observation.of_interface(Interface.from_document(document), "2026-11-22T02:00:00Z")
            track = PodTrack(uid=name, observation=observation,
                             verdict=judge(observation, policy, was_verified=was_verified))
        tracks.append((pod, track))
    memory = ResourceMemory(trusted={**policy.approved[0].to_spec(), "trustedAt": "2026-11-22T01:00:00Z",
                                     "pod": "p1"}, last_verification="2026-11-22T02:00:00Z")
    status = build_status(policy, tracks, memory, {}, definitions_limit=64 * 1024)
    assert status["phase"] == "Drifted" and status["podsReady"] == "1/3"
    manifest["status"] = status
    validate(manifest)
    drifted = [entry for entry in status["observed"] if not entry["approved"]]
    assert drifted[0]["findings"][0]["name"] == "get_forecast" and "definitions" in drifted[0]
