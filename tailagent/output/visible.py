"""Text from outside (an agent, a caller, a peer's card, a request) made safe to show.

A terminal acts on the control characters in what it prints: ESC starts sequences
that clear the screen, retitle the window, plant links (OSC 8) or write the
clipboard (OSC 52); the C1 controls (U+0080-U+009F) are single-character forms of
the same; a carriage return or backspace overwrites what was shown. Bidi overrides
reorder what a person reads (the "Trojan Source" trick), and a line separator
starts a new line for some readers of a log. Every such character is shown as its
escape instead (`\\x1b`, `\\u202e`), so a person sees what was sent and the terminal
acts on none of it. Backslashes are left as they are: a path or a regex in an
agent's answer stays readable, and only a character that acts is ever replaced.
"""

from __future__ import annotations

import json

_C0 = range(0x00, 0x20)
_C1_AND_DEL = range(0x7F, 0xA0)
_REORDERING = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SEPARATORS = (0x2028, 0x2029)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(code: int) -> str:
    if chr(code) in _NAMED:
        return _NAMED[chr(code)]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = {code: _escape(code) for code in (*_C0, *_C1_AND_DEL, *_REORDERING, *_SEPARATORS)}
_LINES = {code: shown for code, shown in _ONE_LINE.items() if chr(code) not in "\n\t"}
# What json.dumps(ensure_ascii=False) leaves raw (it escapes C0 itself). Each can only
# stand inside a JSON string, where a \u escape means the same character.
_JSON = {code: f"\\u{code:04x}" for code in (*_C1_AND_DEL, *_REORDERING, *_SEPARATORS)}


def visible(text: str, *, one_line: bool = False) -> str:
    """`text` with every character a terminal or a log reader would act on shown as
    its escape. Newlines and tabs are kept unless `one_line` (a log record, a table
    cell that must stay one row)."""
    return text.translate(_ONE_LINE if one_line else _LINES)


def json_line(value: object) -> str:
    """`value` as one line of JSON that no reader splits and no terminal acts on,
    non-ASCII text otherwise kept as it is (not a wall of \\u escapes)."""
    return json.dumps(value, ensure_ascii=False).translate(_JSON)
