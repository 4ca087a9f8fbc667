"""The log writer never blocks its callers: with a stream nobody reads, lines past MAX_QUEUED are dropped and
counted, and once the stream is read again the writer says how many were lost."""

from __future__ import annotations

import json
import os
import threading
import time

from events_api.logs import MAX_QUEUED, LineWriter


def test_a_blocked_stream_drops_lines_instead_of_blocking_and_reports_them() -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w", buffering=1)
    writer = LineWriter(stream)
    try:
        line = json.dumps({"msg": "x" * 200}) + "\n"
        started = time.monotonic()
        for _ in range(MAX_QUEUED + 2_000):  # the pipe holds a few hundred of these; nobody reads it yet
            writer.put(line)
        assert time.monotonic() - started < 5, "put() waited on the stream"
        assert writer.dropped_lines >= 2_000 - 1_000  # minus what the pipe and the writer thread took

        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.extend(iter(lambda: os.read(read_end, 65536), b"")))
        reader.start()
        writer.close()  # writes what is queued, then the note
        stream.close()
        reader.join(timeout=10)
        lines = b"".join(received).decode().splitlines()
        notes = [json.loads(text) for text in lines if "dropped" in text]
        assert [(n["level"], n["msg"]) for n in notes] == [
            ("warning", f"{writer.dropped_lines} log line(s) dropped: stderr was not read")
        ]
        assert len(lines) - len(notes) == MAX_QUEUED + 2_000 - writer.dropped_lines
    finally:
        os.close(read_end)
