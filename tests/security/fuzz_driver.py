"""Drive schemathesis over every operation of our OpenAPI schema, once per caller role.

Used by tests/security/test_api_fuzz.py (bounded, in CI) and bench/fuzz_api.py (longer run).
Each operation gets its own Hypothesis run with a fixed seed (derandomize) and no shrinking:
every generated case is sent once per caller, each response is checked, and findings are
collected instead of raised, so one run reports every distinct problem with a request count.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import hypothesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass(frozen=True)
class FuzzCaller:
    """One role calling the API: its headers (API key, CSRF) and cookies (session)."""

    role: str
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    operation: str
    role: str
    status: int
    title: str
    curl: str


@dataclass
class FuzzReport:
    requests: int = 0
    server_errors: int = 0
    statuses: Counter = field(default_factory=Counter)
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    operations: int = 0
    seconds: float = 0.0

    @property
    def schema_violations(self) -> int:
        return sum(1 for finding in self.findings.values() if finding.status < 500)

    def record(self, finding: Finding) -> None:
        # One finding per (operation, role, check): the first example that shows it.
        self.findings.setdefault((finding.operation, finding.role, finding.title), finding)

    def summary(self) -> str:
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        return (
            f"fuzz: {self.operations} operations, {self.requests} requests in "
            f"{self.seconds:.1f} s; 5xx responses: {self.server_errors}; distinct findings: "
            f"{len(self.findings)} ({self.schema_violations} schema violations); "
            f"statuses {{{statuses}}}"
        )

    def details(self) -> str:
        return "\n".join(
            f"- {f.operation} as {f.role}: {f.status} {f.title}\n    {f.curl}"
            for f in self.findings.values()
        )


# Values that random generation reaches only rarely but that have broken APIs: NUL bytes
# (PostgreSQL refuses them in text), numbers past 64 bits or a float's range, path tricks.
HOSTILE_STRINGS = ["\x00", "a\x00b", "9" * 40, "-1", "1e309", "NaN", "../../etc/passwd", " "]
# A header value may not start or end with whitespace (the HTTP client refuses to send it).
HOSTILE_HEADERS = [value for value in HOSTILE_STRINGS if value == value.strip()]


def _with_hostile_value(case, hostile):
    """Some cases carry one hostile value in a query parameter or the User-Agent header
    (which the API records with downloads)."""
    if hostile is None:
        return case
    name, value = hostile
    if name == "User-Agent":
        case.headers = {**(case.headers or {}), name: value}
    else:
        case.query = {**(case.query or {}), name: value}
    return case


def _with_real_id(case, real_ids: list[str], choice: int):
    """Half of the cases keep the generated path ids (unknown objects, malformed values);
    the rest use ids of objects that exist, so the views' deeper code runs too."""
    if not case.path_parameters or choice >= len(real_ids):
        return case
    name = next(iter(case.path_parameters))
    case.path_parameters[name] = real_ids[choice]
    return case


CREDENTIAL_HEADERS = {"authorization", "cookie", "x-csrftoken"}
CREDENTIAL_COOKIES = {"sessionid", "csrftoken"}


def _without(values: dict | None, names: set[str]) -> dict | None:
    if values is None:
        return None
    return {key: value for key, value in values.items() if key.lower() not in names}


@contextmanager
def connection_kept_open() -> Iterator[None]:
    """The WSGI handler closes the database connection when a request ends; in-process that
    would close the test's own transaction (Django's test client disconnects it likewise)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def send(case, caller: FuzzCaller, report: FuzzReport, checks=CHECKS) -> None:
    """Send one case as one caller inside a savepoint that is always rolled back, so no
    write leaks into the next request and a failed SQL statement cannot poison the rest.
    Checks run inside it too: some re-send the request (without credentials, with another
    method), and those writes must not leak either."""
    cache.clear()  # throttle counters: fuzzing is not a rate-limit test
    generated_headers, generated_cookies = case.headers, case.cookies
    if caller.headers or caller.cookies:
        # Generated credentials would make this caller someone else: keep them for the
        # anonymous caller only (fuzzing the authentication layer itself).
        case.headers = _without(generated_headers, CREDENTIAL_HEADERS)
        case.cookies = _without(generated_cookies, CREDENTIAL_COOKIES)
    try:
        with connection_kept_open(), transaction.atomic():
            response = case.call(headers=dict(caller.headers), cookies=dict(caller.cookies))
            failures = _failures(case, response, caller, checks)
            transaction.set_rollback(True)
        curl = case.as_curl_command(headers=caller.headers)
    finally:
        case.headers, case.cookies = generated_headers, generated_cookies
    report.requests += 1
    report.statuses[response.status_code] += 1
    if response.status_code >= 500:
        report.server_errors += 1
    if failures:
        report.record(
            Finding(
                operation=case.operation.label,
                role=caller.role,
                status=response.status_code,
                title=failures,
                curl=curl,
            )
        )


def _failures(case, response, caller: FuzzCaller, checks) -> str:
    """The titles of the checks the response fails, or "" if it passes them all."""
    try:
        case.validate_response(
            response,
            checks=checks,
            headers=caller.headers,
            transport_kwargs={"headers": dict(caller.headers), "cookies": dict(caller.cookies)},
        )
    except FailureGroup as group:
        return "; ".join(sorted({failure.title for failure in group.exceptions}))
    return ""


def fuzz_operation(
    operation,
    callers: Iterable[FuzzCaller],
    report: FuzzReport,
    *,
    max_examples: int,
    real_ids: list[str],
    checks=CHECKS,
) -> None:
    callers = list(callers)
    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    choices = st.integers(min_value=0, max_value=max(2 * len(real_ids) - 1, 0))
    query_names = [parameter.name for parameter in operation.query]
    hostile = st.none() | st.tuples(st.just("User-Agent"), st.sampled_from(HOSTILE_HEADERS))
    if query_names:
        hostile |= st.tuples(st.sampled_from(query_names), st.sampled_from(HOSTILE_STRINGS))

    @hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,  # the same requests on every run: no flaky CI
        database=None,
        phases=[Phase.explicit, Phase.generate],  # findings are collected, not shrunk
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=cases, choice=choices, hostile=hostile)
    def exercise(case, choice, hostile):
        case = _with_hostile_value(_with_real_id(case, real_ids, choice), hostile)
        for caller in callers:
            send(case, caller, report, checks)

    exercise()


def fuzz_schema(
    schema,
    callers: Iterable[FuzzCaller],
    *,
    max_examples: int,
    real_ids_for: Callable[[str], list[str]],
    checks=CHECKS,
) -> FuzzReport:
    """Every operation of `schema`, `max_examples` cases each, sent as every caller."""
    report = FuzzReport()
    started = time.monotonic()
    callers = list(callers)
    for result in schema.get_all_operations():
        operation = result.ok()
        report.operations += 1
        fuzz_operation(
            operation,
            callers,
            report,
            max_examples=max_examples,
            real_ids=real_ids_for(operation.path),
            checks=checks,
        )
    report.seconds = time.monotonic() - started
    return report
