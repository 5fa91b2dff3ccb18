"""Numbers held in strings, read and written exactly as redis-server 7.2 on x86-64 does.

* ``int_encodable``: whether a string is kept as an integer (OBJECT ENCODING ``int``): at most 20
  bytes that ``string2ll`` reads.
* INCRBYFLOAT computes in C's ``long double``, the x87 80-bit format (a 64-bit significand, exponents
  down to 2**-16382, subnormals below). Python has no such type, so values are exact fractions
  rounded to that format after each step (``round_extended``): reading a string as ``strtold``
  does (``parse_long_double``), adding, and writing the sum as ``%.17Lf`` with trailing zeros
  (and a lone ``-`` of a negative zero) taken off (``format_long_double``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

from node.integers import string2ll

__all__ = [
    "INVALID_FLOAT",
    "NAN_OR_INFINITY",
    "add_long_doubles",
    "format_long_double",
    "int_encodable",
    "parse_long_double",
    "round_extended",
]

INVALID_FLOAT: Final = "value is not a valid float"
NAN_OR_INFINITY: Final = "increment would produce NaN or Infinity"

_LONGEST_TEXT: Final = 5 * 1024
"""``MAX_LONG_DOUBLE_CHARS``: a longer text is refused without being read."""
_SIGNIFICAND: Final = 64
_LOWEST_QUANTUM: Final = -16445
"""The exponent of the smallest subnormal: 2**-16382 with 63 more bits below the point."""
_OVERFLOW: Final = Fraction(2) ** 16384
"""The least magnitude that is no longer finite."""
_DECIMAL: Final = re.compile(rb"([+-]?)(?:(\d+)\.?(\d*)|\.(\d+))(?:[eE]([+-]?\d+))?")
_HEX: Final = re.compile(
    rb"([+-]?)0[xX](?:([0-9a-fA-F]+)\.?([0-9a-fA-F]*)|\.([0-9a-fA-F]+))(?:[pP]([+-]?\d+))?"
)
_INFINITY: Final = re.compile(rb"([+-]?)(?:inf|infinity)", re.IGNORECASE)
_CHUNK: Final = 4000
"""Digits converted at once (see ``_to_int``)."""
_BEYOND: Final = 5000
"""A decimal exponent (roughly reckoned) past which a nonzero number is surely out of range."""

Extended = Fraction | float
"""A long double: a finite value as an exact fraction, or an infinity as a float."""


def _to_int(digits: bytes, base: int) -> int:
    """``int(digits, base)`` for any length (Python refuses to read more than 4300 decimal digits at
    once)."""
    value = 0
    for start in range(0, len(digits), _CHUNK):
        chunk = digits[start : start + _CHUNK]
        value = value * base ** len(chunk) + int(chunk, base)
    return value


def _to_digits(value: int) -> str:
    """``str(value)`` of a natural number of any size (see ``_to_int``)."""
    if value < 10**_CHUNK:
        return str(value)
    high, low = divmod(value, 10**_CHUNK)
    return _to_digits(high) + str(low).rjust(_CHUNK, "0")


def int_encodable(value: bytes | bytearray) -> bool:
    return len(value) <= 20 and string2ll(bytes(value)) is not None


def round_extended(value: Fraction) -> Extended:
    """``value`` rounded to the nearest long double (ties to even), or an infinity past the
    largest."""
    if value == 0:
        return value
    size = abs(value)
    exponent = size.numerator.bit_length() - size.denominator.bit_length() - _SIGNIFICAND
    while size >= Fraction(2) ** (exponent + _SIGNIFICAND):
        exponent += 1
    while size < Fraction(2) ** (exponent + _SIGNIFICAND - 1):
        exponent -= 1
    exponent = max(exponent, _LOWEST_QUANTUM)
    significand = round(size / Fraction(2) ** exponent)
    rounded = significand * Fraction(2) ** exponent
    if rounded >= _OVERFLOW:
        return float("inf") if value > 0 else float("-inf")
    return rounded if value > 0 else -rounded


def _scaled(sign: bytes, digits: int, base: int, exponent: int) -> Extended | None:
    """``±digits * base**exponent`` as ``strtold`` rounds it; None where it sets ERANGE for an
    overflow or an underflow to zero."""
    if digits == 0:
        return Fraction(0)
    bits = digits.bit_length()
    magnitude = bits * 3 // 10 + exponent if base == 10 else (bits + exponent) * 3 // 10
    if not -_BEYOND <= magnitude <= _BEYOND:
        return None
    value = round_extended(Fraction(digits) * Fraction(base) ** exponent)
    if value == 0 or isinstance(value, float):
        return None
    return -value if sign == b"-" else value


def parse_long_double(text: bytes | bytearray) -> Extended | None:
    """A string as redis-server's ``string2ld`` reads it (``strtold`` over the whole text, nothing
    before or after the number, no NaN, no overflow, no underflow to zero); None if refused."""
    if not text or len(text) >= _LONGEST_TEXT:
        return None
    text = bytes(text)
    match = _DECIMAL.fullmatch(text)
    if match is not None:
        sign, whole, point, alone, power = match.groups()
        fraction = alone if alone is not None else point
        digits = _to_int((whole or b"") + fraction or b"0", 10)
        return _scaled(sign, digits, 10, int(power or b"0") - len(fraction))
    match = _HEX.fullmatch(text)
    if match is not None:
        sign, whole, point, alone, power = match.groups()
        fraction = alone if alone is not None else point
        digits = _to_int((whole or b"") + fraction or b"0", 16)
        return _scaled(sign, digits, 2, int(power or b"0") - 4 * len(fraction))
    match = _INFINITY.fullmatch(text)
    if match is not None:
        return float("-inf") if match.group(1) == b"-" else float("inf")
    return None


def add_long_doubles(value: Extended, increment: Extended) -> Fraction | None:
    """``value + increment`` in long doubles; None if that is an infinity or NaN."""
    if isinstance(value, float) or isinstance(increment, float):
        return None
    total = round_extended(value + increment)
    return None if isinstance(total, float) else total


def format_long_double(value: Fraction) -> bytes:
    """``%.17Lf``, then trailing zeros after the point (and the point) removed; ``-0`` is ``0``."""
    scaled = round(abs(value) * 10**17)
    digits = _to_digits(scaled).rjust(18, "0")
    text = (digits[:-17] + "." + digits[-17:]).rstrip("0").rstrip(".")
    if value < 0 and text != "0":
        text = "-" + text
    return text.encode()
