"""Bytes in, checked frames out (``cluster.frames`` says what frames there are), with bounded
memory whatever the bytes say.

Frames are msgpack arrays laid end to end, with nothing between them to say where one ends. The
decoder finds that out itself (``_measure``) and keeps what it has read in its own buffer, so that
the frame nearly every read of a busy link is full of, MSG, can be read straight out of it
(``cluster.message_frames.read_message``). Any other frame, or a MSG in a form that reader leaves
alone, is unpacked by msgpack once it is whole and checked field by field (``check_frame``).

Limits. Until the peer has proved who it is, a frame is small (``HANDSHAKE_FRAME``) and so are its
arrays, maps, strings and binaries; once the link is ``open``, the full limits apply. A length in a
header is held against them as soon as the header is read, before anything is allocated for it,
and bytes buffered past the frame limit are refused at once: no header can make the node allocate
much for a stranger, nor a peer make it buffer without bound. Nesting is bounded too
(``MAX_DEPTH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgpack

from cluster.checks import MAX_ARRAY, LinkError
from cluster.frames import HANDSHAKE_FRAME, MAX_PEERS, MAX_TEXT, NONCE_SIZE, Frame, check_frame
from cluster.message_frames import read_message

if TYPE_CHECKING:
    from mypy_extensions import i64  # (a machine integer once compiled; an int otherwise)

__all__ = ["FrameDecoder"]


class _Limits:
    """What one frame may hold, and how long it may be."""

    __slots__ = ("array", "blob", "frame", "text")

    def __init__(self, frame: int, array: int, text: int, blob: int) -> None:
        self.frame = frame
        self.array = array
        """Elements of an array, pairs of a map."""
        self.text = text
        """Bytes of a string."""
        self.blob = blob
        """Bytes of a binary."""


class FrameDecoder:
    """Bytes in, checked frames out.

    Args:
        max_frame: the largest frame (in bytes) a peer may send once authenticated; a larger one is
            a ``LinkError`` as soon as that much of it is buffered, so a peer cannot make the node
            buffer without bound. Before that, ``HANDSHAKE_FRAME`` is the limit.
    """

    __slots__ = ("_buf", "_chunks", "_limits", "_max_frame", "_need", "_opened", "_pos", "_size")

    def __init__(self, max_frame: int) -> None:
        self._max_frame = max_frame
        self._limits = _Limits(min(max_frame, HANDSHAKE_FRAME), MAX_PEERS, 4096, NONCE_SIZE)
        self._opened = False
        self._buf = b""
        self._pos = 0  # bytes of _buf already made into frames
        self._chunks: list[bytes] = []  # bytes received since _buf was last joined
        self._size = 0  # bytes buffered beyond _pos, chunks included
        self._need = 1  # bytes that must be buffered before the next frame can be whole

    def open(self) -> None:
        """The peer is authenticated: from the next frame on, the full limits apply (bytes
        already buffered carry over)."""
        self._limits = _Limits(self._max_frame, MAX_ARRAY, MAX_TEXT, self._max_frame)
        self._opened = True

    def receive_data(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limits.frame:
            raise LinkError("frame larger than the largest allowed")
        self._chunks.append(data)

    def frames(self) -> Iterator[Frame]:
        """Every complete frame buffered so far, in order (an ``open`` meanwhile applies at once).

        The position is kept after every frame, so an iteration abandoned half-way loses nothing
        but the frames not yet taken; the next one resumes after the last one yielded."""
        while self._size >= self._need:
            if self._chunks:
                head = self._buf[self._pos :] if self._pos else self._buf
                self._buf = b"".join([head, *self._chunks]) if head else b"".join(self._chunks)
                self._pos = 0
                self._chunks = []
            buf, start, limits = self._buf, self._pos, self._limits
            frame: Frame | None = None
            if self._opened:
                frame, end = read_message(buf, start, limits.frame)
            if frame is None:
                end = _measure(buf, start, limits)
                if end < 0:  # not whole yet: at least this much more must come
                    self._need = -end - start
                    return
                frame = _unpack(buf[start:end], limits)
            self._pos = end
            self._size -= end - start
            self._need = 1
            yield frame
        if not self._size:
            self._buf, self._pos = b"", 0


def _unpack(data: bytes, limits: _Limits) -> Frame:
    try:
        obj = msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True, max_str_len=limits.text,
            max_bin_len=limits.blob, max_array_len=limits.array, max_map_len=limits.array,
            max_ext_len=0,
        )  # fmt: skip
    except (msgpack.UnpackException, ValueError, RecursionError) as exc:
        raise LinkError(f"undecodable frame: {exc}") from exc
    return check_frame(obj)


def _measure(buf: bytes, start: i64, limits: _Limits) -> i64:
    """Where the msgpack object at ``buf[start:]`` ends; if it is not whole yet, minus a length it
    will have at least (the end of the field being read, or one byte past what is buffered). A
    length past the limits, a frame past the frame limit or nested deeper than ``MAX_DEPTH`` is a
    ``LinkError``.

    ``due`` is how many objects are still to be read in the array or map being read (a map's pairs
    count twice), ``outer`` the same of each one around it."""
    end: i64 = len(buf)
    k: i64 = start
    due: i64 = 1
    outer: list[i64] = []
    while True:
        if due == 0:
            if not outer:
                break
            due = outer.pop()
            continue
        if k >= end:
            return -(k + 1)
        due -= 1
        marker: i64 = buf[k]
        n: i64 = 0
        if marker <= 0x7F or marker >= 0xE0 or 0xC0 <= marker <= 0xC3:  # ints, nil, booleans
            if marker == 0xC1:
                raise LinkError("undecodable frame: 0xc1 is no msgpack type")
            k += 1
        elif marker <= 0x8F:  # fixmap
            n = 2 * _check(marker & 0x0F, limits.array, "map")
            k += 1
        elif marker <= 0x9F:  # fixarray
            n = _check(marker & 0x0F, limits.array, "array")
            k += 1
        elif marker <= 0xBF:  # fixstr
            k += 1 + _check(marker & 0x1F, limits.text, "str")
        elif 0xCA <= marker <= 0xD3:  # float, uint, int: 4, 8, 1, 2, 4, 8, 1, 2, 4, 8 bytes
            k += 1 + _FIXED[marker - 0xCA]
        elif 0xC7 <= marker <= 0xC9 or 0xD4 <= marker <= 0xD8:  # ext: links carry none
            raise LinkError("ext exceeds max_ext_len(0)")
        else:  # a length of 1, 2 or 4 bytes follows
            if marker == 0xC4 or marker == 0xD9:
                width: i64 = 1
            elif marker == 0xC5 or marker == 0xDA or marker == 0xDC or marker == 0xDE:
                width = 2
            else:
                width = 4
            if k + 1 + width > end:
                return -(k + 1 + width)
            length: i64 = 0
            for i in range(width):
                length = length << 8 | buf[k + 1 + i]
            k += 1 + width
            if 0xC4 <= marker <= 0xC6:
                k += _check(length, limits.blob, "bin")
            elif 0xD9 <= marker <= 0xDB:
                k += _check(length, limits.text, "str")
            elif marker == 0xDC or marker == 0xDD:
                n = _check(length, limits.array, "array")
            else:
                n = 2 * _check(length, limits.array, "map")
        if k - start > limits.frame:
            raise LinkError("frame larger than the largest allowed")
        if n:
            if len(outer) >= MAX_DEPTH:
                raise LinkError(f"undecodable frame: nested deeper than {MAX_DEPTH}")
            outer.append(due)
            due = n
    return k if k <= end else -k


MAX_DEPTH = 16
"""Arrays and maps one frame may nest (a frame needs four at most)."""
_FIXED = (4, 8, 1, 2, 4, 8, 1, 2, 4, 8)


def _check(n: i64, most: int, kind: str) -> i64:
    if n > most:
        raise LinkError(f"{n} exceeds max_{kind}_len({most})")
    return n
