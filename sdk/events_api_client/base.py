"""What the sync and async clients share: their settings, the connection options, and the bookkeeping of
the local spool. Nothing here talks to the API (only to the local spool file); sending is the subclasses'."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from events_api_client.calls import Call
from events_api_client.errors import EventsApiError
from events_api_client.models import FlushReport
from events_api_client.retry import RetryPolicy
from events_api_client.spool import Settled, Spool
from events_api_client.version import __version__

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)


class BaseClient:
    """Settings common to `EventsClient` and `AsyncEventsClient` (see their docstrings)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        spool_path: str | Path | None = None,
        flush_interval: float | None = 5.0,
        limits: httpx.Limits | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("api_key is required")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.flush_interval = flush_interval
        self.spool: Spool | None = Spool(spool_path) if spool_path is not None else None
        # A hint, not the truth (another process may share the file): while the spool holds events, new
        # publishes queue behind them, so that events keep their order and an outage costs one timeout, not
        # one per publish. Read from the file at start, so a restarted process resumes delivering.
        self._backlog = self.spool is not None and self.spool.size() > 0
        self._backlog_lock = threading.Lock()
        self._http_options: dict[str, Any] = {
            "base_url": self.base_url,
            "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": f"events-api-client/{__version__}"},
            "timeout": timeout,
            "limits": limits or httpx.Limits(max_connections=50, max_keepalive_connections=20),
        }
        self._open()

    def _open(self) -> None:
        """The client's own I/O: its pooled HTTP client and, with a spool, its flusher."""
        raise NotImplementedError

    @property
    def spool_size(self) -> int:
        """Events waiting in the local spool (0 without one)."""
        return self.spool.size() if self.spool is not None else 0

    @property
    def _probe_policy(self) -> RetryPolicy:
        """The background flusher tries once per round; its rounds are its retries."""
        return dataclasses.replace(self.retry, max_attempts=1)

    def _require_spool(self) -> Spool:
        if self.spool is None:
            raise RuntimeError("this client has no spool: pass spool_path= to enable it")
        return self.spool

    def _should_spool(self, error: EventsApiError) -> bool:
        """Only a publish that could succeed later is spooled; a refused one (4xx) is the caller's to fix."""
        return self.spool is not None and error.retriable

    def _spool_call(self, call: Call[Any]) -> None:
        assert call.body is not None
        assert call.idempotency_key is not None
        with self._backlog_lock:
            self._require_spool().put(call.path, call.body, call.idempotency_key, call.traceparent)
            self._backlog = True

    def _drained(self) -> int:
        """After a flush found the spool empty: clear the hint, unless a publish was spooled meanwhile (the
        lock orders the two). Returns what waits in the spool now."""
        with self._backlog_lock:
            remaining = self._require_spool().size()
            self._backlog = remaining > 0
            return remaining


class FlushTally:
    """Counts one flush's outcomes; the loop over the spool is the clients' (it does I/O)."""

    def __init__(self) -> None:
        self.counts: Counter[Settled] = Counter()

    def add(self, outcome: Settled) -> bool:
        """Count an outcome; False when the flush should stop here."""
        self.counts[outcome] += 1
        return outcome is not Settled.DEFERRED

    def report(self, remaining: int) -> FlushReport:
        return FlushReport(self.counts[Settled.DELIVERED], self.counts[Settled.REJECTED], remaining)
