"""Events API: a durable, idempotent HTTP outbox in front of Kafka."""

__version__ = "0.1.0"
