"""Tier 3: a fuzzer over the OpenAPI schema against a real server (schemathesis, bounded in examples).

Every operation is driven with bodies, headers and values generated from the schema -- valid ones and
deliberately invalid ones -- and every answer must be a documented status with the documented media type and
body shape, and never a 5xx. ``FUZZ_EXAMPLES`` raises the examples per operation for a longer run
(``make fuzz``).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.wire import (
    CHAT_ENCODE_PATH,
    CHAT_RENDER_PATH,
    DECODE_PATH,
    ENCODE_PATH,
    HEALTH_PATH,
    INFO_PATH,
    LENGTHS_PATH,
    METRICS_PATH,
    READY_PATH,
    TOKENIZE_PATH,
)
from testkit.servers import ServerProcess

pytestmark = pytest.mark.slow  # the OpenAPI schema fuzzed against a server of its own: `make test-fast` leaves it to CI

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory, chat_tokenizer_dirs):
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    # the default tokenizer with chat templates (named ones too), so that fuzzed conversations are rendered
    model = ("--model", str(chat_tokenizer_dirs["wordpiece_default"]))
    with ServerProcess(*model, "--api-key", "fuzz-key", "--memory-budget-mib", "256", log_path=log) as server:
        schema = schemathesis.openapi.from_url(
            server.url + "/openapi.json", headers={"Authorization": "Bearer fuzz-key"}
        )
        schema.config.update(base_url=server.url, headers={"Authorization": "Bearer fuzz-key"})
        yield schema
    assert "Traceback" not in log.read_text(), "the server logged an unexpected error"


SEEN: dict[str, set[int]] = {}
_TOKEN = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
# What a schema does not say but clients send: media types, encodings, auth schemes, in any case.
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Content-Type": st.one_of(
            st.sampled_from(
                [
                    "application/json",
                    "APPLICATION/JSON; charset=UTF-8",
                    "application/json; charset=utf-16",
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data; boundary=x",
                    "",
                ]
            ),
            _TOKEN,
        ),
        "Accept": st.one_of(
            st.sampled_from(
                [
                    "application/vnd.safetensors",
                    "application/vnd.safetensors;q=0",
                    "APPLICATION/VND.SAFETENSORS",
                    "text/html, */*;q=0.8",
                    "application/json;q=0, application/vnd.safetensors;q=0.5",
                ]
            ),
            _TOKEN,
        ),
        "Content-Encoding": st.sampled_from(["gzip", "identity", "br", "x-unknown"]),
        "Authorization": st.sampled_from(["bearer fuzz-key", "BEARER fuzz-key", "Bearer wrong", "Basic Zm9v", ""]),
    },
)
OPERATIONS = [
    ("POST", ENCODE_PATH),
    ("POST", LENGTHS_PATH),
    ("POST", TOKENIZE_PATH),
    ("POST", DECODE_PATH),
    ("POST", CHAT_ENCODE_PATH),
    ("POST", CHAT_RENDER_PATH),
    ("GET", INFO_PATH),
    ("GET", HEALTH_PATH),
    ("GET", READY_PATH),
    ("GET", METRICS_PATH),
]


def test_the_fuzzed_operations_are_every_operation(api_schema):
    documented = {(op.method.upper(), op.path) for op in (r.ok() for r in api_schema.get_all_operations())}
    assert documented == set(OPERATIONS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method, path", OPERATIONS)
def test_every_answer_is_documented_and_none_is_a_server_error(api_schema, method, path):
    operation = api_schema[path][method]

    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    cases = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))

    @given(case=cases, headers=HEADERS)
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def fuzz(case, headers):
        case.headers = {**(case.headers or {}), **headers}
        response = case.call_and_validate(checks=CHECKS, timeout=30)
        SEEN.setdefault(path, set()).add(response.status_code)

    fuzz()
    print(path, sorted(SEEN[path]))
