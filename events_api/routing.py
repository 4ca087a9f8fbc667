"""Where a tenant's events go in Kafka: pure rules for routing (defaults, validation, topic per event).

A tenant's routing has a topic template (`{tenant}` and `{event_type}` are replaced), per-type topic
overrides, a dead-letter topic (template too) and the name of the Kafka cluster the relay should use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from events_api.errors import FieldError, ValidationFailed

DEFAULT_TOPIC_TEMPLATE = "{tenant}.{event_type}"
DEFAULT_DEAD_LETTER_TOPIC = "{tenant}.dead-letter"
DEFAULT_CLUSTER = "default"
MAX_TOPIC_LENGTH = 249  # Kafka's limit
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_TEMPLATE_LITERAL = re.compile(r"[A-Za-z0-9._-]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_CLUSTER = re.compile(r"[a-z][a-z0-9_-]{0,62}")


@dataclass(frozen=True, slots=True)
class Routing:
    topic_template: str = DEFAULT_TOPIC_TEMPLATE
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC
    topics: dict[str, str] = field(default_factory=dict)
    cluster: str = DEFAULT_CLUSTER


def valid_topic(name: str) -> bool:
    return bool(_TOPIC.fullmatch(name)) and name not in {".", ".."}


def _check_template(template: str, pointer: str, errors: list[FieldError]) -> None:
    names = _PLACEHOLDER.findall(template)
    unknown = [n for n in names if n not in {"tenant", "event_type"}]
    literal = _PLACEHOLDER.sub("", template)
    if unknown:
        errors.append(FieldError(pointer, f"unknown placeholder {{{unknown[0]}}}; use {{tenant}} and {{event_type}}"))
    elif not template or not _TEMPLATE_LITERAL.fullmatch(literal) or "{" in literal or "}" in literal:
        errors.append(FieldError(pointer, "a topic may hold only letters, digits, '.', '_' and '-'"))
    elif len(literal) > MAX_TOPIC_LENGTH:
        errors.append(FieldError(pointer, f"a topic is at most {MAX_TOPIC_LENGTH} characters"))


def validate(routing: Routing) -> Routing:
    """ValidationFailed listing every problem, with pointers into the request body."""
    errors: list[FieldError] = []
    _check_template(routing.topic_template, "/topic_template", errors)
    _check_template(routing.dead_letter_topic, "/dead_letter_topic", errors)
    for event_type, topic in routing.topics.items():
        if not valid_topic(topic):
            errors.append(FieldError(f"/topics/{event_type}", "not a valid Kafka topic name"))
    if not _CLUSTER.fullmatch(routing.cluster):
        errors.append(FieldError("/cluster", "a cluster name matches [a-z][a-z0-9_-]*"))
    if errors:
        raise ValidationFailed(f"{len(errors)} problem(s) in the routing", errors=errors)
    return routing


def _render(template: str, tenant_id: str, event_type: str) -> str:
    # Plain replacement: event types cannot hold braces, and str.format would interpret more than these.
    return template.replace("{tenant}", tenant_id).replace("{event_type}", event_type)


def topic_for(routing: Routing, tenant_id: str, event_type: str) -> str:
    return routing.topics.get(event_type) or _render(routing.topic_template, tenant_id, event_type)


def dead_letter_topic_for(routing: Routing, tenant_id: str, event_type: str) -> str:
    return _render(routing.dead_letter_topic, tenant_id, event_type)
