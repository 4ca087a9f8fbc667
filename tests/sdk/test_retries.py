"""Retries against a flaky front of the real server: one key on every attempt, exactly one event stored,
`Retry-After` honoured, and a lost answer resolved by asking the API. Then the retry rules themselves,
as pure functions."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from events_api_client import Event, NextStep, RateLimitedError, RetryPolicy, UnavailableError
from events_api_client.errors import error_from_response
from events_api_client.retry import Attempts, is_transient

from tests.sdk.conftest import FAST, Opener, Tenant, order, stored_events
from tests.sdk.flaky_front import Act, flaky_front, problem


async def test_503s_then_a_lost_answer_store_exactly_one_event(
    server: str, api_tenant: Tenant, open_client: Opener, sql: psycopg.Connection[Any]
) -> None:
    unavailable = problem(503, "storage-unavailable", retry_after="0")
    with flaky_front(server, unavailable, unavailable, Act.FORWARD_THEN_DROP) as front:
        async with open_client(front.url, api_tenant.key) as client:
            result = await client.publish("order.created", order(1))
        # The third attempt stored the event but its answer was lost; the fourth learns it from the API.
        assert result.replayed
        assert len(front.seen) == 4
        assert front.keys() == [result.idempotency_key] * 4
    assert stored_events(sql, api_tenant.id) == 1
    async with open_client(server, api_tenant.key) as client:
        found = await client.find_event(result.idempotency_key)
        assert found is not None
        assert found.event_id == result.event_id


async def test_a_batch_keeps_its_key_across_attempts(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    with flaky_front(server, Act.DROP, Act.FORWARD_THEN_DROP) as front:
        async with open_client(front.url, api_tenant.key) as client:
            batch = await client.publish_batch([Event("order.created", order(n)) for n in range(2)])
        assert batch.replayed
        assert len(batch.events) == 2
        assert front.keys() == [batch.idempotency_key] * 3


async def test_retry_after_from_the_front_is_honoured(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    with flaky_front(server, problem(429, "rate-limited", retry_after="1")) as front:
        async with open_client(front.url, api_tenant.key) as client:
            result = await client.publish("order.created", order(1))
        assert not result.replayed
        first, second = front.seen
        assert second.at - first.at >= 0.9  # FAST would have waited at most 0.01 s
        assert first.idempotency_key == second.idempotency_key


async def test_a_key_in_flight_is_waited_for(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    with flaky_front(server, problem(409, "idempotency-key-in-flight", retry_after="0")) as front:
        async with open_client(front.url, api_tenant.key) as client:
            result = await client.publish("order.created", order(1))
        assert result.status == "accepted"
        assert len(front.seen) == 2


async def test_after_a_timeout_the_api_says_whether_the_event_landed(
    server: str, api_tenant: Tenant, open_client: Opener, sql: psycopg.Connection[Any]
) -> None:
    retry = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01, total_timeout=5)
    with flaky_front(server, Act.FORWARD_THEN_STALL, Act.FORWARD_THEN_STALL) as front:
        async with open_client(front.url, api_tenant.key, timeout=0.3, retry=retry) as client:
            with pytest.raises(UnavailableError) as lost:
                await client.publish("order.created", order(1))
            error = lost.value
            assert (error.status, error.outcome_unknown, error.retriable, error.attempts) == (None, True, True, 2)
            assert error.idempotency_key is not None
            assert front.keys() == [error.idempotency_key] * 2

            landed = await client.check_landed(error.idempotency_key)
            assert landed.landed
            assert landed.next_step is NextStep.DONE
            assert len(landed.events) == 1
    assert stored_events(sql, api_tenant.id) == 1


async def test_when_nothing_landed_republishing_under_the_same_key_is_safe(
    server: str, api_tenant: Tenant, open_client: Opener, sql: psycopg.Connection[Any]
) -> None:
    down = problem(502, "bad-gateway")
    with flaky_front(server, *[down] * FAST.max_attempts) as front:
        async with open_client(front.url, api_tenant.key) as client:
            with pytest.raises(UnavailableError) as lost:
                await client.publish("order.created", order(1))
            assert (lost.value.status, lost.value.attempts) == (502, FAST.max_attempts)
            key = lost.value.idempotency_key
            assert key is not None
            landed = await client.check_landed(key)
            assert landed.next_step is NextStep.REPUBLISH_SAME_KEY
            result = await client.publish("order.created", order(1), idempotency_key=key)
            assert (result.status, result.replayed) == ("accepted", False)
    assert stored_events(sql, api_tenant.id) == 1


async def test_redrive_is_not_repeated_after_it_may_have_run(
    server: str, api_tenant: Tenant, open_client: Opener
) -> None:
    """A redrive is not idempotent (a second one answers 404), so a lost answer is reported, not retried."""
    with flaky_front(server, Act.FORWARD_THEN_DROP) as front:
        async with open_client(front.url, api_tenant.key) as client:
            with pytest.raises(UnavailableError) as lost:
                await client.redrive("evt_01M7YHMR0709BNNTSHMGF0ZP84")
            assert lost.value.outcome_unknown
        assert len(front.seen) == 1


# --- the rules, as pure functions ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def response(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> httpx.Response:
    return httpx.Response(status, headers=headers, content=body)


def test_backoff_is_full_jitter_under_an_exponential_ceiling_and_never_below_retry_after() -> None:
    top = RetryPolicy(initial_backoff=0.5, max_backoff=3.0, random=lambda: 1.0)
    assert [top.backoff(n, None) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    bottom = RetryPolicy(initial_backoff=0.5, max_backoff=3.0, random=lambda: 0.0)
    assert bottom.backoff(4, None) == 0.0
    assert bottom.backoff(4, 2.0) == 2.0
    assert top.backoff(1, 0.2) == 0.5


@pytest.mark.parametrize(
    ("failure", "idempotent", "in_flight", "transient"),
    [
        (response(503), True, False, True),
        (response(500), True, False, True),
        (response(504), True, False, True),
        (response(408), True, False, True),
        (response(429), True, False, True),
        (response(409), True, True, True),
        (response(409), True, False, False),  # an incompatible schema is a real conflict
        (response(400), True, True, False),
        (response(401), True, True, False),
        (response(403), True, True, False),
        (response(404), True, True, False),
        (response(413), True, True, False),
        (response(422), True, True, False),
        (httpx.ReadTimeout("slow"), True, False, True),
        (httpx.RemoteProtocolError("dropped"), True, False, True),
        (httpx.ConnectError("refused"), False, False, True),  # never sent: safe for any call
        (httpx.ReadTimeout("slow"), False, False, False),  # may have run: not for a redrive
        (response(502), False, False, False),
        (response(503), False, False, True),
        (response(429), False, False, True),
    ],
)
def test_which_failures_are_retried(
    failure: httpx.Response | httpx.TransportError, idempotent: bool, in_flight: bool, transient: bool
) -> None:
    assert is_transient(failure, idempotent=idempotent, conflict_in_flight=in_flight) is transient


def test_attempts_stop_at_the_limit_and_at_the_time_budget() -> None:
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=3, initial_backoff=1, max_backoff=1, total_timeout=10, clock=clock)
    attempts = Attempts(policy, idempotent=True, conflict_in_flight=True, idempotency_key="k")
    assert attempts.after_failure(response(503)) <= 1
    assert attempts.after_failure(httpx.ConnectError("refused")) <= 1
    with pytest.raises(UnavailableError) as third:
        attempts.after_failure(response(503))
    assert (third.value.attempts, third.value.idempotency_key, third.value.retriable) == (3, "k", True)

    budget = Attempts(policy, idempotent=True, conflict_in_flight=True, idempotency_key="k")
    with pytest.raises(RateLimitedError) as too_long:  # waiting 60 s would overrun the 10 s budget: give up now
        budget.after_failure(response(429, {"Retry-After": "60"}))
    assert too_long.value.retry_after == 60
    assert not too_long.value.outcome_unknown  # a 429 stored nothing


def test_a_front_that_does_not_speak_problem_json_still_gives_a_typed_error() -> None:
    error = error_from_response(response(502, {"Content-Type": "text/html"}, b"<html>Bad gateway</html>"))
    assert isinstance(error, UnavailableError)
    assert (error.status, error.title, error.type) == (502, "Bad Gateway", "about:blank")
    assert "Bad gateway" in error.detail
    assert error_from_response(response(503, {"Retry-After": "soon"})).retry_after is None
    assert error_from_response(response(503, {"Retry-After": "2"})).retry_after == 2.0
