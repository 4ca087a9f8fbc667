"""Schemathesis against the running service, driven by its own OpenAPI document: no input may produce a
5xx, and every status code, content type and response body must be documented ones. Bounded so it stays
fast (25 examples per operation)."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from events_api.http.app import build_services, create_app
from events_api.http.openapi import openapi_document
from events_api.settings import Settings
from tests.conftest import ADMIN

# Building the document needs no database.
_OFFLINE = Settings(database_url="postgresql://localhost/none", admin_token="unused")
schema = schemathesis.openapi.from_dict(openapi_document(create_app(services=build_services(_OFFLINE))))


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# "Schema-valid input is accepted" holds where the document describes every rule of the input: the
# parameters of reads and deletes. A body can be schema-valid and still refused with 422 for reasons no
# OpenAPI schema carries: a payload checked against the JSON Schema its tenant registered, a schema that
# must itself be a valid JSON Schema, a key expiry that must lie in the future, a topic name Kafka refuses.
FULLY_DESCRIBED = [positive_data_acceptance, unsupported_method]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_its_contract(case: Any, server: str, live_tenant: dict[str, str]) -> None:
    admin = case.operation.path.startswith("/v1/tenants")
    headers = dict(ADMIN) if admin else {"Authorization": live_tenant["Authorization"]}
    if case.query:
        case.query.pop("cursor", None)  # cursors are opaque tokens the API mints; a made-up one is a 400
    case.call_and_validate(
        base_url=server,
        headers=headers,
        checks=CHECKS + (FULLY_DESCRIBED if case.method in ("GET", "DELETE") else []),
    )
