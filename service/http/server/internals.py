"""The uvicorn internals this room relies on, as data: each with where it lives in uvicorn, what the room does with
it and the real-server tests that fail without it; and the uvicorn releases they are known to work on.

``tests/http/test_uvicorn_internals.py`` checks every entry against the installed uvicorn (CI runs it at the lowest
and the newest release of :data:`UVICORN_RELEASES`, ``.ci/run``); pyproject.toml's server extra declares the same
range (a test holds them equal), and ``serve`` refuses any other release at start-up, naming it and the range
(``service/extras.py`` checks the installed extra before the web layer is imported). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The uvicorn releases the internals below are known to work on. The lowest is the first on which the internals
#: test passes (0.52.4 writes no Connection: close for a cleared keep-alive; 0.21 has no timeout_graceful_shutdown)
#: and the real-server tests it names pass; the upper bound admits the patch releases of the newest they ran on
#: (0.55.0). To widen it, run those tests on the new release (``.ci/uvicorn-range`` shows how), then change this and
#: pyproject.toml's server extra together.
UVICORN_RELEASES = ">=0.53.0,<0.56"

#: Where each class the entries name lives in uvicorn.
MODULES = {
    "Server": "uvicorn.server",
    "HttpToolsProtocol": "uvicorn.protocols.http.httptools_impl",
    "RequestResponseCycle": "uvicorn.protocols.http.httptools_impl",
    "FlowControl": "uvicorn.protocols.http.flow_control",
}


@dataclass(frozen=True)
class Internal:
    """One internal of uvicorn the room uses: an attribute, or a method with the parameters it takes."""

    owner: str  # the class in uvicorn (a key of MODULES)
    name: str
    parameters: tuple[str, ...] | None  # a method's, after self; None: an attribute
    why: str  # what the room does with it
    tests: tuple[str, ...]  # the tests that fail without it

    @property
    def where(self) -> str:
        return f"{MODULES[self.owner]}.{self.owner}.{self.name}"


_SIGTERM_UNDER_LOAD = "test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly"
_KEEP_ALIVE_DRAIN = "test_sigterm_under_32_keep_alive_clients_loses_no_request"

#: Every internal the room relies on; public options (``Config``'s ``timeout_keep_alive``, ``http=``, ``ws``...)
#: are not listed.
KEPT: tuple[Internal, ...] = (
    Internal(
        "Server",
        "run",
        ("sockets",),
        "serve on listeners bound before the tokenizer loads, one or several",
        (
            "test_a_port_in_use_fails_at_once_before_the_tokenizer_loads",
            "test_serve_replicas_answers_on_its_port_and_drains_every_replica_on_sigterm",
        ),
    ),
    Internal(
        "Server",
        "serve",
        ("sockets",),
        "overridden: keeps the server's loop, where a signal hands the drain",
        (_SIGTERM_UNDER_LOAD,),
    ),
    Internal("Server", "handle_exit", ("sig", "frame"), "overridden: SIGTERM starts a drain", (_SIGTERM_UNDER_LOAD,)),
    Internal(
        "Server",
        "servers",
        None,
        "the listeners, kept open while draining",
        ("test_sigterm_under_32_reconnecting_clients_resets_nothing_and_exits_in_seconds",),
    ),
    Internal(
        "Server",
        "should_exit",
        None,
        "set once the drain is done",
        ("test_connections_waiting_in_the_accept_queue_when_the_listener_closes_are_answered",),
    ),
    Internal(
        "HttpToolsProtocol",
        "connection_made",
        ("transport",),
        "overridden: admit the connection or refuse it",
        ("test_connections_beyond_the_limit_are_refused_and_logged",),
    ),
    Internal(
        "HttpToolsProtocol",
        "connection_lost",
        ("exc",),
        "overridden: forget the connection",
        ("test_connections_beyond_the_limit_are_refused_and_logged",),
    ),
    Internal(
        "HttpToolsProtocol",
        "data_received",
        ("data",),
        "overridden: header-block limit, malformed requests after pipelined ones",
        ("test_pipelined_requests_are_answered_before_a_malformed_one",),
    ),
    Internal(
        "HttpToolsProtocol",
        "parser",
        None,
        "fed the bytes by our data_received",
        ("test_pipelined_requests_are_answered_before_a_malformed_one",),
    ),
    Internal(
        "HttpToolsProtocol",
        "on_response_complete",
        (),
        "overridden: a deferred error answered once the pipeline is empty",
        ("test_pipelined_requests_are_answered_before_a_malformed_one",),
    ),
    Internal(
        "HttpToolsProtocol",
        "pipeline",
        None,
        "the requests queued behind the running one",
        ("test_pipelined_requests_are_answered_before_a_malformed_one",),
    ),
    Internal(
        "HttpToolsProtocol",
        "_unset_keepalive_if_required",
        (),
        "called by our data_received, as uvicorn's own does",
        ("test_the_keep_alive_timeout_and_the_read_deadlines_each_time_only_their_own_wait",),
    ),
    Internal(
        "HttpToolsProtocol",
        "on_message_complete",
        (),
        "overridden: the read deadline ends with the request",
        ("test_the_keep_alive_timeout_and_the_read_deadlines_each_time_only_their_own_wait",),
    ),
    Internal(
        "HttpToolsProtocol",
        "on_message_begin",
        (),
        "overridden: the header deadline starts",
        ("test_slow_headers_and_a_slow_body_get_408_and_are_closed",),
    ),
    Internal(
        "RequestResponseCycle",
        "disconnected",
        None,
        "set when a deadline passes: the app lets go of the request",
        ("test_slow_headers_and_a_slow_body_get_408_and_are_closed",),
    ),
    Internal(
        "RequestResponseCycle",
        "message_event",
        None,
        "set with disconnected, to wake the app's receive()",
        ("test_slow_headers_and_a_slow_body_get_408_and_are_closed",),
    ),
    Internal(
        "HttpToolsProtocol",
        "on_headers_complete",
        (),
        "overridden: the body deadline counts from here",
        ("test_the_body_deadline_counts_from_the_end_of_the_headers",),
    ),
    Internal(
        "HttpToolsProtocol",
        "url",
        None,
        "counted in the header block's size",
        ("test_a_header_block_over_the_limit_is_431_and_closed",),
    ),
    Internal(
        "HttpToolsProtocol",
        "headers",
        None,
        "counted in the header block's size",
        ("test_a_header_block_over_the_limit_is_431_and_closed",),
    ),
    Internal(
        "HttpToolsProtocol",
        "on_body",
        ("body",),
        "given the body of a request with Upgrade: h2c, read past the parser",
        ("test_upgrade_h2c_is_ignored_and_the_body_is_read",),
    ),
    Internal(
        "RequestResponseCycle",
        "more_body",
        None,
        "whether the body is complete (h2c upgrade, malformed requests)",
        ("test_upgrade_h2c_is_ignored_and_the_body_is_read",),
    ),
    Internal(
        "HttpToolsProtocol",
        "pause_writing",
        (),
        "overridden: a client that reads nothing is cut after the body deadline",
        ("test_a_client_that_reads_nothing_of_a_large_answer_is_cut_after_the_body_deadline",),
    ),
    Internal(
        "FlowControl",
        "write_paused",
        None,
        "whether the client still reads nothing",
        ("test_a_client_that_reads_nothing_of_a_large_answer_is_cut_after_the_body_deadline",),
    ),
    Internal(
        "HttpToolsProtocol",
        "flow",
        None,
        "the connection's flow control",
        ("test_a_request_queued_behind_a_slower_one_is_not_timed_out_while_the_server_is_not_reading",),
    ),
    Internal(
        "FlowControl",
        "read_paused",
        None,
        "no read deadline while the server itself is not reading",
        ("test_a_request_queued_behind_a_slower_one_is_not_timed_out_while_the_server_is_not_reading",),
    ),
    Internal("HttpToolsProtocol", "transport", None, "the connection, closed or aborted by us", (_KEEP_ALIVE_DRAIN,)),
    Internal(
        "HttpToolsProtocol", "cycle", None, "the request running, if any (drain, deadlines)", (_KEEP_ALIVE_DRAIN,)
    ),
    Internal(
        "RequestResponseCycle",
        "keep_alive",
        None,
        "cleared: the answer carries Connection: close while draining",
        (_KEEP_ALIVE_DRAIN,),
    ),
    Internal(
        "RequestResponseCycle",
        "response_complete",
        None,
        "whether the connection is idle (drain, deadlines)",
        (_KEEP_ALIVE_DRAIN,),
    ),
    Internal(
        "RequestResponseCycle",
        "transport",
        None,
        "swapped for a lingering one: a close after an answer lingers",
        (_SIGTERM_UNDER_LOAD,),
    ),
    Internal(
        "FlowControl",
        "resume_reading",
        (),
        "a lingering close reads what the client still sends",
        (_SIGTERM_UNDER_LOAD,),
    ),
)
