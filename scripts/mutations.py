"""The curated mutations: one-line bugs in ``service/`` that the fast test tiers must catch.

Each is a bug someone could plausibly write (or a refactor could bring in): padding on the wrong side, an
off-by-one in truncation or stride, an option dropped on the way to Rust, a batch key too coarse, a shape
lost on the wire, a retry rule or a fingerprint input forgotten. ``scripts/mutants.py`` applies each to a
temporary copy of the repository, one at a time, and runs the tests named in ``caught_by`` (in order, stopping
at the first failure): the mutation must make one of them fail. ``parity`` marks the mutations of the parity
table (issue 14): those must also be caught by the real-server tier alone, ``tests/http/test_server.py``, because
that is what users call.

A mutation is anchored to what it mutates, not to a line: a function by module and qualified name, and a node in it
by its source as ``ast`` reads it (``scripts/anchors.py``), so a reformat, a renumbering or a move of the function
within its module keeps it; a function moved to another module makes the mutation say where it went.
``tests/shipping/test_mutants.py`` checks, in every test run, that each still finds exactly one node, so the list
cannot drift from the code silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scripts.anchors import AnchorError, locate, module_path, replacement, splice

ENGINE = "tests/engine/test_engine.py"
BATCHING = "tests/engine/test_batching.py"
APP = "tests/http/test_app.py"
SERVER = "tests/http/test_server.py"
CLIENT = "tests/client/test_client.py"
RESILIENCE = "tests/client/test_client_resilience.py"
PROTOCOL = "tests/http/test_protocol.py"
CHAT_MASKS = "tests/engine/test_chat_masks.py"
CHAT_PARITY = "tests/engine/test_chat_parity.py"
CHAT_REFUSALS = "tests/engine/test_chat_refusals.py"
CHAT_COLLATE = "tests/data/test_chat_collate.py"
CHAT_SERVER = "tests/http/test_chat_server.py"
CHAT_APP = "tests/http/test_chat_app.py"
CHAT_DATALOADER = "tests/data/test_chat_dataloader.py"
PRETOKENIZE_CHAT = "tests/pretokenize/test_pretokenize_chat.py"
PRETOKENIZE_S3 = "tests/pretokenize/test_pretokenize_s3.py"
WIRE = "tests/client/test_wire.py"
MEMORY = "tests/engine/test_memory.py"
DRAIN = "tests/http/test_drain.py"
API_DOCS = "tests/http/test_api_docs.py"
EDGES = "tests/http/test_serve_edges.py"
CLI = "tests/http/test_cli.py"
UNIX = "tests/http/test_unix_sockets.py"
LAUNCH = "tests/launch/test_launch.py"
REPLICAS = "tests/launch/test_replicas.py"
CORPUS = "tests/jobs/test_corpus.py"
JOB_STEPS = "tests/jobs/test_job_steps.py"
PRETOKENIZE = "tests/pretokenize/test_pretokenize.py"
OBJECT_STORAGE = "tests/jobs/test_object_storage.py"
TRAIN_OPTIONS = "tests/training/test_train_options.py"
TRAIN = "tests/training/test_train.py"
EMBEDDED = "tests/http/test_embedded.py"
FINGERPRINT = "tests/engine/test_fingerprint.py"
DIRECT_ROUTES = "tests/http/test_direct_routes.py"
PLANNER = "tests/sizing/test_planner.py"
CALIBRATION = "tests/calibration/test_calibrate.py"

SERVICE = Path(__file__).resolve().parent.parent / "service"  # where a function that left its module is looked for


@dataclass(frozen=True)
class Mutation:
    name: str
    at: str  # "module:Qualified.name" of the function (or class) that holds the node; the module alone: its top level
    node: str  # the node's source, any layout (a compound statement: its header; a keyword "k=v"; a dict entry "k: v")
    mutated: str  # what replaces the node's source (a compound statement: its new header)
    caught_by: tuple[str, ...]  # test files, the fastest likely catcher first
    parity: bool = False  # also caught by the real-server tier on its own
    within: str = ""  # an enclosing node's source (a compound statement: its header), where ``node`` is not unique

    @property
    def path(self) -> str:
        """The mutated module's file, relative to the repository root."""
        return module_path(self.at.partition(":")[0])

    def apply(self, source: str, search: Path | None = SERVICE) -> str:
        """``source`` (the module's) with the node's span replaced; :class:`AnchorError` naming this mutation unless
        the function and, in it, exactly one node are found (and where the function went, if ``search`` holds it)."""
        try:
            site = locate(source, self.at, self.node, self.within, search=search)
            return splice(source, site, replacement(site, self.mutated))
        except AnchorError as exc:
            raise AnchorError(f"{self.name}: {exc}") from None


MUTATIONS: tuple[Mutation, ...] = (
    # -- the parity table: what the property tests must catch at every tier ----------------------------------
    Mutation(
        "left padding becomes right (rectangular)",
        "service.engine.encoding:_RectangularShaper.__init__",
        "if pad_left:",
        "if False:",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "ragged rows ignore left padding",
        "service.engine.encoding:_RaggedShaper.fill",
        "rows[i] = np.concatenate([padding, rows[i]] if self.pad_left else [rows[i], padding])",
        "rows[i] = np.concatenate([rows[i], padding])",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "pair truncation (only_second) drops the last token",
        "service.engine.encoding:plan_encode",
        "max_length=max_length",
        'max_length=max_length - (truncation.value == "only_second")',
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "attention_mask all ones",
        "service.engine.encoding:_RectangularShaper.attention_mask",
        "return self.mask.astype(np.int64)",
        "return np.ones((self.rows, self.width), dtype=np.int64)",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "add_special_tokens=False ignored",
        "service.engine.encoding:plan_encode",
        "add_special_tokens=options.add_special_tokens",
        "add_special_tokens=True",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "stride off by one",
        "service.engine.encoding:plan_encode",
        "stride=options.stride",
        "stride=max(options.stride - 1, 0)",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        'pad_to_multiple_of ignored with padding="max_length"',
        "service.engine.encoding:shape_rows",
        "if multiple and target % multiple:",
        "if multiple and target % multiple and plan.pad_target is None:",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "the fast encode path used for overflow (tokenizers 0.23's pair type-id bug)",
        "service.engine.encoding:EncodePlan.full_encode",
        'return "offset_mapping" in self.keys or self.with_overflow',
        'return "offset_mapping" in self.keys',
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "batch key drops add_special_tokens",
        "service.engine.batching:Batcher._take_batch",
        "job.batch_key == key",
        "job.batch_key is not None and job.batch_key[::2] == key[::2]",
        (ENGINE,),
        parity=True,
    ),
    Mutation(
        "safetensors arrays flattened",
        "service.http.routes:_encoded_answer",
        "return safetensors_parts(result.data, metadata)",
        "return safetensors_parts({k: v.reshape(-1) for k, v in result.data.items()}, metadata)",
        (APP,),
        parity=True,
    ),
    # -- more shaping ----------------------------------------------------------------------------------------
    Mutation(
        "truncation always on the right (tokenizer's truncation_side ignored)",
        "service.engine.encoding:plan_encode",
        "direction=facts.truncation_side",
        'direction="right"',
        (ENGINE,),
    ),
    Mutation(
        "the tokenizer's default padding side ignored",
        "service.engine.encoding:plan_encode",
        'pad_left=padding_side == "left"',
        'pad_left=options.padding_side == "left"',
        (ENGINE,),
    ),
    Mutation(
        "offset pairs come out as (end, start)",
        "service.engine.encoding:extract_rows",
        "columns[key] = flat.reshape(total, 2)",
        "columns[key] = flat.reshape(total, 2)[:, ::-1]",
        (ENGINE,),
    ),
    Mutation(
        "length reported before padding",
        "service.engine.encoding:shape_rows",
        "data[key] = out_lengths if rectangular else out_lengths.tolist()",
        "data[key] = lengths if rectangular else lengths.tolist()",
        (ENGINE,),
    ),
    Mutation(
        "special_tokens_mask pads with 0",
        "service.engine.encoding:shape_rows",
        "data[key] = shaper.fill(encoded.columns[key], 1)",
        "data[key] = shaper.fill(encoded.columns[key], 0)",
        (ENGINE,),
    ),
    Mutation(
        "overflow_to_sample_mapping counts rows, not samples",
        "service.engine.encoding:extract_rows",
        "sample_map.extend([i] * len(group))",
        "sample_map.extend(range(len(sample_map), len(sample_map) + len(group)))",
        (ENGINE,),
    ),
    Mutation(
        "the response limit lets twice as much through",
        "service.engine.encoding:shape_rows",
        "if positions > max_response_tokens:",
        "if positions > 2 * max_response_tokens:",
        (ENGINE,),
    ),
    # -- admission and batching ------------------------------------------------------------------------------
    Mutation(
        "the queue takes one request more than its limit",
        "service.engine.batching:Batcher._check_queue",
        "len(self._queue) >= self.config.max_queued_requests",
        "len(self._queue) > self.config.max_queued_requests",
        (BATCHING, ENGINE),
    ),
    Mutation(
        "batches ignore the text cap",
        "service.engine.batching:Batcher._take_batch",
        "texts + job.texts <= self.config.max_batch_texts",
        "True",
        (BATCHING,),
    ),
    Mutation(
        # (dropping _take_batch's own check instead is all but equivalent: this callback runs first)
        "a withdrawn request stays queued until its batch comes",
        "service.engine.batching:Batcher._forget",
        "self._queue.remove(job)",
        "raise ValueError",
        (BATCHING,),
    ),
    Mutation(
        "a batch's encodings handed to the wrong request",
        "service.engine.tokenizer_thread:TokenizerThread._encode_into",
        "work.take(encodings[start:end])",
        "work.take(encodings[: end - start])",
        (ENGINE,),
    ),
    Mutation(
        "single sequences' type ids taken as 0 whatever the template gives them",
        "service.engine.tokenizer_thread:TokenizerThread.zero_type_ids",
        "return not pairs and self._zero_single_type_ids[add_special_tokens]",
        "return not pairs",
        (ENGINE,),
    ),
    Mutation(
        "a sliced request encodes its first slice only",
        "service.engine.tokenizer_thread:TokenizerThread._encode_into",
        "for end in work.slices or (len(work.inputs),):",
        "for end in (work.slices or (len(work.inputs),))[:1]:",
        (MEMORY,),
    ),
    Mutation(
        "the bytes bound takes a character's storage width for its UTF-8 bytes",
        "service.engine.bounds:utf8_bounds",
        "per_char = np.minimum((sizes - header) // (lengths + 1) + 1, 4)",
        "per_char = np.minimum((sizes - header) // (lengths + 1), 4)",
        (MEMORY,),
    ),
    Mutation(
        "costly requests keep the loose bytes bound (whether they fit follows the looser bound)",
        "service.engine.bounds:RequestBounds.encode",
        "if bound.cost > 2 * self.slice_tokens * self.costs.rust_per_token:",
        "if False:",
        (MEMORY,),
    ),
    Mutation(
        "a max_length at the special tokens bounded as a window per byte (413 for what transformers answers)",
        "service.engine.bounds:RequestBounds._encode",
        "if plan.with_overflow and most == specials > 0:",
        "if False:",
        (MEMORY,),
    ),
    Mutation(
        "the bound counts one row per text whatever the overflow",
        "service.engine.bounds:RequestBounds._encode",
        "rows.append(u if step <= 0 else 1 + -(-max(0, u - most) // step))",
        "rows.append(1)",
        (MEMORY,),
    ),
    Mutation(
        "a max_length below the special tokens bounded as if it truncated",
        "service.engine.bounds:RequestBounds._encode",
        "truncates = most > 0 and most >= specials",
        "truncates = most > 0",
        (MEMORY,),
    ),
    Mutation(
        "a stride that leaves no room refused only at encode time (a long text answered too_large)",
        "service.engine.encoding:check_stride",
        "if room >= 0 and truncation.stride > room:",
        "if room > 0 and truncation.stride > room:",
        (ENGINE,),
    ),
    Mutation(
        "the allocator trimmed after every large release",
        "service.engine.memory:_Trimmer._trim",
        "if wait > 0:",
        "if False:",
        (MEMORY,),
    ),
    # -- the one route path ------------------------------------------------------------------------------
    Mutation(
        "a client that leaves no longer withdraws its queued work",
        "service.http.routes:Routes.serve",
        "result = await _unless_client_leaves(request, route.submit(engine, body, reservation))",
        "result = await route.submit(engine, body, reservation)",
        (BATCHING,),
    ),
    Mutation(
        "a dependency the work routes would skip (a Depends() on /encode, the app's) lets the app start",
        "service.http.direct_routes:refuse_bypassed_dependencies",
        "if found:",
        "if False:",
        (DIRECT_ROUTES,),
    ),
    Mutation(
        "a misspelt field (or a command's flag) gets no closest name",
        "service.suggestions:closest",
        "matches = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)",
        "matches: list[str] = []",
        (APP, CLI),
    ),
    # -- the wire, the fingerprint ---------------------------------------------------------------------------
    Mutation(
        "an option equal to its default by value but not by type (0 for False) is not sent",
        "service.wire:changed_options",
        "if value != default or type(value) is not type(default):",
        "if value != default:",
        (WIRE,),
    ),
    Mutation(
        "a ragged result sent as binary instead of 406",
        "service.http.routes:_encoded_answer",
        "if not result.rectangular:",
        "if False:",
        (APP,),
    ),
    Mutation(
        "the fingerprint ignores the call config (padding side, special tokens...)",
        "service.engine.loading:fingerprint",
        '{"tokenizer": backend_json, "config": call_config(tokenizer)}',
        '{"tokenizer": backend_json}',
        (APP,),
    ),
    Mutation(
        "the fingerprint leaves out the chat templates (the default one and the named ones)",
        "service.engine.loading:call_config",
        '"chat_templates": templates',
        '"chat_templates": None',
        (FINGERPRINT,),
    ),
    Mutation(
        "the fingerprint leaves out the tokenizer class whose batch_decode runs",
        "service.engine.loading:call_config",
        '"tokenizer_class": type(tokenizer).__name__',
        '"tokenizer_class": ""',
        (FINGERPRINT,),
    ),
    Mutation(
        "a pin matches only a whole fingerprint: the prefix serve logs is refused",
        "service.fingerprint_pins:fingerprint_matches",
        "return actual is not None and actual.startswith(expected) and len(expected) >= len(FINGERPRINT_PREFIX)",
        "return actual == expected",
        (FINGERPRINT,),
    ),
    Mutation(
        "a job record of the earlier fingerprint scheme is refused as a bare other-settings conflict",
        "service.jobs.executor:_made_how",
        "if scheme in ours and other_scheme:",
        "if False:",
        (FINGERPRINT,),
    ),
    Mutation(
        "the launch key names the folder's top-level files only (a named template changed in place is not seen)",
        "service.launch.command:_files_identity",
        'files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())',
        "files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())",
        (FINGERPRINT,),
    ),
    # -- the client ------------------------------------------------------------------------------------------
    Mutation(
        "a client option dropped on the way to the body",
        "service.client.sync_client:TokenizerClient.tokenize",
        "return_sequence_ids=return_sequence_ids",
        "return_sequence_ids=False",
        (WIRE,),
    ),
    Mutation(
        "the client no longer retries a proxy's 502",
        "service.wire",
        '{**{error.status: error.exception for error in ERROR_TYPES.values()}, 502: "ServerBusy"}',
        "{error.status: error.exception for error in ERROR_TYPES.values()}",
        (RESILIENCE,),
    ),
    Mutation(
        "the client gives up on a 408 after a stalled upload",
        "service.client.answers",
        "RETRIED_REJECTIONS = (ServerBusy, RequestTimeout)",
        "RETRIED_REJECTIONS = (ServerBusy,)",
        (PROTOCOL,),
    ),
    Mutation(
        "a URL that never answered is retried like an outage (300 s for pretokenize)",
        "service.client.retrying:Endpoints.failed",
        "if isinstance(error, ConnectError) and not self.answered:",
        "if False:",
        (RESILIENCE,),
    ),
    Mutation(
        "the client ignores Retry-After",
        "service.client.retrying:Endpoints.failed",
        "pause = min(max(retry_after, 0.0), policy.max_retry_after)",
        "pause = policy.backoff(state.failures)",
        (RESILIENCE,),
    ),
    Mutation(
        "a pinned fingerprint is checked on /info only",
        "service.client.answers:finish",
        "if not call.fingerprint_in_body:",
        "if False:",
        (RESILIENCE, CLIENT),
    ),
    # -- conversations (issue 20): masks never silently wrong ------------------------------------------------
    Mutation(
        "chat: a turn's mask starts one character early (off by one)",
        "service.engine.chat.rendering:_turn_spans",
        "spans.append((len(prompt), len(turn)))",
        "spans.append((len(prompt) - 1, len(turn)))",
        (CHAT_MASKS,),
    ),
    Mutation(
        "chat: a token ending where a span starts is marked (overlap off by one)",
        "service.engine.chat.masks:assistant_masks",
        "marked[inside] = ends[inside] > span_starts[current[inside]]",
        "marked[inside] = ends[inside] >= span_starts[current[inside]]",
        (CHAT_MASKS, CHAT_PARITY),
    ),
    Mutation(
        "chat: turns ignore the generation prompt (the cue is marked as the assistant's)",
        "service.engine.chat.rendering:_turn_spans",
        "prompt, _ = renderer.render(messages[:k], True)",
        "prompt, _ = renderer.render(messages[:k], False)",
        (CHAT_MASKS,),
    ),
    Mutation(
        "chat: a template that rewrites earlier turns is not refused",
        "service.engine.chat.rendering:_turn_spans",
        "if not whole.startswith(turn) or (spans and len(prompt) < spans[-1][1]):",
        "if False:",
        (CHAT_MASKS,),
    ),
    Mutation(
        "chat: masks from a template without generation markers are not refused (all zeros)",
        "service.engine.chat.templates:ChatTemplates.prepare",
        "if not template.has_markers:",
        "if False:",
        (CHAT_MASKS, CHAT_PARITY),
    ),
    Mutation(
        "chat: padding_side dropped on the way to the encode (ids and masks padded on the default side)",
        "service.wire:ChatOptions.as_encode_options",
        "padding_side=self.padding_side",
        "padding_side=None",
        (CHAT_PARITY,),
    ),
    Mutation(
        "chat: templates no longer see the special tokens (bos_token...)",
        "service.engine.chat.templates:ChatTemplates.prepare",
        "variables = {**self.special_tokens, **(options.chat_template_kwargs or {})}",
        "variables = {**(options.chat_template_kwargs or {})}",
        (CHAT_PARITY,),
    ),
    Mutation(
        "chat: tools no longer select the tool_use template",
        "service.engine.chat.templates:ChatTemplates._resolve",
        'if tools is not None and "tool_use" in self._named:',
        'if False and "tool_use" in self._named:',
        (CHAT_REFUSALS, CHAT_PARITY),
    ),
    Mutation(
        "chat: continue_final_message no longer cuts the rendering where the final message ends",
        "service.engine.chat.rendering:_cut_at_final_message",
        "return text[:at]",
        "return text[:at] + _CONTINUE_TAG",
        (CHAT_PARITY,),
    ),
    Mutation(
        "chat client: labels on padding are the pad token, not -100",
        "service.data.sft:_padded",
        '"labels": fill(labels, IGNORE_INDEX)',
        '"labels": fill(labels, pad_token_id)',
        (CHAT_COLLATE,),
    ),
    Mutation(
        "chat client: left padding of ids, labels and masks becomes right",
        "service.data.sft:_padded",
        "real = columns >= (width - lengths)[:, None] if left else columns < lengths[:, None]",
        "real = columns < lengths[:, None]",
        (CHAT_COLLATE,),
    ),
    Mutation(
        "chat client: padding-free labels predict across conversations (first tokens kept)",
        "service.data.sft:_padding_free",
        "label_row[positions == 0] = IGNORE_INDEX",
        "pass",
        (CHAT_COLLATE,),
    ),
    # -- the server's edges: drain, lingering close, docs, loading (issue 18) --------------------------------
    Mutation(
        "the drain closes its listener without stopping new handshakes first",
        "service.http.server.listening:refuse_new_handshakes",
        'if sys.platform != "linux" or sock.family not in (socket.AF_INET, socket.AF_INET6):',
        "if True:",
        (DRAIN,),
    ),
    Mutation(
        "the drain closes its listener with connections still in the accept queue",
        "service.http.server.listening:close_listeners",
        "if now >= settled and not any(accept_queue_length(sock) for sock in sockets):",
        "if True:",
        (DRAIN,),
    ),
    Mutation(
        "the connection guard never sees the drain (answers keep connections alive)",
        "service.http.server.protocol:ConnectionGuard.draining",
        "return self.drain_state is not None and self.drain_state.draining",
        "return False",
        (DRAIN,),
    ),
    Mutation(
        "a 431 or 408 closes at once, resetting a client still sending",
        "service.http.server.protocol:GuardedHttpToolsProtocol._refuse_now",
        "self._send_and_close(_raw_error(kind, message))",
        "self.transport.write(_raw_error(kind, message)) or self.transport.close()",
        (PROTOCOL,),
    ),
    Mutation(
        "the API docs need the key a browser cannot send",
        "service.http.middleware",
        "OPEN_PATHS = frozenset({HEALTH_PATH, READY_PATH, METRICS_PATH, *playground.OPEN_PATHS, *api_docs.OPEN_PATHS})",
        "OPEN_PATHS = frozenset({HEALTH_PATH, READY_PATH, METRICS_PATH, *playground.OPEN_PATHS})",
        (API_DOCS,),
    ),
    Mutation(
        "a hub id is not tried with a bounded connection first (~50 s of retries offline)",
        "service.engine.loading:_from_hub",
        "unreachable = hub_unreachable(constants.ENDPOINT, HUB_CONNECT_SECONDS)",
        "unreachable = None",
        (EDGES,),
    ),
    # -- Unix sockets and launched services (issue 21) --------------------------------------------------------
    Mutation(
        "a socket URL leaves the slashes of its path unencoded (the path becomes the route)",
        "service.addresses:unix_socket_url",
        "return f\"{UNIX_SCHEME}://{quote(os.path.abspath(path), safe='')}\"",
        'return f"{UNIX_SCHEME}://{quote(os.path.abspath(path))}"',
        (UNIX,),
    ),
    Mutation(
        "the drain keeps a Unix socket's file (new connections reach a closing listener)",
        "service.http.server.listening:close_listeners",
        "socket_file.remove()",
        "pass",
        (UNIX,),
    ),
    Mutation(
        "serve --uds refuses the socket file a dead server left",
        "service.http.server.running:bind_unix_listener",
        "os.unlink(path)",
        'raise OSError(errno.EADDRINUSE, "in use")',
        (UNIX,),
    ),
    Mutation(
        "the server never sees its owners gone (a SIGKILLed job leaves it running)",
        "service.http.server.owners:OwnersWatch._watch",
        "fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "raise BlockingIOError",
        (UNIX, LAUNCH),
    ),
    Mutation(
        "a forked child keeps its copy of the owners lock (the service outlives a killed parent)",
        "service.launch.ownership:_forget_after_fork",
        "close_locks(inherited.owners_fds)",
        "pass",
        (LAUNCH,),
    ),
    Mutation(
        "a reused pid is taken for the service's (a stale socket is connected to)",
        "service.processes:process_alive",
        "return os.fsencode(marker) in file.read()",
        "return True",
        (LAUNCH,),
    ),
    Mutation(
        "a service that keeps dying is relaunched for ever",
        "service.launch.recovery:recover",
        "if launches >= MAX_LAUNCHES:",
        "if False:",
        (LAUNCH,),
    ),
    Mutation(
        "a private server waits out its idle keep-alive connections (a forked worker's holds its exit)",
        "service.http.server.running:DrainingServer._drain",
        "self.guard.close_idle()",
        "pass",
        (UNIX, LAUNCH),
    ),
    Mutation(
        "a launched service reports the pid it started with after a worker relaunched it",
        "service.launch.launched:LaunchedService.pid_of",
        "return record.pid if record is not None else self.first_pids[replica]",
        "return self.first_pids[replica]",
        (LAUNCH,),
    ),
    Mutation(
        "the last owner leaves running a server another process relaunched",
        "service.launch.ownership:_stop_running",
        "if record is None or (process is not None and record.pid == process.pid):",
        "if True:",
        (LAUNCH,),
    ),
    # -- replicas on one machine ---------------------------------------------------------------------------
    Mutation(
        "the client spreads its calls round-robin, blind to the calls outstanding on each URL",
        "service.client.retrying:Endpoints._pick",
        "return min(others, key=lambda s: s.outstanding), 0.0",
        "return others[0], 0.0",
        (RESILIENCE,),
    ),
    Mutation(
        "a call that ends in an error stays counted on its URL (the client shuns it for good)",
        "service.client.sync_client:TokenizerClient._send",
        "attempts.close()",
        "pass",
        (RESILIENCE,),
    ),
    Mutation(
        "replicas='auto' counts the host's cores, not those this process may use",
        "service.sizing.machine:allowed_cpus",
        "return sorted(os.sched_getaffinity(0))",
        "return list(range(os.cpu_count() or 1))",
        (REPLICAS,),
    ),
    # -- sizing from a calibration -------------------------------------------------------------------------
    Mutation(
        "the planner breaks ties towards more replicas (each a tokenizer and its memory more, for nothing)",
        "service.sizing.planner:choose_plan",
        "(c[1], c[2])",
        "(-c[1], c[2])",
        (PLANNER,),
    ),
    Mutation(
        "the planner ignores the memory limit",
        "service.sizing.planner:choose_plan",
        "count = cores // threads if cap is None else min(cores // threads, cap)",
        "count = cores // threads",
        (PLANNER, REPLICAS),
    ),
    Mutation(
        "a measured curve is extrapolated past its last point (a pool that stopped gaining is taken to go on)",
        "service.sizing.planner:Curve.rate",
        "return points[-1][1]",
        "return points[-1][1] * threads / points[-1][0]",
        (PLANNER,),
        within="if threads >= points[-1][0]:",
    ),
    Mutation(
        "a kept calibration edited or damaged on disk is trusted",
        "service.calibration.store:kept",
        'if record["checksum"] != hashlib.sha256(_canonical(body)).hexdigest():',
        "if False:",
        (CALIBRATION,),
    ),
    Mutation(
        "the launch key forgets the replicas asked for (a one-server launch attaches to a set, and back)",
        "service.launch.command:ServeCommand.key",
        "if self.replicas_asked != 1:",
        "if False:",
        (REPLICAS,),
    ),
    Mutation(
        "every replica takes the whole memory limit's budget (together they overrun it)",
        "service.http.settings:Settings.memory_budget_bytes",
        "return default_memory_budget(None if limit is None else limit // self.replica_of)",
        "return default_memory_budget()",
        (REPLICAS,),
    ),
    Mutation(
        "a dead replica's calls wait for its relaunch instead of going to the others",
        "service.launch.transport:_Bound._stranded",
        "if self.service.others_running(replica):",
        "if False:",
        (REPLICAS,),
    ),
    Mutation(
        "a replica that fails to start leaves the others running",
        "service.launch.starting:start",
        "stop_servers([s.process for s in starting], wait=STOP_WAIT_SECONDS)",
        "pass",
        (REPLICAS,),
    ),
    Mutation(
        "replicas serving different tokenizers are taken for one set",
        "service.launch.starting:attach_or_start",
        "if len({record.fingerprint for record in running}) > 1:",
        "if False:",
        (REPLICAS,),
    ),
    Mutation(
        "serve --replicas kills its replicas on SIGTERM instead of letting them drain",
        "service.http.replicas:_forward",
        "replica.process.send_signal(sig)",
        "replica.process.send_signal(signal.SIGKILL)",
        (REPLICAS,),
    ),
    Mutation(
        "serve --replicas' replicas hold no owners lock (they outlive a SIGKILLed parent)",
        "service.http.replicas:serve_replicas",
        'own = ["--uds", replica.socket_path, "--owners-file", replica.owners_path]',
        'own = ["--uds", replica.socket_path]',
        (REPLICAS,),
    ),
    Mutation(
        "launch() without fcntl (Windows) fails on an import instead of saying what to run",
        "service.launch.rendezvous:require_posix",
        "if missing:",
        "if False:",
        (LAUNCH,),
    ),
    # -- conversations on the one route path, the clients and the collator (issue 20, phase 2) --------------------
    Mutation(
        "chat route: the generation prompt is ignored (the request's add_generation_prompt never reaches the engine)",
        "service.http.routes",
        "lambda engine, body, r: engine.submit_chat_encode(body.conversations, body.options(), reservation=r)",
        "lambda engine, body, r: engine.submit_chat_encode(body.conversations, __import__('dataclasses').replace("
        "body.options(), add_generation_prompt=False), reservation=r)",
        (CHAT_SERVER,),
    ),
    Mutation(
        "chat client: tokenizer_kwargs lose padding_side (ids and masks padded on the default side over HTTP)",
        "service.client.operations:chat_tokenizer_kwargs",
        "extra = dict(tokenizer_kwargs or {})",
        'extra = {k: v for k, v in (tokenizer_kwargs or {}).items() if k != "padding_side"}',
        (CHAT_SERVER,),
    ),
    Mutation(
        "chat client: one conversation answered as a batch of one (transformers gives flat lists)",
        "service.client.operations:apply_chat_template_call",
        "encode = encode_call_for(body, CHAT_ENCODE_PATH, batched, False, return_tensors)",
        "encode = encode_call_for(body, CHAT_ENCODE_PATH, True, False, return_tensors)",
        (CHAT_SERVER,),
    ),
    Mutation(
        "chat client: lengths of conversations sent as texts",
        "service.client.sync_client:TokenizerClient.lengths",
        "if is_conversations(text) and text_pair is None:",
        "if False:",
        (CHAT_SERVER,),
    ),
    Mutation(
        "chat collator: rows fetched padded, so padding counts as tokens (labels and attention on padding)",
        "service.data.collate:ChatCollator.__call__",
        "**self.chat_options",
        "padding=True, **self.chat_options",
        (CHAT_DATALOADER,),
    ),
    Mutation(
        "chat engine: renders are not charged to the memory budget (a render bomb is held in full)",
        "service.engine.chat.limits:RenderCharge.__call__",
        "if need <= self.reservation.nbytes:",
        "if True:",
        (MEMORY,),
    ),
    Mutation(
        "chat engine: a render runs past the queue deadline (no 504: the render thread is held)",
        "service.engine.chat.limits:RenderWatch.check",
        "if self.deadline is not None and time.monotonic() > self.deadline:",
        "if False:",
        (CHAT_APP,),
    ),
    Mutation(
        "chat engine: a render waiting for the render thread is not withdrawn with its client",
        "service.engine.chat.renderer:ChatRenderer._run",
        "return await asyncio.wrap_future(future)",
        "return await asyncio.shield(asyncio.wrap_future(future))",
        (BATCHING,),
    ),
    # -- the offline jobs: the sharded-job executor, storage, the pre-tokenizer's outages --------------------
    Mutation(
        "a .done record is written though an output it lists is missing",
        "service.jobs.executor:ShardedJob.commit",
        "if size is None:",
        "if False:",
        (CORPUS,),
    ),
    Mutation(
        "a record is trusted without checking the sizes it lists",
        "service.jobs.executor:ShardedJob.check",
        "return all(name in expected and listing.get(name) == expected[name] for name in self.outputs(unit))",
        "return all(name in expected for name in self.outputs(unit))",
        (CORPUS,),
    ),
    Mutation(
        "a record is trusted without checking it (worker 0's wait, a rerun's skip)",
        "service.jobs.executor:ShardedJob.done_record",
        "return record if record is not None and self.check(record, unit, listing) else None",
        "return record",
        (CORPUS,),
    ),
    Mutation(
        "outputs made with other settings are mixed in",
        "service.jobs.executor:ShardedJob.check",
        "if _without(record.settings, self.policies) != _without(self.settings, self.policies):",
        "if False:",
        (CORPUS,),
    ),
    Mutation(
        "records of units outside this run's plan are ignored",
        "service.jobs.executor:ShardedJob.refuse_foreign",
        "if foreign:",
        "if False:",
        (CORPUS,),
    ),
    Mutation(
        "a rerun processes again the units that are done",
        "service.jobs.executor:_WorkerRun.__init__",
        "self.todo = self.job.pending()",
        "self.todo = self.job.pending() or self.job.mine()",
        (JOB_STEPS,),
    ),
    Mutation(
        "every worker, not only worker 0, waits for all units and finishes the job",
        "service.jobs.executor:_WorkerRun.finish",
        "if not (finish if finish is not None else report.worker.index == 0):",
        "if not (finish if finish is not None else True):",
        (JOB_STEPS,),
    ),
    Mutation(
        "SageMaker hosts ordered as strings (algo-10 before algo-2)",
        "service.jobs.workers:_current_and_hosts",
        "return current, sorted(hosts, key=_host_order)",
        "return current, sorted(hosts)",
        (CORPUS,),
    ),
    Mutation(
        "a local output is written in place, visible before it is whole",
        "service.jobs.folders:LocalFolder.writer",
        'partial = path.with_name(f".{path.name}{_PARTIAL_MARK}{os.getpid()}")',
        "partial = path",
        (CORPUS,),
    ),
    Mutation(
        "a write to a missing bucket is not named as such",
        "service.jobs.retrying:call_with_retries",
        "if writing:",
        "if False:",
        (CORPUS,),
    ),
    Mutation(
        "a store's refusal is retried until the deadline",
        "service.jobs.retrying:call_with_retries",
        "if not transient(exc):",
        "if False:",
        (CORPUS,),
    ),
    Mutation(
        "azure's 404 for a missing container is retried until the deadline",
        "service.jobs.store_errors:missing_object",
        "return isinstance(exc, FileNotFoundError) or http_status(exc) == 404",
        "return isinstance(exc, FileNotFoundError)",
        (OBJECT_STORAGE,),
    ),
    Mutation(
        "a 403 from azure (a key it refuses) is retried until the deadline",
        "service.jobs.store_errors:transient",
        "return False",
        "pass",
        (OBJECT_STORAGE,),
        within="if status is not None and 400 <= status < 500 and status not in _TRANSIENT_CLIENT_STATUSES:",
    ),
    Mutation(
        "azure's client retries silently for a minute a request, past a short --retry-deadline",
        "service.jobs.stores:_try_once",
        "policy.total_retries = 0",
        "pass",
        (OBJECT_STORAGE,),
    ),
    Mutation(
        "a ranged read resumed after a dropped connection starts at byte 0",
        "service.jobs.stores:_ResumingReader.readinto.<locals>.read",
        "self._stream.seek(self._position)",
        "pass",
        (CORPUS,),
    ),
    Mutation(
        "an upload to S3 is read whole (one PUT below 100 MiB, 10 parts at once above)",
        "service.jobs.folders",
        '"s3": {"chunksize": UPLOAD_PART, "max_concurrency": UPLOAD_PARTS_AT_ONCE}',
        '"s3": {}',
        (OBJECT_STORAGE,),
    ),
    Mutation(
        "a remote input is read whole instead of in blocks",
        "service.jobs.stores:_ResumingReader.readinto.<locals>.read",
        'self._stream = self._fs.open(self._path, "rb", block_size=READ_BLOCK, cache_type="readahead")',
        'self._stream = self._fs.open(self._path, "rb", block_size=READ_BLOCK, cache_type="all")',
        (OBJECT_STORAGE,),
    ),
    Mutation(
        "missing S3 credentials retried as an outage (for --retry-deadline) instead of refused at once",
        "service.jobs.store_errors",
        '("botocore.exceptions", "NoCredentialsError")',
        '("botocore.exceptions", "NoCredentialsErrorNot")',
        ("tests/jobs/test_storage_errors.py",),
    ),
    Mutation(
        "a service outage stays silent until the deadline",
        "service.client.retrying:RetryLog.failed",
        "if self.log is not None and now - self._last_line >= self.every and (not busy or waited >= self.every):",
        "if False:",
        (PRETOKENIZE,),
    ),
    Mutation(
        "a service outage is retried past --retry-deadline",
        "service.client.retrying:Attempts.next",
        "if elapsed + wait > self.policy.deadline:",
        "if False:",
        (PRETOKENIZE, RESILIENCE),
    ),
    Mutation(
        "chat engine: a refused render's traceback keeps its renderings (memory given back to the budget, not freed)",
        "service.engine.chat.renderer:ChatRenderer._run",
        "future = self._executor.submit(_without_frames, fn, *args)",
        "future = self._executor.submit(fn, *args)",
        (MEMORY,),
    ),
    # -- pre-tokenizing conversations with loss masks (issue 20, item 5) -------------------------------------------
    Mutation(
        "pretokenize chat: datatrove's loss file holds the inverted mask (the prompt trains)",
        "service.pretokenize.shards:loss_bytes",
        "return np.ascontiguousarray(masks != 0, dtype=np.uint8).data",
        "return np.ascontiguousarray(masks == 0, dtype=np.uint8).data",
        (PRETOKENIZE_CHAT,),
    ),
    Mutation(
        "pretokenize chat: a record whose messages are not a conversation is not named as a bad record",
        "service.jobs.documents:DocumentReader._conversation",
        "problem = conversation_problem(value)",
        "problem = None",
        (PRETOKENIZE_CHAT,),
    ),
    # -- the torch datasets reading the loss masks back ----------------------------------------------------------
    Mutation(
        "torch datasets: a block's loss masks are cut one token after its ids (the labels train the wrong tokens)",
        "service.pretokenize.torch_datasets:TokenBlocks.__getitem__",
        "masks = self._cut(self._loss, start, end)",
        "masks = self._cut(self._loss, start + 1, end + 1)",
        (PRETOKENIZE_CHAT,),
    ),
    Mutation(
        "torch datasets: a document's labels keep the prompt and drop the assistant's tokens",
        "service.pretokenize.torch_datasets:_with_labels",
        "labels = input_ids.masked_fill(assistant_masks == 0, IGNORE_INDEX)",
        "labels = input_ids.masked_fill(assistant_masks != 0, IGNORE_INDEX)",
        (PRETOKENIZE_CHAT,),
    ),
    Mutation(
        "torch datasets: a read across a remote block boundary leaves each block's last byte out (a run on s3://)",
        "service.pretokenize.shard_values:BlockCache.read",
        "low, high = max(start, number * step), min(end, (number + 1) * step)",
        "low, high = max(start, number * step), min(end, (number + 1) * step - 1)",
        (PRETOKENIZE_S3,),
    ),
    # -- train's options: each changes the tokenizer (issue 27) --------------------------------------------------
    Mutation(
        "train: Unigram is fed the pre-tokens counted under min_frequency (they are only reported as left out)",
        "service.training.learning:Replay.__iter__",
        "continue",
        "pass",
        (TRAIN_OPTIONS,),
    ),
    Mutation(
        "train: the counts go beside the tokenizer whatever --counts says",
        "service.training.options:TrainConfig.counts",
        "if self.counts_dir is not None:",
        "if False:",
        (TRAIN_OPTIONS,),
    ),
    # -- the second hour (issue 32) ----------------------------------------------------------------------------
    Mutation(
        "Ctrl-C falls back to uvicorn's handling (no drain, a KeyboardInterrupt traceback)",
        "service.http.server.running:DrainingServer.handle_exit",
        "if sig in DRAIN_SIGNALS and self._loop is not None:",
        "if sig == signal.SIGTERM and self._loop is not None:",
        (DRAIN,),
    ),
    Mutation(
        "an output folder that is a file is found only once work has begun",
        "service.jobs.folders:check_output_folder",
        "if not existing.is_dir():",
        "if False:",
        (TRAIN, PRETOKENIZE),
    ),
    Mutation(
        "embedded:default is taken for a path or a hub id",
        "service.engine.loading:load_tokenizer",
        "if source == DEFAULT_TOKENIZER:",
        "if False:",
        (EMBEDDED,),
    ),
    # -- the uvicorn room: each internal it keeps has a test that fails without it (issue 34) -------------------
    Mutation(
        "a request that begins to arrive leaves uvicorn's keep-alive timer running (cut when it fires)",
        "service.http.server.protocol:GuardedHttpToolsProtocol.data_received",
        "self._unset_keepalive_if_required()",
        "pass",
        (PROTOCOL,),
    ),
    Mutation(
        "an idle keep-alive connection gets a 408 at the body deadline of the request before it",
        "service.http.server.protocol:GuardedHttpToolsProtocol.on_message_complete",
        "self.deadline = None",
        "pass",
        (PROTOCOL,),
    ),
    Mutation(
        "a request queued behind a slower one is timed out while the server is not reading it",
        "service.http.server.protocol:GuardedHttpToolsProtocol.deadline_passed",
        "if self.flow.read_paused:",
        "if False:",
        (PROTOCOL,),
    ),
    Mutation(
        "a client that reads nothing of its answer holds its connection for ever",
        "service.http.server.protocol:GuardedHttpToolsProtocol.pause_writing",
        "self.write_deadline = time.monotonic() + self.guard.body_timeout",
        "pass",
        (PROTOCOL,),
    ),
    Mutation(
        "a close after an answer while draining resets a client still sending its body",
        "service.http.server.protocol:GuardedHttpToolsProtocol._close_after",
        "cycle.transport = _LingeringTransport(self)",
        "pass",
        (DRAIN,),
    ),
    Mutation(
        "the drain closes idle keep-alive connections once nothing is in flight (racing their next request)",
        "service.http.server.running:DrainingServer._wait_until_idle",
        "while (self.drain.in_flight > 0 or self.guard.connections) and time.monotonic() < until:",
        "while self.drain.in_flight > 0 and time.monotonic() < until:",
        (DRAIN,),
    ),
    Mutation(
        "serve lets transformers import torch (182 MB and a second more per server started from a training venv)",
        "service.engine.loading:keep_torch_out",
        'sys.modules["torch"] = None',
        "pass",
        (CHAT_SERVER,),
    ),
    Mutation(
        "train lets transformers import torch in its workers",
        "service.training.cli:main",
        "keep_torch_out()",
        "pass",
        (TRAIN,),
    ),
)
