"""Docs that cannot drift from the code (issue 12): every `lockstep …` command in the README and docs
parses with the real CLI parser, every repository path they name exists, the chart object names they use
are the ones Helm renders, and the Python snippet of docs/digest.md computes the test vectors' digests."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from lockstep_testing.chart_render import CHART_DIR, documents

from lockstep.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), CHART_DIR / "README.md"]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.DOTALL)
SHELL_ENDS = {">", ">>", "|", "&&", "||", ";", "2>&1", "#"}


def fenced_commands(path: Path) -> list[str]:
    commands = []
    for block in FENCE.findall(path.read_text()):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if re.match(r"^(\S+/)?lockstep\s", line) and "pip install" not in line:
                commands.append(line)
    return commands


COMMANDS = [(path, command) for path in DOCS for command in fenced_commands(path)]


@pytest.mark.parametrize(("path", "command"), COMMANDS,
                         ids=[f"{path.name}:{command[:50]}" for path, command in COMMANDS])
def test_every_documented_command_parses(path: Path, command: str) -> None:
    words = []
    for word in shlex.split(command, comments=True)[1:]:
        if word in SHELL_ENDS or word.startswith((">", "|")):
            break
        words.append(word)
    with click.Context(cli, info_name="lockstep") as context:
        name, sub, rest = cli.resolve_command(context, words)
        assert sub is not None, f"{path.name}: unknown command in {command!r}"
        try:
            sub.make_context(name, rest, parent=context)
        except click.exceptions.Exit:
            pass  # --help
        except click.UsageError as error:
            pytest.fail(f"{path.name}: `{command}` does not parse: {error.format_message()}")
    assert len(COMMANDS) >= 10  # the README and docs hold many; finding few means the regex broke


PATH = re.compile(r"(?<![\w/.-])((?:docs|examples|charts|tests|bench|operator|sidecar|lockstep|crds|fuzz|hack)"
                  r"/[\w./-]*[\w/])")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_repository_path_named_in_the_docs_exists(doc: Path) -> None:
    missing = []
    for name in sorted(set(PATH.findall(doc.read_text()))):
        candidates = [ROOT / name, doc.parent / name, CHART_DIR / name]
        if re.fullmatch(r"lockstep/v\d+", name):  # the digest formula's name, not a path
            continue
        if "*" not in name and not any(candidate.exists() for candidate in candidates):
            missing.append(name)
    assert missing == [], f"{doc.name} names paths that do not exist"


@pytest.fixture(scope="module")
def rendered_names() -> dict[str, set[str]]:
    """Object names of a render for a release called `demo` and for one called `lockstep`."""
    from helm_python.chart import Chart

    names: dict[str, set[str]] = {}
    with Chart.load(CHART_DIR) as chart:
        for release in ("demo", "lockstep"):
            objects = documents(chart.render(values={"metrics": {"serviceMonitor": {"enabled": True}},
                                                     "dashboard": {"enabled": True}},
                                             name=release, namespace="lockstep-system", is_install=True))
            names[release] = {obj["metadata"]["name"] for obj in objects}
    return names


def test_chart_object_names_in_the_docs_are_the_rendered_ones(rendered_names: dict[str, set[str]]) -> None:
    wrong = []
    for doc in DOCS:
        text = doc.read_text()
        for suffix in re.findall(r"<release>-lockstep(-[a-z-]*[a-z])?(?![…\w])", text):
            if f"demo-lockstep{suffix}" not in rendered_names["demo"]:
                wrong.append(f"{doc.name}: <release>-lockstep{suffix}")
        for kind, name in re.findall(r"\b(deploy|svc|service|secret)/(lockstep-[a-z-]*[a-z])\b", text):
            if name not in rendered_names["lockstep"]:
                wrong.append(f"{doc.name}: {kind}/{name}")
    assert wrong == []


def test_the_python_snippet_of_digest_md_computes_the_test_vectors() -> None:
    [snippet] = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "digest.md").read_text(), re.DOTALL)
    namespace: dict[str, object] = {}
    exec(compile(snippet, "docs/digest.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    vectors = json.loads((ROOT / "tests" / "data" / "digest_vectors.json").read_text())["vectors"]
    from lockstep.core import Interface
    from lockstep.core.digest import digest_interface

    checked = 0
    for vector in vectors:
        for text in vector["inputs"]:
            interface = Interface.from_document(json.loads(text))
            expected = digest_interface(interface)
            components = [namespace["component_digest"](c.kind.value, definition)  # type: ignore[operator]
                          for c, definition in zip(expected.components, _definitions(interface, expected))]
            assert components == [c.digest for c in expected.components], vector["name"]
            assert namespace["aggregate_digest"](components) == expected.digest  # type: ignore[operator]
            checked += 1
    assert checked >= 10


def _definitions(interface: object, digest: object) -> list[object]:
    """Each component's definition, in the order of the digest's components."""
    by_key = {(component.kind, component.name): component.definition for component in interface.components}  # type: ignore[attr-defined]
    return [by_key[(component.kind, component.name)] for component in digest.components]  # type: ignore[attr-defined]


def test_the_report_refusals_table_is_the_code_s() -> None:
    """docs/operator.md's table of the report endpoint's answers names each refusal of
    lockstep.core.refusals with its status (issue 27 item 3: one table, read by code and docs alike)."""
    from lockstep.core.refusals import Refusal

    text = (ROOT / "docs" / "operator.md").read_text()
    section = text[text.index("`POST /v1/reports`"):]
    section = section[:section.index("\n\n", section.index("| check | answer |"))]
    documented: dict[str, set[int]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("|"):
            continue
        statuses = {int(status) for status in re.findall(r"\b([45]\d\d)\b", cells[1])}
        for reason in re.findall(r"`([A-Z][A-Za-z]+)`", cells[2]) or re.findall(r'"reason": "([A-Za-z]+)"', cells[1]):
            documented.setdefault(reason, set()).update(statuses)
    documented.setdefault("NotServing", set()).update({503} if "| 503 + `Retry-After: 1` | |" in section else set())
    for refusal in Refusal:
        if refusal is Refusal.NOT_SERVING:
            continue  # documented as "this replica is syncing or stands by" (not a counted reason)
        assert refusal.reason in documented, f"docs/operator.md does not document {refusal.reason}"
        assert refusal.status in documented[refusal.reason], (refusal.reason, documented[refusal.reason])
    assert set(documented) - {r.reason for r in Refusal} <= {"DefinitionsRequired"}, set(documented)
