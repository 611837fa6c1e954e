"""The room where uvicorn's internals are used (everything else in ``service.http`` is plain ASGI), for what
uvicorn has no public option for: :mod:`.protocol` (bounded header blocks, read deadlines), :mod:`.running` and
:mod:`.listening` (a lossless drain), :mod:`.owners` (a server that lives as long as its owners). Each internal is
kept only because a real-server test fails without it; ``pyproject.toml`` pins the uvicorn release they ran on,
and ``tests/http/test_uvicorn_internals.py`` fails on any other, or where one below moved.

Public options used: ``timeout_keep_alive``, ``timeout_graceful_shutdown`` (bounds uvicorn's own shutdown),
``http=`` the guarded protocol and ``ws="none"``, ``h11_max_incomplete_event_size`` (h11, comparison only). Not
enough: ``limit_concurrency`` answers 503 in its own shape on an accepted connection (idle ones still take
descriptors without bound); h11's size limit bounds only its header block (a 400, no deadlines, ~5x the CPU);
``timeout_graceful_shutdown`` alone closes the listener at once (resetting its accept queue), with no 503 window
and the signal raised again at exit.

Kept, each with the test that fails without it:

- ``Server.run(sockets)``: test_a_port_in_use_fails_at_once_before_the_tokenizer_loads (bound before the
  load), test_serve_replicas_answers_on_its_port_and_drains_every_replica_on_sigterm (two listeners)
- ``Server.serve(sockets)`` (for the loop), ``Server.handle_exit(sig, frame)``:
  test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly
- ``Server.servers``: test_sigterm_under_32_reconnecting_clients_resets_nothing_and_exits_in_seconds
- ``Server.should_exit``: test_connections_waiting_in_the_accept_queue_when_the_listener_closes_are_answered
- ``HttpToolsProtocol.connection_made(transport)``, ``HttpToolsProtocol.connection_lost(exc)``:
  test_connections_beyond_the_limit_are_refused_and_logged
- ``HttpToolsProtocol.data_received(data)``, ``HttpToolsProtocol.parser``, ``HttpToolsProtocol.on_response_complete()``,
  ``HttpToolsProtocol.pipeline``: test_pipelined_requests_are_answered_before_a_malformed_one
- ``HttpToolsProtocol._unset_keepalive_if_required()``, ``HttpToolsProtocol.on_message_complete()``:
  test_the_keep_alive_timeout_and_the_read_deadlines_each_time_only_their_own_wait
- ``HttpToolsProtocol.on_message_begin()``, ``RequestResponseCycle.disconnected``,
  ``RequestResponseCycle.message_event``: test_slow_headers_and_a_slow_body_get_408_and_are_closed
- ``HttpToolsProtocol.on_headers_complete()``: test_the_body_deadline_counts_from_the_end_of_the_headers
- ``HttpToolsProtocol.url``, ``HttpToolsProtocol.headers``: test_a_header_block_over_the_limit_is_431_and_closed
- ``HttpToolsProtocol.on_body(body)``, ``RequestResponseCycle.more_body``:
  test_upgrade_h2c_is_ignored_and_the_body_is_read
- ``HttpToolsProtocol.pause_writing()``, ``FlowControl.write_paused``:
  test_a_client_that_reads_nothing_of_a_large_answer_is_cut_after_the_body_deadline
- ``HttpToolsProtocol.flow``, ``FlowControl.read_paused``:
  test_a_request_queued_behind_a_slower_one_is_not_timed_out_while_the_server_is_not_reading
- ``HttpToolsProtocol.transport``, ``HttpToolsProtocol.cycle``, ``RequestResponseCycle.keep_alive``,
  ``RequestResponseCycle.response_complete``: test_sigterm_under_32_keep_alive_clients_loses_no_request
- ``RequestResponseCycle.transport``, ``FlowControl.resume_reading()``:
  test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly (a close after an answer lingers)

Gone, as no test failed without them (see their commit): the ``shutdown``, ``_start_asgi_task`` and
``resume_writing`` overrides, the keep-alive timeout task, ``server_state``, ``response_started``, rewriting
``timeout_graceful_shutdown`` while draining. The serve command uses the names below only.
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
