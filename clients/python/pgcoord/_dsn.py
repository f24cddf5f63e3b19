"""Connection strings with their passwords masked, for everything pgcoord prints or raises."""

from __future__ import annotations

import re

MASK = "********"

# URI: postgres://user:PASSWORD@host...; and ?password=... or &password=...
_URI_USERINFO = re.compile(r"^(postgres(?:ql)?://[^@/?#]*?:)([^@/?#]*)(@)", re.IGNORECASE)
_URI_PARAM = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)
# key=value: password = 'quoted \' value' or password=bare
_KV = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s]*)", re.IGNORECASE)


def is_uri(dsn: str) -> bool:
    """Whether ``dsn`` is a URI rather than key=value pairs."""
    return dsn[:13].lower().startswith(("postgres://", "postgresql://"))


def mask_dsn(dsn: str) -> str:
    """Return ``dsn`` with every password replaced by a mask."""
    if is_uri(dsn):
        out = _URI_USERINFO.sub(lambda m: m.group(1) + MASK + m.group(3), dsn)
        return _URI_PARAM.sub(lambda m: m.group(1) + MASK, out)
    return _KV.sub(lambda m: m.group(1) + MASK, dsn)


def _passwords(dsn: str) -> list[str]:
    found: list[str] = []
    if is_uri(dsn):
        m = _URI_USERINFO.match(dsn)
        if m and m.group(2):
            found.append(m.group(2))
        found += [m.group(2) for m in _URI_PARAM.finditer(dsn) if m.group(2)]
    else:
        for m in _KV.finditer(dsn):
            v = m.group(2)
            if v.startswith("'"):
                v = v[1:-1] if v.endswith("'") and len(v) > 1 else v[1:]
                found.append(v.replace("\\'", "'").replace("\\\\", "\\"))
            if v:
                found.append(v)
    # The percent-decoded form of a URI password may be what a message quotes.
    from urllib.parse import unquote

    found += [unquote(p) for p in found]
    return sorted({p for p in found if p}, key=len, reverse=True)


def scrub(message: str, dsn: str | None) -> str:
    """Return ``message`` with the DSN masked and any password of ``dsn`` in it replaced."""
    if not dsn:
        return message
    out = message.replace(dsn, mask_dsn(dsn))
    for p in _passwords(dsn):
        out = out.replace(p, MASK)
    return out
