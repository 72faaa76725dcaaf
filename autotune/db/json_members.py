"""The members of one JSON object read a chunk at a time: `object_members`, for files too large to load
whole (a vLLM config file is one object of M → config; `json.loads` of 100 MB of it holds gigabytes).

Rules. The text is one JSON object (whitespace around it); its members are yielded in the file's order as
(key, value), each value decoded whole by the standard library's decoder (`json.JSONDecoder`, its
hooks applied), so memory holds one chunk and one value, however large the object is. A value longer than
`max_value` characters is an error, as is anything that is not JSON (`JsonError`, with the line and column
in the whole text, in the words `json.loads` uses); keys that appear twice are the caller's to check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CHUNK_CHARS", "MAX_VALUE_CHARS", "JsonError", "NotAnObject", "object_members"]

#: Characters read at a time.
CHUNK_CHARS = 1 << 20
#: The longest value of a member (a config entry is a few hundred characters).
MAX_VALUE_CHARS = 1 << 22

_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER_PART = re.compile(r"[0-9eE.+-]*")
#: The longest literal the decoder reads ("-Infinity"): one cut by the chunk's end fails at its start.
_LONGEST_LITERAL = 9


class JsonError(ValueError):
    """Text that is not JSON: `msg` as `json.JSONDecodeError` words it, `line` and `column` from 1."""

    def __init__(self, msg: str, line: int, column: int) -> None:
        super().__init__(f"{msg} (line {line}, column {column})")
        self.msg, self.line, self.column = msg, line, column


class NotAnObject(ValueError):
    """JSON text whose top-level value is not an object; `head` is how the text starts."""

    def __init__(self, head: str) -> None:
        super().__init__(f"the top-level value is not an object: {head!r}")
        self.head = head


def _space_end(text: str, pos: int) -> int:
    """Where the whitespace from `pos` in `text` ends."""
    found = _SPACE.match(text, pos)
    return found.end() if found else pos


def _may_go_on(value: Any, text: str, end: int) -> bool:
    """Whether `value`, decoded from `text` up to `end`, may go on past the end of `text`: a number
    whose characters run to it ("12" of "123", "1.5" of "1.5e3")."""
    if end == len(text):
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    found = _NUMBER_PART.match(text, end)
    return found is not None and found.end() == len(text)


class _Text:
    """The text `read` gives, held from the first character not yet consumed (`pos` in `buf`), with
    the line and column of `buf`'s start."""

    def __init__(self, read: Callable[[int], str], chunk: int) -> None:
        self.read, self.chunk = read, chunk
        self.buf, self.pos, self.eof = "", 0, False
        self.line, self.col = 1, 0  # of buf[0]: line from 1, column from 0

    def fill(self) -> bool:
        """Reads one more chunk, dropping what was consumed; False at the end of the text."""
        if self.eof:
            return False
        more = self.read(self.chunk)
        if not more:
            self.eof = True
            return False
        newlines = self.buf.count("\n", 0, self.pos)
        if newlines:
            self.line += newlines
            self.col = self.pos - self.buf.rfind("\n", 0, self.pos) - 1
        else:
            self.col += self.pos
        self.buf, self.pos = self.buf[self.pos :] + more, 0
        return True

    def peek(self) -> str:
        """The next character but whitespace, consumed up to it ("" at the end of the text)."""
        while True:
            self.pos = _space_end(self.buf, self.pos)
            if self.pos < len(self.buf) or not self.fill():
                return self.buf[self.pos : self.pos + 1]

    def where(self, pos: int) -> tuple[int, int]:
        """The line and column (from 1) of `buf[pos]` in the whole text."""
        newlines = self.buf.count("\n", 0, pos)
        if newlines:
            return self.line + newlines, pos - self.buf.rfind("\n", 0, pos)
        return self.line, self.col + pos + 1

    def error(self, msg: str, pos: int | None = None) -> JsonError:
        return JsonError(msg, *self.where(self.pos if pos is None else pos))

    def value(self, decoder: json.JSONDecoder, max_chars: int) -> Any:
        """The next value, decoded; more text is read while it may be cut at the end of the chunk."""
        self.peek()
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buf) - _LONGEST_LITERAL or exc.msg.startswith("Unterminated string")
                if cut and not self.eof:  # perhaps cut short by the chunk's end: decoded again with more
                    if len(self.buf) - self.pos > max_chars:
                        raise self.error(f"a value of more than {max_chars} characters") from None
                    if self.fill():
                        continue
                raise self.error(exc.msg, exc.pos) from None
            if _may_go_on(value, self.buf, end) and self.fill():  # a number cut by the chunk's end
                continue
            self.pos = end
            return value


def object_members(
    read: Callable[[int], str],
    decoder: json.JSONDecoder | None = None,
    *,
    chunk: int = CHUNK_CHARS,
    max_value: int = MAX_VALUE_CHARS,
) -> Iterator[tuple[str, Any]]:
    """The members of the JSON object whose text `read(n)` gives (at most `n` characters a call, "" at
    its end), one at a time: (key, value decoded by `decoder`). Raises
    NotAnObject where the text is JSON of another value (or none), JsonError where it is no JSON or
    a value is longer than `max_value` characters."""
    decoder = decoder or json.JSONDecoder()
    text = _Text(read, chunk)
    if text.peek() != "{":
        head = text.buf[text.pos : text.pos + 40]
        text.value(decoder, max_value)  # JsonError where it is no JSON at all
        raise NotAnObject(head)
    text.pos += 1
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            if text.peek() != '"':
                raise text.error("Expecting property name enclosed in double quotes")
            key = text.value(decoder, max_value)
            if text.peek() != ":":
                raise text.error("Expecting ':' delimiter")
            text.pos += 1
            yield key, text.value(decoder, max_value)
            found = text.peek()
            text.pos += 1
            if found == "}":
                break
            if found != ",":
                raise text.error("Expecting ',' delimiter", text.pos - 1)
    if text.peek():
        raise text.error("Extra data")
