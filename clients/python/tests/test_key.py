"""Lock keys: the golden vectors of the C library (tests/unit/test_key.c)."""

from __future__ import annotations

import pytest

import pgcoord

VECTORS = [
    ("", 0xEF46DB3751D8E999),
    ("a", 0xD24EC4F1A98C6E5B),
    ("abc", 0x44BC2CF5AD770999),
    ("nightly-report", 0x98055996AC6361BD),
    ("pgcoord", 0xCBA6B47628FB174A),
    ("The quick brown fox jumps over the lazy dog", 0x0B242D361FDA71BC),
    ("0123456789abcdef0123456789abcdef0123456789", 0xA76190C3ACF08A1C),
    (b"h\xc3\xa9llo w\xc3\xb6rld".decode(), 0x60041BFEC530413C),
]


@pytest.mark.parametrize("text,want", VECTORS)
def test_xxh64_golden_vectors(text: str, want: int) -> None:
    assert pgcoord.xxh64(text.encode()) == want


def test_key_is_signed_int64() -> None:
    assert pgcoord.key("nightly-report") == -7492483901388791363
    assert pgcoord.key("pgcoord") == 0xCBA6B47628FB174A - (1 << 64)
    assert pgcoord.key("abc") == 0x44BC2CF5AD770999
    assert pgcoord.key("Nightly-report") != pgcoord.key("nightly-report")


def test_key_refuses_bad_names() -> None:
    with pytest.raises(pgcoord.UsageError, match="lock name is empty"):
        pgcoord.key("")
    with pytest.raises(pgcoord.UsageError, match="longer than 255"):
        pgcoord.key("x" * 256)
    assert isinstance(pgcoord.key("x" * 255), int)
    with pytest.raises(pgcoord.UsageError, match="not valid UTF-8"):
        pgcoord.key("bad \udcff")
    with pytest.raises(pgcoord.UsageError, match="must be a str"):
        pgcoord.key(42)  # type: ignore[arg-type]

