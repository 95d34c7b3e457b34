"""Showing text that came from a user's files: bounded in length and safe for a terminal or a document.

A file or module name may hold escape bytes or newlines, and a source line may be megabytes long;
what torchport prints of them goes through these helpers so that output stays one line per item,
never drives the terminal, and grows linearly with the input.
"""

from __future__ import annotations

import re

__all__ = ["EXCERPT_WIDTH", "excerpt", "terminal_safe", "markdown_code", "markdown_text"]

#: Characters of a source line shown around a finding; longer lines are cut with an ellipsis.
EXCERPT_WIDTH = 160

# C0 and C1 control characters and DEL, except tab; plus the Unicode line and bidi-override marks.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` with control characters shown as escapes (`\\x1b`, `\\n`), so it prints as one inert line."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), str(text))


def excerpt(line: str, column: int = 0, width: int = EXCERPT_WIDTH) -> str:
    """At most `width` characters of `line` around `column`, with '...' where it was cut."""
    if len(line) <= width:
        return line
    start = max(0, min(column - width // 4, len(line) - width))
    end = start + width
    return ("..." if start else "") + line[start:end] + ("..." if end < len(line) else "")


def markdown_code(text: str) -> str:
    """`text` as a Markdown code span that no backtick, pipe or HTML in it can break out of."""
    text = terminal_safe(text).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


_MARKDOWN_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "*": "\\*", "_": "\\_",
                     "[": "\\[", "]": "\\]"}


def markdown_text(text: str) -> str:
    """`text` as literal Markdown text (also inside a table cell): no markup, HTML or cell break in it acts."""
    return "".join(_MARKDOWN_ESCAPES.get(character, character) for character in terminal_safe(text))
