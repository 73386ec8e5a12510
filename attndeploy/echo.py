"""`echo`: a user's content quoted in a message, cut to a bounded length on one line.

A message that quotes what it found (a line of a config that does not parse, a name, a value)
must stay one short line whatever the file holds: a 600 KB line is shown as its first
`ECHO_LIMIT` characters, an ellipsis and its length. Every quote of a file's content in
`check-repo`'s findings (and in the errors of the readers it calls) goes through `echo`.
"""

from __future__ import annotations

ECHO_LIMIT = 200  # characters of a quoted value kept in a message


def echo(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` on one line (line breaks escaped), cut to `limit` characters plus an ellipsis and
    the original length when longer: `xxxx... (604123 characters)`."""
    one_line = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(one_line) <= limit:
        return one_line
    return f"{one_line[:limit]}... ({len(text)} characters)"
