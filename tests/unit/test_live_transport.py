"""Live mode's transport: frames round-trip; garbage, oversized frames, unknown messages
and wrong tokens close that connection and nothing else."""

import asyncio
import os
import struct

import msgspec
import pytest

from orchestrator.live.messages import Heartbeat, Hello, Shutdown, Step, StepDone
from orchestrator.live.options import LiveError, LiveOptions
from orchestrator.live.transport import (
    MAX_FRAME_BYTES,
    BadFrame,
    decode,
    encode,
    read_message,
)


def feed(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def read_all(data: bytes, max_bytes: int = MAX_FRAME_BYTES):
    async def main():
        reader = feed(data)
        out = []
        while (msg := await read_message(reader, max_bytes)) is not None:
            out.append(msg)
        return out

    return asyncio.run(main())


MESSAGES = [Hello("t" * 32, 3, 1234), Step(7, "decode-1", 0.25, 4), StepDone(7),
            Heartbeat(3, 9, 12, 40 << 20), Shutdown()]


def test_every_message_round_trips_through_a_frame():
    assert read_all(b"".join(encode(m) for m in MESSAGES)) == MESSAGES
    for m in MESSAGES:
        assert len(encode(m)) < 100  # a step is tens of bytes, far under the limit


@pytest.mark.parametrize(("data", "reason"), [
    (struct.pack(">I", MAX_FRAME_BYTES + 1) + b"x", "exceeds the limit"),
    (struct.pack(">I", 4) + b"\xc1\xc1\xc1\xc1", "undecodable"),
    (encode(Shutdown())[:4], "closed inside"),
    (b"\x00\x00", "inside a frame header"),
    (struct.pack(">I", 100) + b"short", "closed inside a frame"),
])
def test_bad_bytes_raise_bad_frame_with_a_reason(data, reason):
    with pytest.raises(BadFrame, match=reason):
        read_all(data)


def test_unknown_message_type_and_wrong_fields_are_refused():
    with pytest.raises(BadFrame, match="not a known message"):
        decode(msgspec.msgpack.encode({"type": "launch_missiles", "id": 1}))
    with pytest.raises(BadFrame, match="not a known message"):
        decode(msgspec.msgpack.encode({"type": "step", "id": "x", "worker": 1}))
    with pytest.raises(BadFrame):
        read_all(struct.pack(">I", 10) + os.urandom(10), max_bytes=64)


def test_options_refuse_bad_values_and_non_loopback_hosts():
    with pytest.raises(ValueError, match="workers_per_process"):
        LiveOptions(workers_per_process=0)
    with pytest.raises(ValueError, match="heartbeat_timeout_s"):
        LiveOptions(heartbeat_s=0.5, heartbeat_timeout_s=0.6)
    with pytest.raises(ValueError, match="not loopback"):
        LiveOptions(host="0.0.0.0")
    assert LiveOptions(host="0.0.0.0", allow_remote=True).host == "0.0.0.0"
    with pytest.raises(LiveError, match="more than --max-worker-procs 2"):
        LiveOptions(max_worker_procs=2).check_processes(3, 3)


def test_the_server_closes_bad_peers_and_keeps_serving():
    from orchestrator.live.backend import LiveBackend

    async def peer(path: str, data: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(data)
        await writer.drain()
        got = await asyncio.wait_for(reader.read(), timeout=5)  # the server closes
        writer.close()
        return got

    async def main():
        backend = LiveBackend(LiveOptions(hello_timeout_s=0.5), speed=1.0)
        await backend._listen()
        path = backend.address.removeprefix("unix:")
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        bad = [os.urandom(64), struct.pack(">I", MAX_FRAME_BYTES + 1),
               struct.pack(">I", 20) + msgspec.msgpack.encode({"type": "nope", "a": 1}).ljust(20),
               encode(Hello("wrong", 0, os.getpid())), encode(StepDone(1)), b""]
        for data in bad:
            assert await peer(path, data) == b""
        await asyncio.sleep(0.05)
        reasons = [f["reason"] for e, f in backend.events if e == "connection_closed"]
        await backend.stop()
        assert not os.path.exists(path)
        return reasons

    reasons = asyncio.run(main())
    assert len(reasons) == 6
    assert any("exceeds the limit" in r for r in reasons)
    assert any("wrong token" in r for r in reasons)
    assert any("expected hello" in r for r in reasons)
    assert any("no hello in time" in r for r in reasons)
