"""Values as Postgres will hold them: JSON that jsonb accepts, and text a text column accepts.

A value the server refuses fails the whole statement it was sent with; for a batched settle,
that is every other job of the batch too. So what a body or its error produced is made storable
(or refused with its own error) before it joins a statement.
"""

from __future__ import annotations

import json
import re
from typing import Any

# a NUL character as json.dumps writes it (\u0000 after an even run of backslashes)
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def json_text(value: Any) -> str:
    """`value` as JSON text that jsonb accepts. Raises TypeError for a value that is not JSON,
    ValueError for NaN or an infinity, a NUL character, or a lone surrogate (a string decoded
    with 'surrogateescape', such as a file name that is not UTF-8), all of which jsonb
    refuses."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    if _NUL_ESCAPE.search(text):
        raise ValueError("a string holds a NUL character (\\u0000), which jsonb refuses")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "a string holds a lone surrogate (not UTF-8, such as an undecodable file name), "
            "which jsonb refuses"
        ) from None
    return text


def plain_text(text: str, max_bytes: int) -> str:
    """`text` as a text column holds it: a NUL written as the four characters \\x00, a lone
    surrogate as its escape, and cut to at most `max_bytes` of UTF-8 (never within a
    character). For what must be stored whatever it holds: an error's message and trace."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace")[:max_bytes].decode("utf-8", "ignore")
