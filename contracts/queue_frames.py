"""EAS's queue items on the wire: the protobuf messages its SDK reads (`DataFrameProto`: index 1
uint64, tags 2 map<string,string>, data 3 bytes, message 4 string; `DataFrameListProto`: index 1
repeated DataFrameProto), written and read by hand: four fields do not need a protobuf runtime.

Pure: `frame` and `frames` encode, `read_frame` and `read_frames` decode (the tests read what
Wharf writes with eas-prediction's own generated classes too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

VARINT, LENGTH = 0, 2


@dataclass(frozen=True)
class Frame:
    """One queue item as a caller sees it."""

    index: int
    data: bytes = b""
    tags: dict[str, str] = field(default_factory=dict)
    message: str = ""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, LENGTH) + _varint(len(payload)) + payload


def frame(item: Frame) -> bytes:
    """A DataFrameProto."""
    out = bytearray()
    if item.index:
        out += _key(1, VARINT) + _varint(item.index)
    for name, value in sorted(item.tags.items()):
        entry = _delimited(1, name.encode()) + _delimited(2, value.encode())
        out += _delimited(2, entry)
    if item.data:
        out += _delimited(3, item.data)
    if item.message:
        out += _delimited(4, item.message.encode())
    return bytes(out)


def frames(items: list[Frame]) -> bytes:
    """A DataFrameListProto."""
    return b"".join(_delimited(1, frame(item)) for item in items)


def _fields(raw: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(raw):
        key, at = _read_varint(raw, at)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, at = _read_varint(raw, at)
            out.append((number, value))
        elif wire == LENGTH:
            size, at = _read_varint(raw, at)
            if at + size > len(raw):
                raise ValueError("a field runs past the end of the message")
            out.append((number, raw[at : at + size]))
            at += size
        else:
            raise ValueError(f"wire type {wire} is not one these messages use")
    return out


def _read_varint(raw: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(raw) or shift > 63:
            raise ValueError("a truncated number")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def read_frame(raw: bytes) -> Frame:
    """A DataFrameProto read back."""
    index, data, message, tags = 0, b"", "", {}
    for number, value in _fields(raw):
        if number == 1 and isinstance(value, int):
            index = value
        elif number == 2 and isinstance(value, bytes):
            entry = dict(_fields(value))
            tags[bytes(entry.get(1, b"")).decode()] = bytes(entry.get(2, b"")).decode()
        elif number == 3 and isinstance(value, bytes):
            data = value
        elif number == 4 and isinstance(value, bytes):
            message = value.decode()
    return Frame(index, data, tags, message)


def read_frames(raw: bytes) -> list[Frame]:
    """A DataFrameListProto read back."""
    return [read_frame(value) for number, value in _fields(raw)
            if number == 1 and isinstance(value, bytes)]  # fmt: skip
