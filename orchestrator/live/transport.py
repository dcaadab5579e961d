"""Framing over asyncio streams: a 4-byte big-endian length, then one MessagePack message.

Anything that is not a well-formed frame of a known message (a length over the
limit, bytes that do not decode, an unknown tag) raises `BadFrame` with the
reason; the caller closes that connection and carries on.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from orchestrator.live.messages import Message

MAX_FRAME_BYTES = 1 << 20  # a Step is ~60 bytes; anything near a megabyte is not ours
_HEADER = struct.Struct(">I")
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


class BadFrame(Exception):
    """A peer sent something that is not a message of ours: the reason, in words."""


def encode(msg: Message) -> bytes:
    body = _encoder.encode(msg)
    if len(body) > MAX_FRAME_BYTES:
        raise ValueError(f"message of {len(body)} bytes exceeds the frame limit")
    return _HEADER.pack(len(body)) + body


def decode(body: bytes) -> Message:
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise BadFrame(f"not a known message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadFrame(f"undecodable frame: {exc}") from None


async def read_message(reader: asyncio.StreamReader,
                       max_bytes: int = MAX_FRAME_BYTES) -> Message | None:
    """The next message; None at a clean end of stream (between frames)."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise BadFrame("connection closed inside a frame header") from None
    (size,) = _HEADER.unpack(header)
    if size > max_bytes:
        raise BadFrame(f"frame of {size} bytes exceeds the limit of {max_bytes}")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise BadFrame(f"connection closed inside a frame of {size} bytes") from None
    return decode(body)


def write_message(writer: asyncio.StreamWriter, msg: Message) -> None:
    writer.write(encode(msg))
