"""Advisory lock keys: XXH64 (seed 0) of a name's UTF-8 bytes, read as a signed 64-bit integer.

The same function as the C library's ``pgc_key_hash`` (``src/locks/key.c``): every client
computes the same key for the same name, so a lock taken by ``pgcoord run`` excludes one
taken here. The golden vectors are pinned by ``tests/test_key.py``.
"""

from __future__ import annotations

from .errors import UsageError

__all__ = ["key", "xxh64", "KEY_NAME_MAX"]

KEY_NAME_MAX = 255
"""The longest lock name, in UTF-8 bytes (the C library's ``PGC_KEY_NAME_MAX``)."""

_M = 0xFFFFFFFFFFFFFFFF
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M
    acc = _rotl(acc, 31)
    return (acc * _P1) & _M


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """Return the XXH64 hash of ``data`` with ``seed``, as an unsigned 64-bit integer."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def name_bytes(what: str, name: object, limit: int) -> bytes:
    """Check a name given to the server (1 to ``limit`` bytes of UTF-8) and return its bytes."""
    if not isinstance(name, str):
        raise UsageError(f"{what} must be a str, not {type(name).__name__}")
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UsageError(f"{what} is not valid UTF-8: a lone surrogate at offset {e.start}") from None
    if not b:
        raise UsageError(f"{what} is empty")
    if len(b) > limit:
        raise UsageError(f"{what} is {len(b)} bytes, longer than {limit}")
    return b


def key(name: str) -> int:
    """Return the advisory lock key of ``name``: XXH64 (seed 0) of its UTF-8 bytes, signed.

    This is the key ``pgcoord run``, ``pgcoord lock`` and every other pgcoord client use for
    the same name. Raises :class:`UsageError` for an empty name, one longer than 255 bytes, or
    one that is not valid UTF-8.
    """
    h = xxh64(name_bytes("lock name", name, KEY_NAME_MAX))
    return h - (1 << 64) if h >= (1 << 63) else h
