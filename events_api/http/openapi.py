"""The OpenAPI 3.1 document: Litestar derives paths, parameters and responses from the handlers;
request and raw response bodies (which the handlers decode themselves, to control limits, media
types and error pointers) come from the structs named in each route's `opt`."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from events_api import __version__
from events_api.models import EVENT_TYPE_PATTERN, MAX_EVENT_TYPE_LENGTH, TENANT_ID_PATTERN

REF = "#/components/schemas/{name}"
# What the path and query parameters look like. The handlers check them where they are used (an id of
# the wrong form is simply not found); the document states the form so that clients and schemathesis
# generate values the API accepts.
PARAMETER_SCHEMAS: dict[str, dict[str, Any]] = {
    "tenant": {"pattern": TENANT_ID_PATTERN},
    "key_id": {"pattern": r"^key_[0-9a-z]{16}$"},
    "event_type": {"pattern": EVENT_TYPE_PATTERN, "maxLength": MAX_EVENT_TYPE_LENGTH},
    "event_id": {"pattern": r"^evt_[0-7][0-9A-HJKMNP-TV-Z]{25}$"},
    "version": {"pattern": r"^([1-9][0-9]{0,8}|latest)$"},
    "idempotency_key": {"pattern": r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"},
}


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Events API",
        version=__version__,
        description="A durable, idempotent HTTP outbox in front of Kafka. Errors are RFC 9457 problem+json.",
        security=[{"bearer": []}],
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="A tenant API key (`evk_…`) or the platform admin token.",
                )
            }
        ),
        create_examples=False,
        render_plugins=[],
        path="/openapi",
    )


def openapi_document(app: Litestar) -> dict[str, Any]:
    document = app.openapi_schema.to_schema()
    extra: list[tuple[dict[str, Any], str, type[Any]]] = []
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            for method in handler.http_methods:
                operation = document["paths"].get(route.path_format, {}).get(method.lower())
                if operation is None:
                    continue
                for parameter in operation.get("parameters", []):
                    if parameter["in"] in ("path", "query") and parameter["name"] in PARAMETER_SCHEMAS:
                        parameter["schema"] = _with_form(parameter["schema"], PARAMETER_SCHEMAS[parameter["name"]])
                if auth := handler.opt.get("auth"):
                    operation["x-auth"] = copy.deepcopy(auth)  # no YAML anchors between operations
                for response in operation.get("responses", {}).values():
                    # Litestar collects response headers in a set: sort them so the document is stable.
                    if "headers" in response:
                        response["headers"] = dict(sorted(response["headers"].items()))
                if body := handler.opt.get("request_body"):
                    extra.append((operation, "request", body))
                if body := handler.opt.get("response_body"):
                    extra.append((operation, str(handler.status_code), body))
    _, components = msgspec.json.schema_components([t for _, _, t in extra], ref_template=REF)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in components.items():
        schemas.setdefault(name, schema)
    for operation, where, struct in extra:
        ref = {"$ref": REF.format(name=struct.__name__)}
        if where == "request":
            media_types = ["application/json"]
            if struct.__name__ == "EventIn":
                media_types.append("application/cloudevents+json")
            operation["requestBody"] = {
                # Optional when every member has a default (the body may then be left out).
                "required": len(struct.__struct_defaults__) < len(struct.__struct_fields__),
                "content": {m: {"schema": ref if m == "application/json" else {"type": "object"}} for m in media_types},
            }
        else:
            operation["responses"][where]["content"] = {"application/json": {"schema": ref}}
    return document


def _with_form(schema: dict[str, Any], form: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema with the form added to its string branch (Litestar writes `oneOf` for optionals)."""
    if "oneOf" in schema:
        return {**schema, "oneOf": [_with_form(s, form) if s.get("type") == "string" else s for s in schema["oneOf"]]}
    return {**schema, **form}
