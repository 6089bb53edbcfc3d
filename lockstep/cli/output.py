"""Output for humans and machines: YAML and JSON that keep invisible characters visible.

A reviewer reads a pinned interface in a pull request. A zero-width space or a
bidi override written raw would be invisible there, so every hidden character
(:func:`lockstep.core.signals.is_hidden_character`, the one definition, the
one the severity rules flag) is written as an escape, and so are carriage
returns and lone surrogates, which YAML cannot carry raw. The data is
unchanged: parsing the output gives back the exact strings, so digests do not move. The YAML library is
imported on the first dump_yaml: commands that print JSON or a table start without it.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

__all__ = ["dump_json", "dump_yaml", "escape_hidden", "has_hidden_characters"]


def _is_hidden(character: str) -> bool:
    if " " <= character <= "~":  # printable ASCII, most of any output
        return False
    from lockstep.core.signals import is_hidden_character  # its tables cost 10 ms at start; most output is ASCII

    return character == "\r" or 0xD800 <= ord(character) <= 0xDFFF or is_hidden_character(character)


def has_hidden_characters(text: str) -> bool:
    return any(_is_hidden(character) for character in text)


def escape_hidden(text: str, *, json_style: bool) -> str:
    """Hidden characters as escapes: JSON style (surrogate pairs) or YAML double-quote style (\\U)."""
    out = []
    for character in text:
        if not _is_hidden(character):
            out.append(character)
            continue
        code = ord(character)
        if code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        elif json_style:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def dump_json(value: Any, *, indent: int | None = 2) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False)
    # json.dumps already escapes control characters; hidden format characters only occur inside strings.
    return escape_hidden(text, json_style=True) + "\n"


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if has_hidden_characters(value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if "\n" in value and not re.search(r"[ \t]\n|[ \t]$|^\s", value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


@functools.cache
def _review_dumper() -> type[yaml.SafeDumper]:
    """A SafeDumper writing block scalars for multi-line text and double quotes wherever hidden characters
    must be escaped."""
    import yaml

    class ReviewDumper(yaml.SafeDumper):
        pass

    ReviewDumper.add_representer(str, _represent_str)
    return ReviewDumper


def dump_yaml(value: Any) -> str:
    import yaml

    text = yaml.dump(value, Dumper=_review_dumper(), sort_keys=False, allow_unicode=True, width=100)
    return escape_hidden(text, json_style=False)
