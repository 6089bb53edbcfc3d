"""Severity rules: how risky one change of an MCP interface looks to a reviewer.

Every unapproved change is drift; severity only ranks it for review and
alerting (docs/severity.md explains the rules, with examples). This module
holds the rules that need the definitions:

* :func:`text_signals` finds what makes text dangerous for a model to read:
  invisible or bidirectional Unicode, Unicode tag characters, look-alike
  characters, markup, instruction-like phrases (:data:`INSTRUCTION_PHRASES`,
  the one list of them) and URLs. :func:`gained_signals` keeps those that a
  new definition has and the old one has not.
* :func:`schema_widenings` names the ways a new JSON Schema accepts more than
  the old one (new properties, fewer required, looser bounds, ...).
* :func:`annotation_risks` names the tool annotation flips that matter
  (read-only lost, destructive gained, open world gained).
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from lockstep.core.canonical import canonical_json
from lockstep.core.model import escape_pointer_token

__all__ = [
    "INSTRUCTION_PHRASES",
    "Phrase",
    "Severity",
    "TextSignal",
    "annotation_risks",
    "gain_reasons",
    "gained_signals",
    "hidden_characters",
    "json_equal",
    "schema_widenings",
    "text_signals",
    "visible",
]


class Severity(str, enum.Enum):
    """How risky a finding looks. Compare with ``<``/``>=`` (by :attr:`rank`), never as strings."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank

    __hash__ = str.__hash__


_RANKS = {Severity.LOW: 0, Severity.MEDIUM: 1, Severity.HIGH: 2}


# --------------------------------------------------------------------------- text signals

class SignalCategory(str, enum.Enum):
    INVISIBLE = "invisible"
    BIDI = "bidi"
    TAG = "tag"
    CONFUSABLE = "confusable"
    MARKUP = "markup"
    INSTRUCTION = "instruction"
    URL = "url"


@dataclass(frozen=True, order=True)
class TextSignal:
    """One risky thing found in text: a category and what was found."""

    category: SignalCategory
    token: str

    @property
    def noun(self) -> str:
        """What kind of thing was gained, as it reads after "gains"."""
        return _NOUNS[self.category]

    @property
    def detail(self) -> str:
        """Which one, printable (hidden characters spelled out)."""
        if self.category in (SignalCategory.TAG, SignalCategory.INSTRUCTION):
            return _quote(self.token)
        if self.category is SignalCategory.CONFUSABLE:
            return f"{_quote(visible(self.token))} ({_lookalike_names(self.token)})"
        return visible(self.token)

    def describe(self) -> str:
        return f"{self.noun} {self.detail}"


_NOUNS = {
    SignalCategory.INVISIBLE: "invisible Unicode",
    SignalCategory.BIDI: "bidirectional control",
    SignalCategory.TAG: "Unicode tag characters hiding",
    SignalCategory.CONFUSABLE: "look-alike characters in",
    SignalCategory.MARKUP: "markup",
    SignalCategory.INSTRUCTION: "instruction-like text",
    SignalCategory.URL: "URL",
}


#: Instruction-like text aimed at the model, as (label, pattern). Patterns match
#: lower-cased, NFKC-normalised text with hidden characters removed and runs of
#: whitespace collapsed, so "Ig\u200bnore  PREVIOUS instructions" still matches.
@dataclass(frozen=True)
class Phrase:
    """An instruction-like phrase: its label, the words one of which it must contain, its pattern."""

    label: str
    anchors: tuple[str, ...]  # a cheap substring test before the regular expression
    pattern: str


INSTRUCTION_PHRASES: tuple[Phrase, ...] = (
    Phrase("ignore previous instructions", ("ignore", "disregard", "forget", "override", "bypass"),
           r"\b(ignore|disregard|forget|override|bypass)\b[^.]{0,30}?\b(previous|prior|above|earlier|"
           r"preceding|all|any|other|system|safety)\b[^.]{0,20}?\b(instructions?|prompts?|rules|directions|"
           r"guidelines|messages|context)\b"),
    Phrase("you must", ("you ",), r"\byou (must|have to|are required to|shall)\b"),
    Phrase("do not tell the user", ("not", "don't", "never"),
           r"\b(do not|don't|never|must not)\s+(tell|inform|notify|alert|mention|reveal|show|disclose|say)\b"
           r"[^.]{0,40}?\b(user|human|anyone|them)\b"),
    Phrase("without telling the user", ("without",),
           r"\bwithout\s+(telling|informing|asking|notifying|alerting|showing)\b[^.]{0,20}?\b(user|human)\b"),
    Phrase("do not mention", ("mention",), r"\b(do not|don't|never)\s+mention\b"),
    Phrase("keep it secret", ("keep", "treat"),
           r"\b(keep|treat) (this|it|these) (secret|hidden|confidential|private)\b"),
    Phrase("before using this tool", ("before",),
           r"\bbefore (using|calling|invoking|running|executing) (this|the|any) (tool|function)\b"),
    Phrase("read a secret file",
           (".ssh", "id_rsa", "id_ed25519", ".aws/", ".cursor", "mcp.json", "/etc/", ".netrc", ".npmrc", ".pgpass",
            ".kube/", "private key"),
           r"(~/\.ssh|\bid_rsa\b|\bid_ed25519\b|\.aws/credentials|~/\.cursor|\bmcp\.json\b|/etc/passwd|"
           r"/etc/shadow|\.netrc\b|\.npmrc\b|\.pgpass\b|\.kube/config\b|\bprivate key\b)"),
    Phrase("pass the contents", ("content",),
           r"\b(pass|send|include|append|upload|forward)\b[^.]{0,20}?\b(its|the|their|file's|whole)\s+"
           r"(content|contents)\b"),
    Phrase("role marker", ("im_start", "im_end", "inst]", "system]", "<<sys>>", "system", "assistant", "human"),
           r"(<\|im_start\|>|<\|im_end\|>|\[/?inst\]|\[/?system\]|<<sys>>|(^|\n)\s*(system|assistant|human)\s*:)"),
    Phrase("system prompt", ("system prompt", "developer mode", "instructions"),
           r"\b(system prompt|developer mode|new instructions|hidden instructions|secret instructions)\b"),
    Phrase("act as", ("act as", "pretend", "you are now"), r"\b(act as|pretend (to be|you are)|you are now)\b"),
    Phrase("shadow other tools", ("this tool is", "instead of", "all other tools"),
           r"(\bwhen this tool is (available|present|enabled|loaded)\b|\binstead of (using|calling) (the |any )?"
           r"[\w.-]+ tool\b|\ball other tools\b)"),
)
_PHRASE_PATTERNS = tuple((phrase, re.compile(phrase.pattern)) for phrase in INSTRUCTION_PHRASES)

_BIDI_CONTROLS = frozenset(
    [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]
)
# Invisible characters that are not in category Cf (format), which is caught whole.
_INVISIBLE_EXTRA = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2028, 0x2029, 0x2800,
     0x3164, 0xFFA0]
)
_EMOJI_VARIATION = frozenset([0xFE0E, 0xFE0F])
_ZWJ = 0x200D
_ALLOWED_CONTROLS = frozenset("\t\n\r")

# Letters of other scripts that look like Latin letters, with the letter they imitate.
_LOOKALIKES: dict[str, str] = {
    # Cyrillic
    "а": "a", "в": "B", "е": "e", "к": "k", "м": "M", "н": "H", "о": "o", "р": "p", "с": "c", "т": "T",
    "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l",
    "ё": "e", "ї": "i", "ɡ": "g",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "У": "Y", "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "Ԛ": "Q", "Ԝ": "W", "Һ": "h", "Ӏ": "I",
    # Greek
    "α": "a", "ο": "o", "ν": "v", "ρ": "p", "τ": "t", "υ": "u", "ι": "i", "κ": "k", "ϲ": "c", "ϳ": "j",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Armenian and others often used in spoofing
    "օ": "o", "ս": "u", "ո": "n", "հ": "h", "ց": "g", "ɑ": "a", "ı": "i",
}

_WORD = re.compile(r"[^\W\d_]+")
_TAG_MARKUP = re.compile(r"<\s*/?\s*([A-Za-z][A-Za-z0-9_:-]{0,40})(\s[^<>]{0,300})?/?\s*>")
_HTML_COMMENT = re.compile(r"<!--")
_KNOWN_TAGS = frozenset({
    "important", "system", "instructions", "instruction", "assistant", "user", "human", "admin", "secret",
    "hidden", "context", "prompt", "tool", "tools", "thinking", "note", "a", "img", "iframe", "script", "style",
    "div", "span", "p", "br", "b", "i", "u", "em", "strong", "details", "summary", "svg", "object", "embed",
    "form", "input", "meta", "link", "html", "body", "head", "code", "pre",
})
_MARKDOWN_LINK = re.compile(r"(!?)\[[^\]\n]{0,300}\]\(\s*([^)\s]{1,500})[^)]{0,300}\)")
_URL = re.compile(r"\b(?:[a-z][a-z0-9+.-]{1,15}://|www\.)[^\s<>\"'`)\]]+", re.IGNORECASE)
_SCHEME_URL = re.compile(r"\b(?:javascript|data|vbscript):[^\s<>\"'`)\]}]{2,}", re.IGNORECASE)
_URL_TRAILER = ".,;:!?"


def _quote(text: str, limit: int = 60) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return "'" + text + "'"


_UNUSUAL = re.compile(r"[^\x20-\x7e\t\n\r]")


def hidden_characters(text: str) -> Iterator[tuple[int, SignalCategory]]:
    """Yield (index, category) of every invisible, bidirectional or tag character in ``text``.

    Emoji presentation selectors after a symbol and a zero-width joiner between
    two symbols (emoji sequences such as a family emoji) are legitimate and skipped.
    """
    for match in _UNUSUAL.finditer(text):  # printable ASCII is never hidden: skip it fast
        index = match.start()
        code = ord(match.group())
        if 0xE0000 <= code <= 0xE007F:
            yield index, SignalCategory.TAG
        elif code in _BIDI_CONTROLS:
            yield index, SignalCategory.BIDI
        elif _is_invisible(text, index, code):
            yield index, SignalCategory.INVISIBLE


def _is_invisible(text: str, index: int, code: int) -> bool:
    char = text[index]
    previous = text[index - 1] if index else ""
    following = text[index + 1] if index + 1 < len(text) else ""
    if code in _EMOJI_VARIATION:
        return not previous or unicodedata.category(previous) not in ("So", "Sk", "Sm", "Nd")
    if code == _ZWJ:
        return not (previous and following and _is_emoji_part(previous) and _is_emoji_part(following))
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or code in _INVISIBLE_EXTRA:
        return True
    category = unicodedata.category(char)
    if category == "Cc":
        return char not in _ALLOWED_CONTROLS
    return category in ("Cf", "Co", "Cn")


def _is_emoji_part(char: str) -> bool:
    return unicodedata.category(char) == "So" or ord(char) in _EMOJI_VARIATION


def visible(text: str, *, lookalikes: bool = False) -> str:
    """``text`` safe to print for review: every hidden character spelled out as ``<U+XXXX>``,
    a run of tag characters as ``<TAG 'decoded text'>``, and with ``lookalikes`` also the
    look-alike letters (for names, which a reviewer compares character by character)."""
    hidden = dict(hidden_characters(text))
    if not hidden and not (lookalikes and any(_is_lookalike(char) for char in text)):
        return text
    parts: list[str] = []
    tags: list[str] = []
    for index, char in enumerate(text):
        if hidden.get(index) is SignalCategory.TAG:
            code = ord(char)
            tags.append(chr(code - 0xE0000) if 0xE0020 <= code <= 0xE007E else "")
            continue
        if tags:
            parts.append(f"<TAG {_quote(''.join(tags), 200)}>")
            tags = []
        if index in hidden or (lookalikes and _is_lookalike(char)):
            parts.append(f"<U+{ord(char):04X}>")
        else:
            parts.append(char)
    if tags:
        parts.append(f"<TAG {_quote(''.join(tags), 200)}>")
    return "".join(parts)


def _lookalike_names(word: str) -> str:
    names = []
    for char in dict.fromkeys(word):
        if _is_lookalike(char):
            names.append(f"U+{ord(char):04X} {unicodedata.name(char, '?')}")
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


def _is_lookalike(char: str) -> bool:
    if char in _LOOKALIKES:
        return True
    if char.isascii() or not char.isalpha():
        return False
    folded = unicodedata.normalize("NFKC", char)
    return folded.isascii() and folded.isalpha()


def _confusable_words(text: str) -> Iterator[str]:
    for match in _WORD.finditer(text):
        word = match.group()
        if word.isascii():
            continue
        lookalikes = [char for char in word if _is_lookalike(char)]
        if not lookalikes:
            continue
        has_ascii_letter = any(char.isascii() for char in word)
        compatibility_form = any(char not in _LOOKALIKES for char in lookalikes)
        if has_ascii_letter or compatibility_form:
            yield word


def _tag_payloads(text: str) -> Iterator[str]:
    payload: list[str] = []
    for char in text + "\x00":
        code = ord(char)
        if 0xE0000 <= code <= 0xE007F:
            payload.append(chr(code - 0xE0000) if 0xE0020 <= code <= 0xE007E else "")
        elif payload:
            yield "".join(payload) or "<empty>"
            payload = []


def _normalise_for_phrases(text: str, hidden: set[int]) -> str:
    if text.isascii() and not hidden:
        folded = text.lower()
    else:
        kept = "".join(char for index, char in enumerate(text) if index not in hidden)
        folded = unicodedata.normalize("NFKC", kept).lower()
        folded = "".join(_LOOKALIKES.get(char, char).lower() for char in folded)
        folded = folded.replace("\u2019", "'")
    return re.sub(r"[ \t\f\v]+", " ", folded)


_CACHED_LENGTH = 4096


@functools.lru_cache(maxsize=4096)
def _cached_signals(text: str) -> tuple[tuple[TextSignal, int], ...]:
    return tuple(text_signals(text).items())


def _signals_of(text: str) -> Iterable[tuple[TextSignal, int]]:
    """``text_signals`` with short texts cached: interfaces repeat parameter descriptions a lot."""
    return _cached_signals(text) if len(text) <= _CACHED_LENGTH else text_signals(text).items()


def text_signals(text: str) -> dict[TextSignal, int]:
    """Every risky signal in ``text`` with its count.

    Hidden characters count per code point, so one more zero-width space is a
    gain; markup, phrases and URLs count once, so repeating a link is not.
    """
    signals: dict[TextSignal, int] = {}

    def add(signal: TextSignal, count: int = 1) -> None:
        signals[signal] = signals.get(signal, 0) + count

    hidden = dict(hidden_characters(text))
    for index, category in hidden.items():
        if category is not SignalCategory.TAG:
            add(TextSignal(category, f"U+{ord(text[index]):04X}"))
    if SignalCategory.TAG in hidden.values():
        for payload in _tag_payloads(text):
            add(TextSignal(SignalCategory.TAG, payload))
    if not text.isascii():
        for word in _confusable_words(text):
            add(TextSignal(SignalCategory.CONFUSABLE, word))
    for signal in _once_signals(text, set(hidden)):
        signals[signal] = 1
    return signals


def _markup_tags(text: str) -> Iterator[str]:
    """Tag names that are markup, not a placeholder such as ``<revision>:<path>``.

    A tag counts when it is closed somewhere (``<x>...</x>``), self-closing, carries
    attributes, is itself a closing tag, or is a known HTML or prompt-structure tag.
    """
    closed = {match.group(1).lower() for match in _TAG_MARKUP.finditer(text) if match.group().startswith("</")}
    for match in _TAG_MARKUP.finditer(text):
        name = match.group(1).lower()
        whole = match.group()
        if (name in closed or name in _KNOWN_TAGS or whole.startswith("</") or whole.rstrip().endswith("/>")
                or "=" in (match.group(2) or "")):
            yield name


def _once_signals(text: str, hidden: set[int]) -> Iterator[TextSignal]:
    for name in _markup_tags(text):
        yield TextSignal(SignalCategory.MARKUP, f"<{name}>")
    if _HTML_COMMENT.search(text):
        yield TextSignal(SignalCategory.MARKUP, "<!-- comment -->")
    # Substring tests first: the regular expressions cost tens of microseconds per kilobyte.
    if "](" in text:
        for match in _MARKDOWN_LINK.finditer(text):
            what = "markdown image" if match.group(1) else "markdown link"
            yield TextSignal(SignalCategory.MARKUP, f"{what} to {match.group(2)}")
    lowered = text.lower()
    if "://" in text or "www." in lowered:
        for match in _URL.finditer(text):
            yield TextSignal(SignalCategory.URL, match.group().rstrip(_URL_TRAILER))
    if "script:" in lowered or "data:" in lowered:
        for match in _SCHEME_URL.finditer(text):
            yield TextSignal(SignalCategory.URL, match.group().rstrip(_URL_TRAILER))
    normalised = _normalise_for_phrases(text, hidden)
    for phrase, pattern in _PHRASE_PATTERNS:
        if any(anchor in normalised for anchor in phrase.anchors) and pattern.search(normalised):
            yield TextSignal(SignalCategory.INSTRUCTION, phrase.label)


# Subtrees and fields that are not text for the model: icons are cosmetic, _meta
# is for clients, "$"-keywords of JSON Schema are URIs, a resource's uri is its key.
_UNSCANNED_FIELDS = frozenset({"icons", "_meta", "mimeType", "uri", "uriTemplate"})


Path = tuple[str | int, ...]


def scanned_strings(definition: Any) -> Iterator[tuple[Path, str]]:
    """Yield (path, text) for every string a model may read in a component definition.

    Object keys are yielded too (a property name is text the model reads). A path
    is the tuple of keys and indexes; :func:`pointer` makes it a JSON pointer.
    """
    if isinstance(definition, str):
        yield (), definition
        return
    stack: list[tuple[Any, Path]] = [(definition, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, dict):
            for key, child in value.items():
                if not path and key in _UNSCANNED_FIELDS:
                    continue
                if key.startswith("$"):  # $schema, $id, $ref are URIs; $defs holds schemas to scan
                    if not isinstance(child, str):
                        stack.append((child, (*path, key)))
                    continue
                yield (*path, key), key
                stack.append((child, (*path, key)))
        elif isinstance(value, list):
            stack.extend((child, (*path, index)) for index, child in enumerate(value))


def pointer(path: Path) -> str:
    return "".join(f"/{escape_pointer_token(token) if isinstance(token, str) else token}" for token in path)


@dataclass(frozen=True)
class GainedSignal:
    """A signal the new definition has and the old one has not, and where it appears."""

    signal: TextSignal
    pointer: str

    def reason(self, label: str) -> str:
        return f"{label} gains {self.signal.describe()}"


def gain_reasons(gains: Sequence[GainedSignal], label: Callable[[str], str]) -> list[str]:
    """One reason per place and kind of signal: "description gains invisible Unicode U+200B, U+2060"."""
    grouped: dict[tuple[str, SignalCategory], list[str]] = {}
    for gain in gains:
        grouped.setdefault((gain.pointer, gain.signal.category), []).append(gain.signal.detail)
    reasons = [f"{label(pointer)} gains {_NOUNS[category]} {_listing(details)}"
               for (pointer, category), details in grouped.items()]
    if len(reasons) > _MAX_GAIN_REASONS:
        more = len(reasons) - _MAX_GAIN_REASONS
        reasons = [*reasons[:_MAX_GAIN_REASONS], f"and {more} more places gain risky text"]
    return reasons


_MAX_GAIN_REASONS = 10


def _definition_signals(definition: Any, memo: dict[str, dict[TextSignal, int]]
                        ) -> tuple[dict[TextSignal, int], dict[TextSignal, str]]:
    counts: dict[TextSignal, int] = {}
    where: dict[TextSignal, str] = {}
    if definition is None:
        return counts, where
    for path, text in scanned_strings(definition):
        if text not in memo:
            memo[text] = dict(_signals_of(text))
        for signal, count in memo[text].items():
            counts[signal] = counts.get(signal, 0) + count
            if signal not in where:
                where[signal] = pointer(path)
    return counts, where


def gained_signals(old: Any, new: Any) -> list[GainedSignal]:
    """Signals present in the new definition and not in the old one (``None``: no old one).

    Hidden and look-alike characters are compared by count, the rest by presence.
    """
    memo: dict[str, dict[TextSignal, int]] = {}  # most strings are the same on both sides
    old_counts, _ = _definition_signals(old, memo)
    new_counts, where = _definition_signals(new, memo)
    gained = []
    for signal, count in new_counts.items():
        counted = signal.category in (SignalCategory.INVISIBLE, SignalCategory.BIDI, SignalCategory.CONFUSABLE)
        if (count > old_counts.get(signal, 0)) if counted else signal not in old_counts:
            gained.append(GainedSignal(signal, where[signal]))
    return sorted(gained, key=lambda item: (item.pointer, item.signal))


# --------------------------------------------------------------------------- annotations

def annotation_risks(old: Any, new: Any) -> list[str]:
    """Reasons why a tool's new annotations are riskier than the old ones (MCP defaults applied).

    Defaults from the MCP specification: readOnlyHint false, destructiveHint true
    (meaningful only when not read-only), openWorldHint true.
    """
    old_hints = old if isinstance(old, Mapping) else {}
    new_hints = new if isinstance(new, Mapping) else {}
    reasons = []
    was_read_only = old_hints.get("readOnlyHint") is True
    is_read_only = new_hints.get("readOnlyHint") is True
    if was_read_only and not is_read_only:
        reasons.append(f"stops being read-only (readOnlyHint: true -> {_hint(new_hints, 'readOnlyHint')})")
    if _destructive(new_hints) and not _destructive(old_hints):
        source = "destructiveHint absent defaults to true" if "destructiveHint" not in new_hints else (
            f"destructiveHint: {_hint(old_hints, 'destructiveHint')} -> true")
        reasons.append(f"becomes destructive ({source})")
    if _open_world(new_hints) and not _open_world(old_hints):
        reasons.append(f"becomes open-world (openWorldHint: false -> {_hint(new_hints, 'openWorldHint')})")
    return reasons


def _destructive(hints: Mapping[str, Any]) -> bool:
    if hints.get("readOnlyHint") is True:
        return False
    return hints.get("destructiveHint", True) is True


def _open_world(hints: Mapping[str, Any]) -> bool:
    return hints.get("openWorldHint", True) is True


def _hint(hints: Mapping[str, Any], name: str) -> str:
    return "absent" if name not in hints else _json_scalar(hints[name])


def _json_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)


# --------------------------------------------------------------------------- schemas

# Keywords that describe a value without constraining it.
_ANNOTATION_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment",
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "contentMediaType", "contentSchema",
    "example", "x-order",
})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"})
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"})
_NUMERIC_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
_DEFINITION_MAPS = frozenset({"$defs", "definitions"})
_SCHEMA_SINGLES = frozenset({"items", "additionalItems", "contains", "propertyNames", "unevaluatedItems",
                             "unevaluatedProperties"})
_OPEN_WHEN_ABSENT = frozenset({"additionalProperties", "additionalItems", "unevaluatedItems",
                               "unevaluatedProperties"})
_HANDLED = (_UPPER_BOUNDS | _LOWER_BOUNDS | _SCHEMA_MAPS | _DEFINITION_MAPS | _SCHEMA_SINGLES | _OPEN_WHEN_ABSENT
            | {"type", "enum", "const", "required", "prefixItems", "anyOf", "oneOf", "allOf", "uniqueItems",
               "nullable"})


def schema_widenings(old: Any, new: Any, pointer: str = "") -> list[str]:
    """Ways in which schema ``new`` accepts values that schema ``old`` refused, as short reasons.

    Conservative: a changed constraint whose effect cannot be decided here (a new
    pattern, a changed $ref) counts as a widening.
    """
    if json_equal(old, new):
        return []
    old, new = _as_schema(old), _as_schema(new)
    where = pointer or "/"
    if old is False:
        return [f"{where} was false (refused every value) and now accepts values"]
    if new is True:
        return [f"{where} now accepts anything"]
    if old is True or new is False:
        return []
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [f"{where} changed shape"]
    reasons: list[str] = []
    reasons += _type_widenings(old, new, where)
    reasons += _value_set_widenings(old, new, where)
    reasons += _required_widenings(old, new, where)
    reasons += _bound_widenings(old, new, where)
    reasons += _subschema_widenings(old, new, pointer)
    reasons += _other_constraint_widenings(old, new, where)
    return reasons


def _as_schema(schema: Any) -> Any:
    """Booleans stand for themselves; an empty object accepts anything, like ``true``."""
    if isinstance(schema, dict) and not any(key not in _ANNOTATION_KEYWORDS for key in schema):
        return True
    return schema


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    types = {kind} if isinstance(kind, str) else {str(item) for item in kind} if isinstance(kind, list) else set()
    if schema.get("nullable") is True:
        types.add("null")
    return types


def _type_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    old_types, new_types = _types(old), _types(new)
    if old_types is None:
        return []
    if new_types is None:
        return [f"{where}/type constraint removed (was {_type_text(old_types)})"]
    added = {kind for kind in new_types - old_types if not (kind == "integer" and "number" in old_types)}
    if added:
        return [f"{where}/type widened from {_type_text(old_types)} to {_type_text(new_types)}"]
    return []


def _type_text(types: set[str]) -> str:
    return "|".join(sorted(types))


def _value_set_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    if isinstance(old.get("enum"), list):
        if not isinstance(new.get("enum"), list):
            reasons.append(f"{where}/enum removed")
        else:
            known = {canonical_json(value) for value in old["enum"]}  # a set: enums can be long
            extra = [value for value in new["enum"] if canonical_json(value) not in known]
            if extra:
                reasons.append(f"{where}/enum extended with {_listing([_json_scalar(value) for value in extra])}")
    if "const" in old and ("const" not in new or not json_equal(old["const"], new["const"])):
        reasons.append(f"{where}/const {'removed' if 'const' not in new else 'changed'}")
    return reasons


def _required_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    old_required = _list_of(old, "required")
    new_required = {canonical_json(name) for name in _list_of(new, "required")}
    dropped = [name for name in old_required if canonical_json(name) not in new_required]
    return [f"{where}/required no longer requires {_listing([str(name) for name in dropped])}"] if dropped else []


def _listing(items: list[str], shown: int = 5) -> str:
    """A short list for a reason: "a, b, c, d, e and 12 more"."""
    listed = ", ".join(items[:shown])
    return listed + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _list_of(schema: dict[str, Any], keyword: str) -> list[Any]:
    value = schema.get(keyword)
    return value if isinstance(value, list) else []


def _dict_of(schema: dict[str, Any], keyword: str) -> dict[str, Any]:
    value = schema.get(keyword)
    return value if isinstance(value, dict) else {}


Bound = tuple[float, bool]  # (value, exclusive)


def _numeric_bound(schema: dict[str, Any], upper: bool) -> Bound | None:
    """The effective bound of a number: ``exclusiveMaximum: 10`` on an integer is ``maximum: 9``.

    Reads both the 2019+ form (exclusiveMaximum is a number) and the draft-4 form
    (exclusiveMaximum is a boolean modifier of maximum).
    """
    inclusive_key, exclusive_key = ("maximum", "exclusiveMaximum") if upper else ("minimum", "exclusiveMinimum")
    inclusive, exclusive = schema.get(inclusive_key), schema.get(exclusive_key)
    candidates: list[Bound] = []
    if _is_number(inclusive):
        candidates.append((inclusive, exclusive is True))
    if _is_number(exclusive):
        candidates.append((exclusive, True))
    if not candidates:
        return None
    if _types(schema) == {"integer"}:
        step = -1 if upper else 1
        candidates = [(value + step, False) if is_exclusive and float(value).is_integer() else (value, is_exclusive)
                      for value, is_exclusive in candidates]
    # The tightest: lowest upper bound (exclusive first on a tie), highest lower bound.
    if upper:
        return min(candidates, key=lambda bound: (bound[0], not bound[1]))
    return max(candidates, key=lambda bound: (bound[0], bound[1]))


def _numeric_bound_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    for upper, name in ((True, "maximum"), (False, "minimum")):
        before, after = _numeric_bound(old, upper), _numeric_bound(new, upper)
        if before is None:
            continue
        if after is None:
            reasons.append(f"{where}/{name} removed (was {_bound_text(before, upper)})")
            continue
        looser = after[0] > before[0] if upper else after[0] < before[0]
        if looser or (after[0] == before[0] and before[1] and not after[1]):
            reasons.append(f"{where}/{name} loosened: {_bound_text(before, upper)} -> {_bound_text(after, upper)}")
    return reasons


def _bound_text(bound: Bound, upper: bool) -> str:
    operator = ("<" if bound[1] else "<=") if upper else (">" if bound[1] else ">=")
    return f"{operator} {_json_scalar(bound[0])}"


def _bound_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = _numeric_bound_widenings(old, new, where)
    for keyword in sorted(((_UPPER_BOUNDS | _LOWER_BOUNDS) - _NUMERIC_BOUNDS) & old.keys()):
        before, after = old[keyword], new.get(keyword)
        if keyword not in new:
            reasons.append(f"{where}/{keyword} removed (was {_json_scalar(before)})")
        elif _is_number(before) and _is_number(after):
            looser = after > before if keyword in _UPPER_BOUNDS else after < before
            if looser:
                reasons.append(f"{where}/{keyword} loosened: {_json_scalar(before)} -> {_json_scalar(after)}")
        elif not json_equal(before, after):
            reasons.append(f"{where}/{keyword} changed")
    if old.get("uniqueItems") is True and new.get("uniqueItems") is not True:
        reasons.append(f"{where}/uniqueItems dropped")
    return reasons


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _subschema_widenings(old: dict[str, Any], new: dict[str, Any], pointer: str) -> list[str]:
    reasons: list[str] = []
    for keyword in sorted(_SCHEMA_MAPS | _DEFINITION_MAPS):
        old_map, new_map = _dict_of(old, keyword), _dict_of(new, keyword)
        for name, schema in new_map.items():
            child = f"{pointer}/{keyword}/{escape_pointer_token(name)}"
            if name in old_map:
                reasons += schema_widenings(old_map[name], schema, child)
            elif keyword in ("properties", "patternProperties"):
                reasons.append(f"{child} added (accepts a new {'property' if keyword == 'properties' else 'pattern'})")
    for keyword in sorted(_SCHEMA_SINGLES | _OPEN_WHEN_ABSENT):
        if keyword in old and not isinstance(old[keyword], list):
            if keyword not in new and keyword in _OPEN_WHEN_ABSENT:
                reasons.append(f"{pointer}/{keyword} removed (was {_compact(old[keyword])}, now open)")
            elif keyword not in new:
                reasons.append(f"{pointer}/{keyword} removed")
            elif not isinstance(new[keyword], list):
                reasons += schema_widenings(old[keyword], new[keyword], f"{pointer}/{keyword}")
    reasons += _list_widenings(old, new, pointer)
    return reasons


def _list_widenings(old: dict[str, Any], new: dict[str, Any], pointer: str) -> list[str]:
    reasons: list[str] = []
    for keyword in ("prefixItems", "allOf", "anyOf", "oneOf", "items"):
        old_list, new_list = old.get(keyword), new.get(keyword)
        if not isinstance(old_list, list):
            continue
        if not isinstance(new_list, list):
            if keyword not in new:
                reasons.append(f"{pointer}/{keyword} removed")
            continue
        if keyword in ("anyOf", "oneOf") and len(new_list) > len(old_list):
            reasons.append(f"{pointer}/{keyword} gains {len(new_list) - len(old_list)} alternative(s)")
        if keyword in ("allOf", "prefixItems", "items") and len(new_list) < len(old_list):
            reasons.append(f"{pointer}/{keyword} drops {len(old_list) - len(new_list)} schema(s)")
        for index, (before, after) in enumerate(zip(old_list, new_list)):
            reasons += schema_widenings(before, after, f"{pointer}/{keyword}/{index}")
    return reasons


def _other_constraint_widenings(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    reasons = []
    for keyword in sorted(old.keys() - _ANNOTATION_KEYWORDS - _HANDLED):
        if keyword not in new:
            reasons.append(f"{where}/{keyword} removed")
        elif not json_equal(old[keyword], new[keyword]):
            reasons.append(f"{where}/{keyword} changed (may accept more)")
    return reasons


def _compact(value: Any) -> str:
    return _json_scalar(value) if not isinstance(value, (dict, list)) else "a schema"


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``; objects compare by keys."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, dict):
        return (isinstance(right, dict) and left.keys() == right.keys()
                and all(json_equal(left[key], right[key]) for key in left))
    if isinstance(left, list):
        return (isinstance(right, list) and len(left) == len(right)
                and all(json_equal(a, b) for a, b in zip(left, right)))
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)
