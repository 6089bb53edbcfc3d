"""Text signals: what makes text dangerous for a model to read (docs/severity.md).

:func:`text_signals` finds invisible or bidirectional Unicode, Unicode tag
characters, look-alike characters, markup, instruction-like phrases
(:data:`INSTRUCTION_PHRASES`, the one list of them) and URLs.
:func:`gained_signals` keeps those that a new definition has and the old one
has not. :func:`is_hidden_character` is the one definition of a hidden
character: the CLI escapes exactly these (and the characters YAML needs
escaped) when it writes an interface for review.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.core.model import escape_pointer_token
from lockstep.core.wording import listing

__all__ = [
    "INSTRUCTION_PHRASES",
    "GainedSignal",
    "Phrase",
    "SignalCategory",
    "TextSignal",
    "gain_reasons",
    "gained_signals",
    "hidden_characters",
    "is_hidden_character",
    "pointer",
    "scanned_strings",
    "text_signals",
    "visible",
]


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


def is_hidden_character(char: str) -> bool:
    """Whether ``char`` alone is hidden: invisible, bidirectional or a Unicode tag character.

    The one definition of a hidden character. :func:`hidden_characters` applies
    it in context, where emoji presentation selectors after a symbol and a
    zero-width joiner between two symbols are legitimate; alone, they count.
    """
    return next(hidden_characters(char), None) is not None


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
    reasons = [f"{label(pointer)} gains {_NOUNS[category]} {listing(details)}"
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
