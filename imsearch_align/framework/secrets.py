"""Secrets kept out of what is printed or written: the user info of a URI.

A URI such as ``http://root:PASSWORD@host:19530`` carries a credential in its
user info (``user:password@``); :func:`redact_uri` drops it, and
:func:`redact_text` removes it from any message that may quote the URI (an
exception's text, a log line). Every place that shows a URI (results,
tables, logs, ``doctor``, errors) uses these two, so a password never
reaches a file or a terminal.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "redact_text", "redact_uri", "redact_uris", "uri_secret"]

#: What a removed secret is shown as.
MASK = "***"

#: The user info of a URI inside free text (``scheme://user:password@``).
_USERINFO_IN_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@]+@")
#: ``scheme://`` then the authority (up to the path, query or fragment).
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<authority>[^/?#]*)")


def _split_userinfo(uri: str) -> tuple[str, str, str] | None:
    """``(scheme://, user info, rest)`` of a URI with user info, else None."""
    m = _AUTHORITY.match(uri)
    if m is None or "@" not in m["authority"]:
        return None
    userinfo, _, host = m["authority"].rpartition("@")
    return m["scheme"], userinfo, host + uri[m.end() :]


def redact_uri(uri: str) -> str:
    """``uri`` without its user info (``user:password@``; a token can also travel
    there): ``http://root:pw@127.0.0.1:19530/x`` is ``http://127.0.0.1:19530/x``.
    Everything else is kept as written; a URI without user info is returned as is."""
    parts = _split_userinfo(uri)
    return uri if parts is None else parts[0] + parts[2]


def uri_secret(uri: str) -> str | None:
    """The secret in ``uri``'s user info (as written, percent-encoded): the
    password of ``user:password@``, the whole of ``token@``; None without one."""
    parts = _split_userinfo(uri)
    if parts is None:
        return None
    user, colon, password = parts[1].partition(":")
    return (password if colon else user) or None


def redact_text(text: str, uri: str | None) -> str:
    """``text`` with ``uri`` shown redacted and its secret (:func:`uri_secret`, as
    written and percent-decoded) replaced by :data:`MASK` wherever it still appears."""
    if not uri:
        return text
    out = text.replace(uri, redact_uri(uri))
    secret = uri_secret(uri)
    for form in {secret, unquote(secret)} if secret else ():
        out = out.replace(form, MASK)
    return out


def redact_uris(text: str) -> str:
    """``text`` with the user info (``user:password@``) of every URI in it removed,
    for free text whose URIs are not known (a page, a command line)."""
    return _USERINFO_IN_TEXT.sub(r"\1", text)
