"""The Merlin receiver's block reads: frame messages split anywhere by TCP, several acquisitions' messages
in one read, an abort or a foreign message inside a block, a sender closing inside a frame.

A plain socket sender on 127.0.0.1 writes the MPX stream (messages built from the MIB frame layout by
raytile.io.testing.mib) in chunks of chosen sizes; the frames received are compared with the numpy
frames sent. Every test is bounded by the receiver's timeout and closes what it opens.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import numpy as np
import pytest

from raytile.common.errors import AcquisitionError
from raytile.io.testing.mib import encode_frame_data, mib_header
from raytile.live.detectors.merlin.mpx import AcquisitionHeader, mpx_message
from raytile.live.detectors.merlin.receiver import MerlinReceiver

SIG = (16, 64)  # raw modes pack rows in 64-bit words
DEPTH = {"U08": 6, "U16": 12, "U32": 24, "R1": 1, "R6": 6, "R12": 12}
MAX_VALUE = {"U08": 0xFF, "U16": 0xFFF, "U32": 0xFFFFFF, "R1": 1, "R6": 0x3F, "R12": 0xFFF}


def frames_for(seed: int, n: int, mode: str) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, MAX_VALUE[mode] + 1, size=(n,) + SIG).astype(np.uint32)


def frame_messages(frames: np.ndarray, mode: str) -> list[bytes]:
    data, x, y = encode_frame_data(frames, mode)
    depth = "R64" if mode.startswith("R") else mode
    return [mpx_message(mib_header(i + 1, 384, 1, x, y, depth, "1x1", DEPTH[mode]) + d) for i, d in enumerate(data)]


def header_message(nimages: int, mode: str) -> bytes:
    return mpx_message(AcquisitionHeader.make(nimages, counter_depth=DEPTH[mode]).raw)


class Sender:
    """Accepts one connection and writes ``stream`` in chunks of ``chunks`` bytes (cycled), pausing
    ``pause`` s after each chunk; then closes if ``close`` else holds the connection until stopped."""

    def __init__(self, stream: bytes, chunks: tuple[int, ...], pause: float = 0.0, close: bool = False):
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.port = self._listen.getsockname()[1]
        self._stream, self._chunks, self._pause, self._close = stream, chunks, pause, close
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listen.accept()
        with conn:
            pos, i = 0, 0
            while pos < len(self._stream):
                n = self._chunks[i % len(self._chunks)]
                conn.sendall(self._stream[pos:pos + n])
                pos, i = pos + n, i + 1
                if self._pause:
                    time.sleep(self._pause)
            if not self._close:
                self._done.wait(10.0)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5.0)
        self._listen.close()


def receiver(sender: Sender, **kwargs) -> Iterator[MerlinReceiver]:
    rx = MerlinReceiver("127.0.0.1", sender.port, timeout=3.0, **kwargs)
    rx.start()
    try:
        yield rx
    finally:
        rx.close()
        sender.stop()


@pytest.mark.parametrize("mode", ["U08", "U16", "U32", "R1", "R6", "R12"])
@pytest.mark.parametrize("chunks", [(1 << 20,), (7, 13, 1000, 3, 15, 4096)])
def test_frames_split_anywhere_equal_what_was_sent(mode, chunks):
    frames = frames_for(1, 37, mode)
    sender = Sender(header_message(37, mode) + b"".join(frame_messages(frames, mode)), chunks)
    for rx in receiver(sender, frame_stack_size=8, slots=3):
        assert rx.wait_for_header(5.0).nimages == 37
        got = np.concatenate(list(rx.frames(37, np.uint32)))
        assert np.array_equal(got, frames)
        assert rx.frames_received == 37 and rx.frames_dropped == 0


def test_partial_stack_is_flushed_on_the_deadline():
    """A sender pausing 0.2 s after every 3 frames: stacks of 3 come out before the slot of 8 is full."""
    frames = frames_for(2, 12, "U16")
    msgs = frame_messages(frames, "U16")
    head = header_message(12, "U16")
    sender = Sender(head + b"".join(msgs), (len(head),) + (len(msgs[0]) * 3,) * 4, pause=0.2)
    for rx in receiver(sender, frame_stack_size=8, slots=3, flush_s=0.05):
        rx.wait_for_header(5.0)
        arrays = list(rx.frames(12, np.uint32))
        assert np.array_equal(np.concatenate(arrays), frames)
        assert max(len(a) for a in arrays) <= 3


def test_a_trickle_of_frames_is_flushed_on_the_deadline_too():
    """A frame every 15 ms, each gap shorter than the 50 ms deadline: a block read waits in the kernel for
    the whole slot (MSG_WAITALL) and comes back at the deadline with what came; those frames are handed
    on then, not when the slot of 8 is full."""
    frames = frames_for(3, 12, "U16")
    msgs = frame_messages(frames, "U16")
    head = header_message(12, "U16")
    sender = Sender(head + b"".join(msgs), (len(head),) + (len(msgs[0]),) * 12, pause=0.015)
    for rx in receiver(sender, frame_stack_size=8, slots=3, flush_s=0.05):
        rx.wait_for_header(5.0)
        arrays = list(rx.frames(12, np.uint32))
        assert np.array_equal(np.concatenate(arrays), frames)
        assert max(len(a) for a in arrays) < 8


@pytest.mark.parametrize("chunks", [(1 << 20,), (5, 4000)])
def test_abort_inside_a_block_then_the_next_acquisition(chunks):
    """A new acquisition header after 5 of 10 frames, the new acquisition's 3 frames in the same reads."""
    first, second = frames_for(3, 5, "U16"), frames_for(4, 3, "R12")
    stream = (header_message(10, "U16") + b"".join(frame_messages(first, "U16")) + header_message(3, "R12")
              + b"".join(frame_messages(second, "R12")))
    sender = Sender(stream, chunks)
    for rx in receiver(sender, frame_stack_size=8, slots=3):
        rx.wait_for_header(5.0)
        got: list[np.ndarray] = []
        with pytest.raises(AcquisitionError, match="aborted after 5 of 10"):
            for a in rx.frames(10, np.uint32):
                got.append(a)
        assert np.array_equal(np.concatenate(got), first)
        assert rx.wait_for_header(5.0).nimages == 3
        assert np.array_equal(np.concatenate(list(rx.frames(3, np.uint32))), second)


def test_a_foreign_message_where_a_frame_belongs_is_an_error():
    frames = frames_for(5, 4, "U16")
    msgs = frame_messages(frames, "U16")
    sender = Sender(header_message(8, "U16") + b"".join(msgs[:3]) + mpx_message(b"XYZ" * 20) + msgs[3], (1 << 20,))
    for rx in receiver(sender, frame_stack_size=8, slots=3):
        rx.wait_for_header(5.0)
        with pytest.raises(AcquisitionError, match=r"a message of 60 bytes where a frame of \d+ bytes was expected "
                                                   r"\(frame 4\)"):
            list(rx.frames(8, np.uint32))


def test_sender_closing_inside_a_frame_is_an_error():
    frames = frames_for(6, 4, "U16")
    msgs = frame_messages(frames, "U16")
    sender = Sender(header_message(8, "U16") + b"".join(msgs[:3]) + msgs[3][:100], (1 << 20,), close=True)
    for rx in receiver(sender, frame_stack_size=8, slots=3):
        rx.wait_for_header(5.0)
        with pytest.raises(AcquisitionError, match="inside frame 4 of 8"):
            list(rx.frames(8, np.uint32))
