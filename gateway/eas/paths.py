"""The engine path of an EAS-form call (/api/predict/<service>/<path>): decoded, normalised,
and checked, so that the route the gateway allows (contracts.engine_routes) is the route the
engine runs.

Servers read a path differently: percent-decoded or not, `//` and `..` resolved or not, an
encoded `/` a separator or a character, `;` a parameter or a character. A check on the raw
text is fooled by `/v1/%63ompletions` (the engine's /v1/completions), one on the decoded text
by a server that decodes twice. So the path is decoded once and normalised (`//` collapsed,
`.` and `..` resolved as RFC 3986 does), whatever would read differently at any server is
refused (an encoded `/`, `\\` or `%`, a `;`, control characters, a broken escape, bytes not
percent-encoded or not UTF-8), and the engine is called on that normalised path, encoded
again: the route matched is the route called.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

# RFC 3986's pchar less ";" (refused): what stays as it is when the path is encoded again.
_SAFE = "/!$&'()*+,=:@"
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Escapes that decode to a character whose meaning differs between servers.
_AMBIGUOUS_ESCAPES = (
    ("%2f", "an encoded '/' (%2F), which some servers read as a separator and others not"),
    ("%5c", "an encoded '\\' (%5C), which some servers read as a separator"),
    ("%25", "an encoded '%' (%25), which a server that decodes twice reads as another escape"),
    ("%3b", "an encoded ';' (%3B), which some servers read as a path parameter"),
)


@dataclass(frozen=True)
class EnginePath:
    path: str  # decoded and normalised, no trailing slash (but "/"): what routes match
    trailing_slash: bool  # the caller's path ended with "/" (kept for a custom engine's routes)

    def target(self, keep_trailing_slash: bool) -> str:
        """The path the engine is called on, percent-encoded again."""
        path = self.path
        if keep_trailing_slash and self.trailing_slash and path != "/":
            path += "/"
        return quote(path, safe=_SAFE)


@dataclass(frozen=True)
class PathRefusal:
    reason: str  # what is wrong, for the caller's error message


def engine_path(raw: str) -> EnginePath | PathRefusal:
    """The path after /api/predict/<service>, as the client sent it (still percent-encoded)."""
    if not raw.isascii():
        return PathRefusal("characters outside ASCII that are not percent-encoded")
    lowered = raw.lower()
    for escape, why in _AMBIGUOUS_ESCAPES:
        if escape in lowered:
            return PathRefusal(why)
    if _ESCAPE.search(raw):
        return PathRefusal("a '%' that is not followed by two hexadecimal digits")
    if ";" in raw or "\\" in raw:
        return PathRefusal("a ';' or '\\', which servers read differently")
    try:
        decoded = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return PathRefusal("percent-escapes that do not decode to UTF-8 text")
    if _CONTROL.search(decoded):
        return PathRefusal("a control character (such as %00 or %0A)")
    # "//" collapsed first: posixpath keeps a leading "//" (POSIX leaves it to the system).
    collapsed = "/" + re.sub("/+", "/", decoded).lstrip("/")
    normalised = posixpath.normpath(collapsed)  # "." and ".." resolved, never above "/"
    return EnginePath(normalised, trailing_slash=collapsed != "/" and collapsed.endswith("/"))
