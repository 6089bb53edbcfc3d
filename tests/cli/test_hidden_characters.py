"""One definition of a hidden character: what the severity rules flag, the CLI escapes.

The CLI's output also escapes carriage returns and lone surrogates (YAML cannot
carry them raw), and it still escapes every character it escaped before the
definitions were merged (categories Cc but newline and tab, Cf, Co, Cn, Zl, Zp,
Cs, and the variation selectors U+FE00..FE0F).
"""

import sys
import unicodedata

import yaml

from lockstep.cli.output import dump_json, dump_yaml, has_hidden_characters
from lockstep.core.signals import hidden_characters, is_hidden_character

_FORMERLY_ESCAPED = frozenset({"Cc", "Cf", "Co", "Cn", "Zl", "Zp", "Cs"})


def test_every_flagged_character_is_escaped_and_nothing_formerly_escaped_is_lost():
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        flagged = is_hidden_character(char)
        assert flagged == bool(list(hidden_characters(char))), hex(code)
        formerly = char not in "\n\t" and (unicodedata.category(char) in _FORMERLY_ESCAPED or 0xFE00 <= code <= 0xFE0F)
        escaped = has_hidden_characters(char)
        assert escaped == (flagged or char == "\r" or 0xD800 <= code <= 0xDFFF), hex(code)
        assert escaped or not formerly, hex(code)


def test_characters_flagged_but_formerly_written_raw_are_escaped_and_round_trip():
    text = "a\u2800b\u3164c\u034fd\U000e0100e"
    written = dump_yaml({"description": text})
    assert all(escape in written.lower() for escape in ("\\u2800", "\\u3164", "\\u034f", "\\u000e0100"))
    assert yaml.safe_load(written) == {"description": text}
    assert "\\u2800" in dump_json(text)


def test_an_emoji_joiner_is_escaped_for_review_though_not_flagged():
    family = "\U0001F468\u200d\U0001F469"
    assert list(hidden_characters(family)) == []
    assert has_hidden_characters(family) and is_hidden_character("\u200d")
