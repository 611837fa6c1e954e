"""The error kinds only the web layer meets (a request gone wrong as HTTP), raised as the engine's
:class:`service.engine.errors.ServiceError`: both share the status table ``service.wire.ERROR_TYPES`` (keyed by a
kind's value, the ``error_type``) and one body shape (:mod:`service.http.responses`)."""

from __future__ import annotations

import enum

from ..engine.errors import ErrorKind


class HttpErrorKind(str, enum.Enum):
    MALFORMED_HTTP = "malformed_http"  # not HTTP/1.1 the parser accepts (the connection is closed)
    HEADERS_TOO_LARGE = "headers_too_large"  # the request line and headers exceed the limit
    REQUEST_TIMEOUT = "request_timeout"  # the client took too long to send its headers or body
    UNAUTHORIZED = "unauthorized"  # missing or wrong API key
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"  # the result cannot be represented in the requested format
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # a body that is not (uncompressed, UTF-8) JSON
    CLIENT_GONE = "client_gone"  # the client disconnected before the answer: nobody to tell


#: Every kind of error the service answers with.
AnyErrorKind = ErrorKind | HttpErrorKind
