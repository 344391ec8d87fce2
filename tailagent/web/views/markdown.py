"""The little Markdown agents write, as HTML that can carry nothing but text.

Agents answer in Markdown: backticks around a command, a fenced block of code, a
heading, a list, some bold. The page shows those as a reader expects, and nothing
else: every character of the input is escaped first, and only then are the few
constructs below turned into tags this module writes itself. No tag, attribute or
URL from the input survives as markup (a link shows as its text and its address).

    ```lang … ```   a code block           `code`    inline code
    # … ######      a heading (as h4–h6)    **bold**  __bold__
    - item / * item / 1. item: a list       *italic*  _italic_
    [text](url):    the text, then the address in brackets, as plain text
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from markupsafe import Markup, escape

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s{0,3}[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s{0,3}\d{1,9}[.)]\s+(.*)$")
# Inline constructs, on text that is already escaped (so `<` is `&lt;` by now).
# Each span is bounded and stays on one line: the text is an agent's, and an unbounded
# lazy span over 20,000 characters of `**a ` took 1.9 s to render (quadratic).
_SPAN = 200
_CODE = re.compile(rf"(`+)([^\n]{{1,{_SPAN}}}?)\1")
_BOLD = re.compile(rf"(\*\*|__)(?=\S)([^\n]{{1,{_SPAN}}}?)(?<=\S)\1")
_ITALIC = re.compile(rf"(?<![\w*])([*_])(?=\S)([^\n]{{1,{_SPAN}}}?)(?<=\S)\1(?![\w*])")
_LINK = re.compile(rf"\[([^\]\n]{{1,{_SPAN}}})\]\(([^)\s]{{1,2048}})\)")
_HOLE = "\x00{}\x00"  # where a code span waits while the rest is formatted
_HOLES = re.compile(r"\x00(\d+)\x00")


def inline(text: str) -> Markup:
    """One line or paragraph of agent text: escaped, with code, bold, italic and links
    (as text). Code spans are set aside first, so nothing inside them is formatted."""
    codes: list[str] = []

    def keep(match: re.Match[str]) -> str:
        codes.append(f"<code>{match.group(2).strip()}</code>")
        return _HOLE.format(len(codes) - 1)

    html = _CODE.sub(keep, str(escape(text.replace("\x00", ""))))
    html = _LINK.sub(r"\1 (\2)", html)
    html = _BOLD.sub(r"<strong>\2</strong>", html)
    html = _ITALIC.sub(r"<em>\2</em>", html)
    return Markup(_HOLES.sub(lambda m: codes[int(m.group(1))], html))


def render(text: str) -> Markup:
    """A whole answer or notice: paragraphs, headings, lists and code blocks."""
    return Markup("\n".join(_blocks(text.splitlines())))


def _blocks(lines: list[str]) -> Iterator[str]:
    paragraph: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        block = _block_at(lines, i)
        if block is None and line.strip():
            paragraph.append(line)
            i += 1
            continue
        if paragraph:
            yield f"<p>{inline(chr(10).join(paragraph))}</p>"
            paragraph = []
        if block is None:  # a blank line ends a paragraph
            i += 1
            continue
        html, i = block
        yield html
    if paragraph:
        yield f"<p>{inline(chr(10).join(paragraph))}</p>"


def _block_at(lines: list[str], i: int) -> tuple[str, int] | None:
    """The block that starts at line i, as HTML, and the line after it; None for a
    line of a paragraph (or a blank one)."""
    line = lines[i]
    fence = _FENCE.match(line)
    if fence:
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence.group(1)),
                   len(lines))  # fmt: skip
        code = escape("\n".join(lines[i + 1 : end]))
        return f'<pre class="code"><code>{code}</code></pre>', end + 1
    heading = _HEADING.match(line)
    if heading:
        level = min(len(heading.group(1)) + 3, 6)  # the page's own headings come first
        return f"<h{level}>{inline(heading.group(2))}</h{level}>", i + 1
    for pattern, tag in ((_BULLET, "ul"), (_NUMBERED, "ol")):
        if pattern.match(line):
            items: list[str] = []
            while i < len(lines) and (item := pattern.match(lines[i])):
                items.append(f"<li>{inline(item.group(1))}</li>")
                i += 1
            return f"<{tag}>{''.join(items)}</{tag}>", i
    return None
