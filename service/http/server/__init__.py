"""The room where uvicorn's internals are used: everything else in ``service.http`` is plain ASGI.

uvicorn has no public option for what a production tokenizer server needs (bounded header blocks and read
deadlines, a drain that loses nothing, a server that lives exactly as long as its owners), so these modules
override or call a few of its internals, each kept only because a test against a real server fails without
it. ``pyproject.toml`` pins the uvicorn release those tests ran on; ``tests/http/test_uvicorn_internals.py`` fails
on any other, and on one where an internal below moved.

- :mod:`.running`: running the app under uvicorn with a graceful drain on SIGTERM;
- :mod:`.protocol`: uvicorn's httptools protocol with the HTTP/1.1 limits it lacks;
- :mod:`.listening`: closing a listener without resetting accepted connections;
- :mod:`.owners`: a private server that stops when the processes it works for are gone.

Public options where they do the job: ``timeout_keep_alive`` (idle keep-alive connections),
``timeout_graceful_shutdown`` (bounds uvicorn's own shutdown), ``http=`` the guarded protocol class and
``ws="none"``, ``h11_max_incomplete_event_size`` (the h11 protocol, for comparison only). Where they do not:
``limit_concurrency`` answers 503 in its own shape on a connection already accepted, so idle connections still
take descriptors without bound (the connection limit's test); ``h11_max_incomplete_event_size`` bounds h11's
header block only (a 400, no deadlines, ~5x the CPU per request); ``timeout_graceful_shutdown`` alone closes
the listener at once (resetting its accept queue), with no 503 window and the signal raised again at exit.

Kept, each with the test that fails without it:

- ``Server.run(sockets)``: test_a_port_in_use_fails_at_once_before_the_tokenizer_loads (bound before the
  load), test_serve_replicas_answers_on_its_port_and_drains_every_replica_on_sigterm (two listeners)
- ``Server.serve(sockets)`` (for the loop), ``Server.handle_exit(sig, frame)``:
  test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly
- ``Server.servers``: test_sigterm_under_32_reconnecting_clients_resets_nothing_and_exits_in_seconds
- ``Server.should_exit``: test_connections_waiting_in_the_accept_queue_when_the_listener_closes_are_answered
- ``HttpToolsProtocol.connection_made(transport)``, ``HttpToolsProtocol.connection_lost(exc)``:
  test_connections_beyond_the_limit_are_refused_and_logged
- ``HttpToolsProtocol.data_received(data)``, ``HttpToolsProtocol.parser``:
  test_pipelined_requests_are_answered_before_a_malformed_one
- ``HttpToolsProtocol._unset_keepalive_if_required()``, ``HttpToolsProtocol.on_message_complete()``:
  test_the_keep_alive_timeout_and_the_read_deadlines_each_time_only_their_own_wait
- ``HttpToolsProtocol.on_message_begin()``: test_slow_headers_and_a_slow_body_get_408_and_are_closed
- ``HttpToolsProtocol.on_headers_complete()``: test_the_body_deadline_counts_from_the_end_of_the_headers
- ``HttpToolsProtocol.url``, ``HttpToolsProtocol.headers``: test_a_header_block_over_the_limit_is_431_and_closed
- ``HttpToolsProtocol.on_body(body)``, ``RequestResponseCycle.more_body``:
  test_upgrade_h2c_is_ignored_and_the_body_is_read
- ``HttpToolsProtocol.on_response_complete()``, ``HttpToolsProtocol.pipeline``:
  test_pipelined_requests_are_answered_before_a_malformed_one
- ``HttpToolsProtocol.pause_writing()``, ``FlowControl.write_paused``:
  test_a_client_that_reads_nothing_of_a_large_answer_is_cut_after_the_body_deadline
- ``HttpToolsProtocol.flow``, ``FlowControl.read_paused``:
  test_a_request_queued_behind_a_slower_one_is_not_timed_out_while_the_server_is_not_reading
- ``HttpToolsProtocol.transport``, ``HttpToolsProtocol.cycle``, ``RequestResponseCycle.keep_alive``,
  ``RequestResponseCycle.response_complete``: test_sigterm_under_32_keep_alive_clients_loses_no_request
- ``RequestResponseCycle.transport``, ``FlowControl.resume_reading()``:
  test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly (a close after an answer lingers)
- ``RequestResponseCycle.disconnected``, ``RequestResponseCycle.message_event``:
  test_slow_headers_and_a_slow_body_get_408_and_are_closed

Gone, since no test failed without them (the commit that removed them says what replaced each): the
``shutdown``, ``_start_asgi_task`` and ``resume_writing`` overrides, the keep-alive timeout task, ``server_state``,
``response_started``, and rewriting ``timeout_graceful_shutdown`` while draining.

The serve command uses this room through the names below only.
"""

from .listening import SocketFile
from .owners import CHECK_SECONDS as OWNERS_CHECK_SECONDS
from .owners import OwnersWatch
from .protocol import ConnectionGuard
from .running import bind_listener, bind_unix_listener, connection_guard, run

__all__ = [
    "run",
    "bind_listener",
    "bind_unix_listener",
    "connection_guard",
    "ConnectionGuard",
    "SocketFile",
    "OwnersWatch",
    "OWNERS_CHECK_SECONDS",
]
