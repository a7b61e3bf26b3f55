"""Property-based tests from the app's own OpenAPI schema (schemathesis, in-process ASGI).

For every operation, generated requests (valid and invalid) must never get a 5xx, and every
response must match what the schema declares for it: status code, content type, headers
and body schema (422/413/503 error shapes included).
"""

from __future__ import annotations

import pytest
import schemathesis
from attnscope.app.main import create_app
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(settings):
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case):
    case.call_and_validate(checks=CHECKS)
