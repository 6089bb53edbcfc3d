"""A YAML file edited in place for a review: comments, key order, quoting and indentation survive.

``lockstep approve -f FILE`` rewrites a manifest kept in Git with this editor
(ruamel.yaml round trip). New values take the review style (multi-line text as
literal blocks, text with hidden characters double-quoted and spelled out as
escapes); approved entries are cut out of the text line by line, so the rest of
the file stays byte for byte; and every rewrite must load back to exactly the
edited documents, or nothing is written.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.cli.output import escape_hidden, has_hidden_characters
from lockstep.cli.targets import UsageError, load_document
from lockstep.core.manifest import KIND

__all__ = ["RoundTripFile", "plain", "review_style"]


@dataclass
class RoundTripFile:
    """A YAML file loaded for a round trip: comments, key order, quoting and indentation survive."""

    path: Path
    text: str
    documents: list[Any]
    yaml: Any
    mapping_indent: int = 2
    dash_offset: int = 0
    sequence_indent: int = 2

    @property
    def indents(self) -> tuple[int, int, int]:
        return (self.mapping_indent, self.sequence_indent, self.dash_offset)

    @classmethod
    def load(cls, path: Path) -> RoundTripFile:
        load_document(str(path))  # the hostile-file guards (size, aliases, depth) before the round-trip parser
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
        return cls.parse(path, text)

    @classmethod
    def parse(cls, path: Path, text: str, indents: tuple[int, int, int] | None = None) -> RoundTripFile:
        """Parse ``text``; ``indents`` (mapping, sequence, dash offset) are guessed from it unless given."""
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError
        from ruamel.yaml.util import load_yaml_guess_indent

        try:
            if indents is None:
                _, sequence_indent, dash_offset = load_yaml_guess_indent(_indent_sample(text))
                mapping_indent = _mapping_indent(text)
            else:
                mapping_indent, sequence_indent, dash_offset = indents
            yaml = YAML()  # round-trip mode
            yaml.preserve_quotes = True
            yaml.width = 4096  # never re-wrap existing lines
            yaml.indent(mapping=mapping_indent, sequence=sequence_indent or mapping_indent, offset=dash_offset or 0)
            yaml.explicit_start = text.lstrip().startswith("---")
            documents = [document for document in yaml.load_all(text)]
        except YAMLError as error:
            raise UsageError(f"{path}: invalid YAML: {str(error).splitlines()[0]}") from None
        return cls(path, text, documents, yaml, mapping_indent, dash_offset or 0,
                   sequence_indent or mapping_indent)

    def without_entries(self, manifest: Any, digests: set[str]) -> RoundTripFile:
        """This file with the approved entries of ``digests`` cut out of the text, each with the comment
        lines right above it (which describe it), everything else byte for byte."""
        approved = manifest["spec"]["approved"]
        spans = _entry_spans(self.text.splitlines(keepends=True), approved)
        if spans is None:  # flow style or otherwise unusual layout: let ruamel delete the nodes
            for index in reversed(range(len(approved))):
                if approved[index].get("digest") in digests:
                    del approved[index]
            return RoundTripFile.parse(self.path, self.dump(), self.indents)
        lines = self.text.splitlines(keepends=True)
        for index in reversed(range(len(approved))):
            if approved[index].get("digest") in digests:
                start, end = spans[index]
                del lines[start:end]
        return RoundTripFile.parse(self.path, "".join(lines), self.indents)

    def dash_column(self, sequence: Any) -> int:
        """The column of the dashes of a block sequence (for comments above its items)."""
        if len(sequence) and hasattr(sequence, "lc") and sequence.lc.data:
            line = self.text.splitlines()[sequence.lc.item(0)[0]]
            if line.lstrip().startswith("-"):
                return len(line) - len(line.lstrip())
        return self.mapping_indent + self.dash_offset

    def find(self, name: str, namespace: str) -> Any:
        """The one MCPServerInterface document of the file with this name (and namespace, if it has one)."""
        candidates = [document for document in self.documents
                      if isinstance(document, Mapping) and document.get("kind") == KIND]
        if not candidates:
            raise UsageError(f"{self.path}: holds no {KIND}")
        for document in candidates:
            metadata = document.get("metadata") or {}
            if metadata.get("name") == name and metadata.get("namespace") in (None, "", namespace):
                return document
        names = ", ".join(str((document.get("metadata") or {}).get("name")) for document in candidates)
        raise UsageError(f"{self.path}: holds {KIND} {names}, not {name}; pass the manifest of {name}")

    def dump(self) -> str:
        stream = io.StringIO()
        if len(self.documents) == 1:
            self.yaml.dump(self.documents[0], stream)
        else:
            self.yaml.dump_all(self.documents, stream)
        text = stream.getvalue()
        if not has_hidden_characters(self.text):  # else escaping could change the data of those characters
            text = escape_hidden(text, json_style=False)  # only ever inside double quotes (review_style)
        self._check_round_trip(text)
        return text

    def _check_round_trip(self, text: str) -> None:
        """The rewritten text must load back to exactly the edited documents."""
        import yaml

        try:
            reloaded = [document for document in yaml.safe_load_all(text)]
        except yaml.YAMLError:
            reloaded = None
        if reloaded != [plain(document) for document in self.documents]:
            raise UsageError(f"{self.path}: cannot rewrite it without changing its data; "
                             "edit it by hand from the output of lockstep approve without -f")


def _entry_spans(lines: list[str], sequence: Any) -> list[tuple[int, int]] | None:
    """For each item of a block sequence, the range of text lines it takes: from the comment lines right
    above its dash to the line before the next item (or the end of the sequence). None if not block style."""
    starts = [sequence.lc.item(index)[0] for index in range(len(sequence))]
    if len(set(starts)) != len(starts) or not all(lines[line].lstrip().startswith("-") for line in starts):
        return None
    column = len(lines[starts[0]]) - len(lines[starts[0]].lstrip())
    begins = []
    for start in starts:
        begin = start
        while begin > 0 and lines[begin - 1].lstrip().startswith("#") \
                and len(lines[begin - 1]) - len(lines[begin - 1].lstrip()) <= column:  # deeper: the item above's
            begin -= 1
        begins.append(begin)
    end = starts[-1] + 1
    while end < len(lines) and (not lines[end].strip()
                                or len(lines[end]) - len(lines[end].lstrip()) > column):
        end += 1
    while end > starts[-1] + 1 and not lines[end - 1].strip():  # trailing blank lines stay
        end -= 1
    return [(begins[index], begins[index + 1] if index + 1 < len(starts) else end)
            for index in range(len(starts))]


def _indent_sample(text: str) -> str:
    """The document to guess the indentation from (ruamel's guess reads one document only)."""
    chunks = re.split(r"(?m)^---[ \t]*$", text)
    return next((chunk for chunk in chunks if "MCPServerInterface" in chunk), chunks[-1])


def _mapping_indent(text: str) -> int:
    """The indentation of nested mappings: the smallest indent of a key line (ruamel guesses only sequences)."""
    indents = [len(line) - len(line.lstrip(" ")) for line in text.splitlines()
               if line.strip() and not line.lstrip().startswith(("-", "#")) and re.match(r"\s*[^\s:]+:", line)]
    return min((indent for indent in indents if indent > 0), default=2)


def review_style(value: Any) -> Any:
    """New values in the document's node types: multi-line text as literal blocks, and text with invisible
    characters double-quoted so that :func:`dump` can spell those characters out as escapes."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

    if isinstance(value, dict):
        mapping = CommentedMap()
        for key, item in value.items():
            mapping[DoubleQuotedScalarString(key) if has_hidden_characters(key) else key] = review_style(item)
        return mapping
    if isinstance(value, list):
        return CommentedSeq([review_style(item) for item in value])
    if isinstance(value, str):
        if has_hidden_characters(value):
            return DoubleQuotedScalarString(value)
        if "\n" in value and not re.search(r"[ \t]\n|[ \t]$|^\s", value):
            return LiteralScalarString(value)
    return value


def plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value
