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

REF = "#/components/schemas/{name}"


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
