"""Checking decoded msgpack values field by field, for every frame family a link carries.

A peer's frame arrives as whatever msgpack made of its bytes; each field is taken through one of
these checks, which return it typed or raise ``LinkError`` (the link then closes, with the reason
logged). Types are checked exactly (``type(x) is str``, so a subclass or a bool posing as an int
does not pass), integers within bounds, arrays and texts within lengths.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_ARRAY",
    "LinkError",
    "array",
    "blob",
    "integer",
    "mapping",
    "opt_blob",
    "opt_text",
    "text",
]

MAX_ARRAY = 4096
"""The longest array or map in any frame once a link is open (SNAP batches, queue lists)."""


class LinkError(Exception):
    """A peer broke the link protocol; the link must close, with this as the logged reason."""


def text(value: Any, most: int | None = None) -> str:
    if type(value) is not str:
        raise LinkError(f"expected a string, got {type(value).__name__}")
    if most is not None and len(value) > most:
        raise LinkError(f"a string of {len(value)} characters where at most {most} may be")
    return value


def opt_text(value: Any) -> str | None:
    return None if value is None else text(value)


def blob(value: Any) -> bytes:
    if type(value) is not bytes:
        raise LinkError(f"expected bytes, got {type(value).__name__}")
    return value


def opt_blob(value: Any) -> bytes | None:
    return None if value is None else blob(value)


def integer(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise LinkError(f"expected an integer from {low} to {high}, got {str(value)[:20]!r}")
    return value


def array(value: Any, most: int = MAX_ARRAY) -> list[Any]:
    if type(value) is not list:
        raise LinkError(f"expected an array, got {type(value).__name__}")
    if len(value) > most:
        raise LinkError(f"an array of {len(value)} where at most {most} may be")
    return value


def mapping(value: Any) -> dict[Any, Any]:
    if type(value) is not dict:
        raise LinkError(f"expected a map, got {type(value).__name__}")
    return value
