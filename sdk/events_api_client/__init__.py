"""Python client of the Events API (outbox as a service).

`EventsClient` (blocking) and `AsyncEventsClient` (asyncio) publish events with one idempotency key per
call, reused on every retry, so a retried publish never stores an event twice. Errors are typed
(`EventsApiError` and its subclasses). Opt-in: a local durable spool for outages (`spool_path=`), and
`events_api_client.outbox` for staging events in your own database transaction (needs the
`sqlalchemy` extra).
"""

from events_api_client.async_client import AsyncEventsClient
from events_api_client.client import EventsClient
from events_api_client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    EventsApiError,
    FieldError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    UnavailableError,
    ValidationError,
)
from events_api_client.models import (
    BatchResult,
    DeadLetter,
    Event,
    EventStatus,
    FlushReport,
    KafkaCoordinates,
    LandingCheck,
    NextStep,
    PublishResult,
    SchemaRegistered,
)
from events_api_client.retry import RetryPolicy
from events_api_client.spool import Spool, SpooledRequest
from events_api_client.version import __version__

__all__ = [
    "AsyncEventsClient",
    "AuthenticationError",
    "BadRequestError",
    "BatchResult",
    "ConflictError",
    "DeadLetter",
    "Event",
    "EventStatus",
    "EventsApiError",
    "EventsClient",
    "FieldError",
    "FlushReport",
    "KafkaCoordinates",
    "LandingCheck",
    "NextStep",
    "NotFoundError",
    "PermissionDeniedError",
    "PublishResult",
    "RateLimitedError",
    "RetryPolicy",
    "SchemaRegistered",
    "Spool",
    "SpooledRequest",
    "UnavailableError",
    "ValidationError",
    "__version__",
]
