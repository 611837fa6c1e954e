"""How the jobs' storage sorts a store's errors -- retried (a dropped connection, throttling, a server error) or
a refusal that stops at once (missing credentials, a bad set-up, access denied, nothing there) -- on the errors the
stores' own packages raise, built here from those packages (botocore, azure-core, azure-identity, google-auth,
aiohttp); and what Storage.call does with each."""

from __future__ import annotations

import pytest

from service.jobs.errors import StorageError
from service.jobs.store_errors import CREDENTIALS_HINT, transient
from service.jobs.stores import Storage


def store_errors() -> list[tuple[str, BaseException, bool, bool]]:
    """(what, the error, retried?, said to be about credentials?)"""
    import aiohttp
    import botocore.exceptions as boto
    from azure.core import exceptions as azure
    from azure.identity import CredentialUnavailableError
    from google.auth import exceptions as google

    class Answer:  # what azure-core's HttpResponseError reads of a response
        def __init__(self, status: int) -> None:
            self.status_code, self.reason, self.headers = status, "", {}

        def text(self) -> str:
            return ""

    return [
        ("botocore: no credentials", boto.NoCredentialsError(), False, True),
        ("botocore: partial credentials", boto.PartialCredentialsError(provider="env", cred_var="KEY"), False, True),
        ("botocore: no region", boto.NoRegionError(), False, False),
        ("botocore: a parameter refused", boto.ParamValidationError(report="bad bucket name"), False, False),
        ("botocore: cannot connect", boto.EndpointConnectionError(endpoint_url="http://store"), True, False),
        ("botocore: read timeout", boto.ReadTimeoutError(endpoint_url="http://store"), True, False),
        ("azure: authentication", azure.ClientAuthenticationError("no"), False, True),
        ("azure-identity: no credential", CredentialUnavailableError("none of the chain"), False, True),
        ("azure: a request failed", azure.ServiceRequestError("reset"), True, False),
        ("azure: 403", azure.HttpResponseError(response=Answer(403)), False, True),
        ("azure: 503", azure.HttpResponseError(response=Answer(503)), True, False),
        ("azure: 429", azure.HttpResponseError(response=Answer(429)), True, False),
        ("google-auth: no default credentials", google.DefaultCredentialsError("none"), False, True),
        ("google-auth: transport", google.TransportError("reset"), True, False),
        ("aiohttp: connection", aiohttp.ClientConnectionError("reset"), True, False),
        ("a connection reset", ConnectionResetError("reset"), True, False),
        ("permission denied", PermissionError("denied"), False, True),
    ]


@pytest.mark.parametrize("case", store_errors(), ids=lambda case: case[0])
def test_each_stores_errors_are_retried_or_refused_as_they_should(case):
    what, error, retried, about_credentials = case
    assert transient(error) is retried, what
    storage = Storage(retry_deadline=0)  # one try: what a refusal says, or that retrying gave up at once
    with pytest.raises(StorageError) as refused:
        storage.call("s3://bucket/key", lambda: (_ for _ in ()).throw(error))
    said = str(refused.value)
    if retried:
        assert "failed after retrying for 0 s (--retry-deadline)" in said, said
    else:
        assert "the store refused" in said and (CREDENTIALS_HINT in said) is about_credentials, said


def test_a_missing_object_is_not_found_and_a_missing_bucket_is_said_when_writing():
    storage = Storage(retry_deadline=0)
    with pytest.raises(FileNotFoundError):
        storage.call("s3://bucket/key", lambda: (_ for _ in ()).throw(FileNotFoundError("key")))
    with pytest.raises(StorageError, match="does the bucket exist"):
        storage.call("s3://bucket/key", lambda: (_ for _ in ()).throw(FileNotFoundError("bucket")), writing=True)
