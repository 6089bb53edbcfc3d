"""Loading what the CLI's TARGET arguments name: a live MCP endpoint or a file.

Every failure here becomes a :class:`UsageError` with a one-line cause, which
the CLI prints to stderr and maps to exit code 2. The YAML parser, asyncio and the MCP reader are
imported where they are used: ``lockstep hash FILE.json`` starts without them (bench/cli_startup.py).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lockstep.core import DEFAULT_LIMITS, Interface, LockstepError
from lockstep.core.manifest import KIND, Pinned, is_manifest, load_pinned
from lockstep.core.model import loads_strict

if TYPE_CHECKING:
    import yaml

__all__ = [
    "LoadedTarget",
    "UsageError",
    "is_url",
    "load_document",
    "load_pinned_file",
    "load_target",
    "parse_headers",
    "pinned_from",
    "snapshot_from",
]

#: What a server address without its scheme looks like (``127.0.0.1:18080/mcp``, ``weather:8080``).
HOST_PORT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d+(/.*)?$")
#: Interface files hold at most 16 MiB of canonical JSON; their YAML form may be larger.
MAX_FILE_BYTES = 24 * 1024 * 1024


class UsageError(Exception):
    """Unusable input or an unreachable server: exit code 2."""


@dataclass(frozen=True)
class LoadedTarget:
    """An interface read from a server or a file, and the document it came from."""

    interface: Interface
    document: dict[str, Any]
    source: str


def is_url(target: str) -> bool:
    return urlsplit(target).scheme in ("http", "https")


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    """``-H 'Name: value'`` options as a dict; ``-H @file`` reads the value from a file
    (so that tokens stay out of shell history)."""
    headers: dict[str, str] = {}
    for value in values:
        name, separator, content = value.partition(":")
        if not separator or not name.strip():
            raise UsageError(f"header {value!r} is not of the form 'Name: value'")
        content = content.strip()
        if content.startswith("@"):
            try:
                content = Path(content[1:]).read_text().strip()
            except OSError as error:
                raise UsageError(f"cannot read header value file: {error}") from None
        headers[name.strip()] = content
    return headers


def load_document(path: str) -> Any:
    """Parse a JSON or YAML file (``-`` for stdin), refusing what a hostile file could do to the CLI with a
    one-line error: more than MAX_FILE_BYTES (checked before reading it all), YAML aliases (an alias bomb
    multiplies every walk of the data), nesting deeper than the parsers follow, integers of hundreds of
    digits, NaN and Infinity. A UTF-8 byte-order mark is dropped, so a JSON file with one is still JSON."""
    text = _read_text(path)
    if text.lstrip().startswith(("{", "[")):
        try:
            return loads_strict(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: invalid JSON: {error}") from None
        except LockstepError as error:
            raise UsageError(f"{path}: {error}") from None
    return _single_document(_load_yaml(text, path), path)


def _read_text(path: str) -> str:
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            file = Path(path)
            if file.stat().st_size > MAX_FILE_BYTES:
                raise UsageError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
            with file.open("rb") as stream:
                raw = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        hint = ""
        if HOST_PORT.match(path):
            hint = f"; a server needs its URL with the scheme, e.g. http://{path}"
        raise UsageError(f"cannot read {path}: no such file{hint}") from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8-sig")  # drops a byte-order mark
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def _load_yaml(text: str, path: str) -> list[Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a 16 MiB file in seconds, not minutes
    try:
        for node in yaml.compose_all(text, Loader=loader):
            _refuse_aliases(node, path)
        return [document for document in yaml.load_all(text, Loader=loader) if document is not None]
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: invalid YAML: {str(error).splitlines()[0]}") from None
    except RecursionError:
        raise UsageError(f"{path}: nested deeper than the YAML parser can follow") from None
    except ValueError as error:  # e.g. an integer beyond Python's 4,300-digit limit
        raise UsageError(f"{path}: {str(error).splitlines()[0][:200]}") from None


def _refuse_aliases(root: yaml.Node | None, path: str) -> None:
    """A node reached twice is an alias (``*name``): refused, whatever it points to."""
    import yaml

    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise UsageError(f"{path}: YAML aliases (&anchor / *alias) are not accepted "
                             f"(line {node.start_mark.line + 1}); write the value out")
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))


def _single_document(documents: list[Any], path: str) -> Any:
    if len(documents) == 1:
        return documents[0]
    resources = [document for document in documents if is_manifest(document)]
    if len(resources) == 1:
        return resources[0]
    if not resources:
        raise UsageError(f"{path}: holds {len(documents)} YAML documents and no {KIND}")
    names = ", ".join(str((doc.get("metadata") or {}).get("name")) for doc in resources)
    raise UsageError(f"{path}: holds several {KIND} resources ({names}); split the file")


def load_pinned_file(path: str) -> Pinned:
    return pinned_from(load_document(path), path)


def pinned_from(document: Any, source: str) -> Pinned:
    """The revisions a parsed manifest or snapshot pins."""
    try:
        return load_pinned(document)
    except LockstepError as error:
        raise UsageError(f"{source}: {error}") from None


def snapshot_from(document: Any, source: str) -> LoadedTarget:
    """The interface of a parsed snapshot document."""
    try:
        if isinstance(document, Mapping) and "apiVersion" in document:
            load_pinned(document)  # some other Kubernetes or Helm file: say what it is
        return LoadedTarget(Interface.from_document(document, DEFAULT_LIMITS), document, source)
    except LockstepError as error:
        raise UsageError(f"{source}: {error}") from None


def read_live(url: str, *, headers: Mapping[str, str], timeout: float, transport: str | None,
              client_capabilities: Sequence[str] | None = None) -> LoadedTarget:
    """Read a live server; ``client_capabilities`` None announces the reader's default."""
    import asyncio

    from lockstep.reader import DEFAULT_CLIENT_CAPABILITIES, ReaderError, read_interface

    capabilities = DEFAULT_CLIENT_CAPABILITIES if client_capabilities is None else client_capabilities
    try:
        result = asyncio.run(read_interface(url, transport=transport, headers=headers, timeout=timeout,
                                            client_capabilities=capabilities))
    except ReaderError as error:
        message = str(error) if str(error).startswith(url) else f"{url}: {error}"  # say the URL once
        raise UsageError(message + _transport_hint(message, transport)) from None
    except LockstepError as error:
        raise UsageError(f"{url}: invalid interface: {error}") from None
    return LoadedTarget(result.interface, result.document, url)


def _transport_hint(message: str, transport: str | None) -> str:
    """The usual cause of an HTTP 4xx at the first request: the other MCP transport."""
    if not re.search(r"HTTP 40[045]\b", message):
        return ""
    if transport == "sse":
        return " (is it a streamable HTTP endpoint? try without --transport sse)"
    return " (is it a legacy SSE endpoint? try --transport sse, or its /sse URL)"


def load_target(
    target: str, *, headers: Mapping[str, str] | None = None, timeout: float = 10.0, transport: str | None = None,
    client_capabilities: Sequence[str] | None = None,
) -> LoadedTarget:
    """An interface from a URL (read live), a snapshot file, or a manifest: the last of its approved
    revisions that carries definitions."""
    if is_url(target):
        return read_live(target, headers=headers or {}, timeout=timeout, transport=transport,
                         client_capabilities=client_capabilities)
    document = load_document(target)
    if not is_manifest(document):
        return snapshot_from(document, target)
    with_definitions = [revision.interface for revision in pinned_from(document, target).revisions
                        if revision.interface is not None]
    if not with_definitions:
        raise UsageError(f"{target}: the manifest carries no definitions (made with --digests-only?)")
    interface = with_definitions[-1]
    return LoadedTarget(interface, interface.to_document(), target)
