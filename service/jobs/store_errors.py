"""What a store's error means, whatever its vendor: missing, refused (credentials, set-up) or worth retrying, and
how it reads in one line. Matched by class name and HTTP status, never by importing the stores' packages."""

from __future__ import annotations

# Errors that retrying cannot cure, whatever their store: what a refusal is translated to by fsspec's stores.
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError, ValueError)
#: The stores' own errors about credentials, by (module, class): matched without importing packages a job may lack.
_CREDENTIAL_ERRORS = frozenset(
    {
        ("botocore.exceptions", "NoCredentialsError"),
        ("botocore.exceptions", "PartialCredentialsError"),
        ("botocore.exceptions", "CredentialRetrievalError"),
        ("botocore.exceptions", "UnknownCredentialError"),
        ("azure.core.exceptions", "ClientAuthenticationError"),
        ("azure.identity._exceptions", "CredentialUnavailableError"),
        ("google.auth.exceptions", "DefaultCredentialsError"),
    }
)
#: ... and about the set-up (no region, a parameter the store's API refuses): refusals too, without a credentials hint.
_SETUP_ERRORS = frozenset({("botocore.exceptions", "NoRegionError"), ("botocore.exceptions", "ParamValidationError")})
# Client errors (4xx) that retrying may cure: a request timeout, throttling.
_TRANSIENT_CLIENT_STATUSES = (408, 429)
_CLIENT_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google", "azure", "s3fs", "gcsfs")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a store's client raised untranslated: azure-core's ``HttpResponseError.status_code``
    (adlfs passes most on), gcsfs's ``HttpError.code``, aiohttp's ``ClientResponseError.status``."""
    for attribute in ("status_code", "code", "status"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    return None


def missing_object(exc: BaseException) -> bool:
    """A missing object, bucket or container, or a 404 its client (adlfs) did not translate."""
    return isinstance(exc, FileNotFoundError) or http_status(exc) == 404


def transient(exc: BaseException) -> bool:
    """Whether retrying may cure ``exc``: a dropped or refused connection, a timeout, throttling, a server error."""
    if isinstance(exc, _PERMANENT) or missing_object(exc) or _one_of(exc, _CREDENTIAL_ERRORS | _SETUP_ERRORS):
        return False
    status = http_status(exc)
    if status is not None and 400 <= status < 500 and status not in _TRANSIENT_CLIENT_STATUSES:
        return False  # a refusal (401, 403...) answered as such, whatever the client's exception
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return True
    return type(exc).__module__.split(".")[0] in _CLIENT_MODULES


#: What a refusal about credentials or permissions adds: where the credentials come from.
CREDENTIALS_HINT = (
    "; check the credentials (the store's own chain: environment variables, a profile, the instance's or pod's "
    "identity) and that they may access this URL"
)


def _one_of(exc: BaseException, classes: frozenset[tuple[str, str]]) -> bool:
    return any((kind.__module__, kind.__name__) in classes for kind in type(exc).__mro__)


def about_credentials(exc: BaseException) -> bool:
    return _one_of(exc, _CREDENTIAL_ERRORS) or http_status(exc) in (401, 403)


def describe_error(exc: BaseException) -> str:
    """What the store answered, in one line: class and first line of the message (never the options)."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
