"""What a log line holds of text korral did not write: escaped and cut, so a client cannot forge lines.

An rmID, a peer address, an application ID or an exception's message may come from a client that has
not authenticated; logged raw, a newline in it starts a line of the client's choosing ("RmID=victim
registered again"), and ESC sequences rewrite a terminal. Every logger of the product comes from
``logger`` below, whose filter rewrites each record's arguments and exception message before any handler
sees them: control characters (C0, DEL, C1, the Unicode line and paragraph separators) become visible
escapes and each value is cut to ``MAX_LOGGED_CHARS``. Format strings are korral's own and stay as they
are.
"""

from __future__ import annotations

import logging
import numbers
import re
import traceback
from collections.abc import Mapping
from typing import Any

MAX_LOGGED_CHARS = 1024  # one value in a log line: an rmID, a peer, a reason
MAX_LOGGED_EXCEPTION_CHARS = 4096  # an exception's message (a config error names what it refuses)

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\x00": "\\0"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """``text`` on one line, its control characters shown as escapes, cut to ``limit`` characters."""
    cut = ""
    if len(text) > limit:
        cut = f"...({len(text) - limit:,} more characters)"
        text = text[:limit]
    return _CONTROL.sub(_escape, text) + cut


def _safe(value: Any) -> Any:
    if value is None or isinstance(value, numbers.Number):  # kept: a %d or %.1f still formats
        return value
    try:
        return escaped(str(value))
    except Exception:  # a value whose str() fails: logging's own handling would print the error
        return value


def _exception_text(exc_info: Any) -> str:
    """The traceback as logging formats it, each exception's message in it escaped and cut."""
    text = logging.Formatter().formatException(exc_info)
    seen: set[int] = set()
    error: BaseException | None = exc_info[1]
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        raw = "".join(traceback.format_exception_only(type(error), error)).rstrip("\n")
        kind = type(error).__qualname__
        message = escaped(str(error), MAX_LOGGED_EXCEPTION_CHARS)
        text = text.replace(raw, f"{kind}: {message}" if message else kind)
        error = error.__cause__ or error.__context__
    return text


class _ClientText(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            record.args = {key: _safe(value) for key, value in args.items()}
        elif args:
            record.args = tuple(_safe(value) for value in args)
        if not isinstance(record.msg, str):  # log.warning(error): the object's text is not korral's
            record.msg = escaped(str(record.msg), MAX_LOGGED_EXCEPTION_CHARS)
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = _exception_text(record.exc_info)
        return True


_FILTER = _ClientText()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` with every record's client text escaped and cut (module docstring)."""
    found = logging.getLogger(name)
    if _FILTER not in found.filters:
        found.addFilter(_FILTER)
    return found
