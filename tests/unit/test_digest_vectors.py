"""The lockstep/v1 test vectors: tests/data/digest_vectors.json, published in docs/digest.md.

Each vector is checked twice: through Lockstep's own API, and by a from-scratch implementation of
the formula as docs/digest.md states it (hashlib + the rfc8785 package), so a change of either the
code or the document shows. docs/digest.md renders the vectors between two markers; after changing
the JSON file, run ``python tests/unit/test_digest_vectors.py`` to render them again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":  # run as a script to regenerate the doc: make lockstep_testing importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lockstep_testing.jcs_reference import reference_jcs

from lockstep.core import FORMULA, ComponentKind, Interface, digest_interface, parse_ignore_rules
from lockstep.core.model import loads_strict

ROOT = Path(__file__).resolve().parents[2]
VECTORS_FILE = ROOT / "tests" / "data" / "digest_vectors.json"
DOC_FILE = ROOT / "docs" / "digest.md"
BEGIN = "<!-- test vectors: generated from tests/data/digest_vectors.json, do not edit -->"
END = "<!-- end of test vectors -->"
SAFE_INTEGER = 2**53 - 1

VECTORS: list[dict[str, Any]] = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))["vectors"]
CASES = [
    pytest.param(vector, index, id=f"{vector['name']}-{index}")
    for vector in VECTORS
    for index in range(len(vector["inputs"]))
]


def expected_digest(vector: dict[str, Any]) -> dict[str, Any]:
    components = [{key: entry[key] for key in ("kind", "name", "digest")} for entry in vector["components"]]
    return {"digest": vector["digest"], "formula": FORMULA, "components": components}


@pytest.mark.parametrize(("vector", "index"), CASES)
def test_every_input_digests_to_the_vector(vector, index):
    interface = Interface.from_document(loads_strict(vector["inputs"][index]))
    assert digest_interface(interface, vector.get("ignore")).to_dict() == expected_digest(vector)


def sha256_text(*parts: bytes) -> str:
    return "sha256:" + hashlib.sha256(b"".join(parts)).hexdigest()


def definitions_by_component(document: dict[str, Any], ignore: list[str]) -> dict[tuple[str, str], Any]:
    """Every component's definition, read straight from the document (ignore rules through Lockstep)."""
    found: dict[tuple[str, str], Any] = {}
    if document.get("instructions") is not None:
        found["instructions", "instructions"] = document["instructions"]
    for kind, list_key, key_field in [("tool", "tools", "name"), ("prompt", "prompts", "name"),
                                      ("resource", "resources", "uri"),
                                      ("resourceTemplate", "resourceTemplates", "uriTemplate")]:
        for item in document.get(list_key, []):
            found[kind, item[key_field]] = item
    if ignore:
        rules = parse_ignore_rules(ignore)
        interface = Interface.from_document(document)
        kept = (rules.apply(component) for component in interface)
        found = {(entry.kind.value, entry.name): entry.definition for entry in kept if entry is not None}
    return found


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vectors_follow_the_documented_formula(vector):
    """An independent implementation of docs/digest.md agrees with every stored value."""
    definitions = definitions_by_component(json.loads(vector["inputs"][0]), vector.get("ignore", []))
    assert sorted(definitions) == sorted((entry["kind"], entry["name"]) for entry in vector["components"])
    for entry in vector["components"]:
        canonical = reference_jcs(definitions[entry["kind"], entry["name"]])
        assert canonical == entry["canonical"].encode("utf-8")
        assert entry["digest"] == sha256_text(b"lockstep/v1\x00", entry["kind"].encode(), b"\x00", canonical)
    listed = sorted(entry["digest"] for entry in vector["components"])
    assert vector["digest"] == sha256_text(b"lockstep/v1\x00interface\x00", reference_jcs(listed))


def test_vectors_that_should_differ_do():
    by_name = {vector["name"]: vector for vector in VECTORS}
    assert by_name["invisible-unicode"]["digest"] != by_name["single-tool"]["digest"]
    tool, prompt = sorted(by_name["kind-separation"]["components"], key=lambda entry: entry["kind"] != "tool")
    assert tool["canonical"] == prompt["canonical"] and tool["digest"] != prompt["digest"]
    digests = [vector["digest"] for vector in VECTORS]
    assert len(set(digests)) == len(digests)
    assert {entry["kind"] for vector in VECTORS for entry in vector["components"]} == {
        kind.value for kind in ComponentKind
    }


def render_vectors(vectors: list[dict[str, Any]]) -> str:
    """The Markdown of the test vectors section of docs/digest.md."""
    lines: list[str] = []
    for number, vector in enumerate(vectors, 1):
        lines += [f"### {number}. {vector['title']} (`{vector['name']}`)", "", vector["note"], ""]
        if vector.get("ignore"):
            lines += ["Ignore rules: " + ", ".join(f"`{rule}`" for rule in vector["ignore"]), ""]
        for index, source in enumerate(vector["inputs"], 1):
            label = "Input" if len(vector["inputs"]) == 1 else f"Input {index} of {len(vector['inputs'])}"
            lines += [f"{label}:", "", "```json", source, "```", ""]
        if vector["components"]:
            lines += ["Canonical form (RFC 8785, UTF-8) of each component:", "", "```text"]
            lines += [f"{entry['kind']} {entry['name']}: {entry['canonical']}" for entry in vector["components"]]
            lines += ["```", "", "| kind | name | component digest |", "|---|---|---|"]
            lines += [f"| `{entry['kind']}` | `{entry['name']}` | `{entry['digest']}` |"
                      for entry in vector["components"]]
            lines += [""]
        lines += [f"Aggregate: `{vector['digest']}`", ""]
    return "\n".join(lines)


def split_doc(text: str) -> tuple[str, str, str]:
    head, rest = text.split(BEGIN + "\n", 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def test_the_document_shows_exactly_these_vectors():
    _, body, _ = split_doc(DOC_FILE.read_text(encoding="utf-8"))
    assert body == render_vectors(VECTORS), "docs/digest.md is stale: run python tests/unit/test_digest_vectors.py"


def write_doc() -> None:
    head, _, tail = split_doc(DOC_FILE.read_text(encoding="utf-8"))
    DOC_FILE.write_text(head + BEGIN + "\n" + render_vectors(VECTORS) + END + tail, encoding="utf-8")


if __name__ == "__main__":
    write_doc()
    sys.exit(0)
