"""Request ids and structured (JSON) logs, carried from the web request into Celery tasks.

Every request gets an id (the caller's `X-Request-ID` if it is sane, else a new one), echoed
in the response and attached to every log line; a task enqueued while handling the request
carries it in its headers, so the worker's log lines show the same id.
"""

import contextvars
import json
import logging
import re
import uuid

from celery import signals as celery_signals

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
HEADER = "X-Request-ID"
_VALID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get(HEADER, "")
        request_id = incoming if _VALID.match(incoming) else new_request_id()
        request.request_id = request_id
        token = request_id_var.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response[HEADER] = request_id
        return response


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", request_id_var.get()),
        }
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


@celery_signals.before_task_publish.connect
def _attach_request_id(headers=None, **kwargs):
    if headers is not None and "request_id" not in headers:
        headers["request_id"] = request_id_var.get()


@celery_signals.task_prerun.connect
def _adopt_request_id(task=None, **kwargs):
    request_id = getattr(task.request, "request_id", None) if task is not None else None
    request_id_var.set(request_id or new_request_id())
