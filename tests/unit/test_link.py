"""The agent <-> processor link: framing survives any split of the byte stream, and both ends deliver messages
big and small over a real socket pair, in order."""

from __future__ import annotations

import asyncio
import random
import socket
import threading

import pytest

from scaler.worker.link import AsyncLink, BlockingLink, FrameReader, pack

pytestmark = pytest.mark.timeout(60)


def _messages(seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    out = []
    for _ in range(60):
        frames = rng.choice([1, 1, 1, 2, 3])
        sizes = [rng.choice([0, 1, 7, 100, 5000, 200_000]) for _ in range(frames)]
        out.append([rng.randbytes(size) for size in sizes])
    return out


@pytest.mark.parametrize("seed", range(5))
def test_the_reader_rebuilds_messages_from_any_split_of_the_stream(seed: int) -> None:
    messages = _messages(seed)
    stream = b"".join(bytes(buffer) for message in messages for buffer in pack(message))
    rng = random.Random(seed)
    reader = FrameReader()
    got: list[list[bytes]] = []
    position = 0
    while position < len(stream):
        step = rng.choice([1, 3, 12, 100, 4096, 300_000])
        got += [[bytes(frame) for frame in message] for message in reader.feed(stream[position : position + step])]
        position += step
    assert got == messages


def test_a_message_of_zero_frames_is_refused() -> None:
    with pytest.raises(ValueError, match="0 frames"):
        FrameReader().feed(b"\x00\x00\x00\x00")


def test_the_blocking_end_sends_and_receives_big_and_small_messages_in_order() -> None:
    left, right = socket.socketpair()
    sender, receiver = BlockingLink(left), BlockingLink(right)
    messages = [*_messages(7), [bytes(8 << 20)], [b"after the big one"]]

    def send_all() -> None:
        for message in messages:
            sender.send(message)

    thread = threading.Thread(target=send_all)
    thread.start()
    got: list[list[bytes]] = []
    while len(got) < len(messages):
        message = receiver.receive(10)
        assert message is not None, "a message did not arrive within 10 s"
        got.append([bytes(frame) for frame in message])
    thread.join(10)
    assert got == messages
    assert receiver.receive(0) is None
    left.close()
    with pytest.raises(EOFError):
        receiver.receive(1)
    right.close()


def test_the_async_end_queues_what_the_socket_does_not_take_and_keeps_the_order() -> None:
    left, right = socket.socketpair()
    messages = [[bytes(3 << 20)], [b"small"], *_messages(3), [b"last"]]
    received: list[list[bytes]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def on_messages(batch: list[list[bytearray]]) -> None:
            received.extend([bytes(frame) for frame in message] for message in batch)
            if len(received) == len(messages) and not done.done():
                done.set_result(None)

        sender = AsyncLink(loop, left, lambda batch: None)
        AsyncLink(loop, right, on_messages)
        for message in messages:  # the first one alone overflows the socket buffer
            sender.send(message)
        assert sender.out, "expected the socket to refuse part of a 3 MB message at once"
        await asyncio.wait_for(done, 20)

    asyncio.run(main())
    assert received == messages
    left.close()
    right.close()
