"""The one settings object: each field is a flag (``--max-texts-per-request``) and an environment variable
(``TOKENIZER_SERVICE_MAX_TEXTS_PER_REQUEST``); flags win. Validated once, at start-up."""

from __future__ import annotations

import os
from fractions import Fraction
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..addresses import MAX_SOCKET_PATH_BYTES
from ..embedded import DEFAULT_TOKENIZER
from ..engine.batching import DEFAULT_BATCHING, BatchingConfig
from ..engine.limits import DEFAULT_LIMITS, EngineLimits
from ..engine.memory import (
    BUDGET_SHARE_OF_LIMIT,
    DEFAULT_BUDGET_WITHOUT_LIMIT,
    MIB,
    RESTING_MEMORY,
    default_memory_budget,
)
from ..sizing import available_cpus, cgroup_memory_limit, check_replicas, share_of_cores
from ..wire import ENV_PREFIX
from .server import OWNERS_CHECK_SECONDS

# The share of the memory limit the default budget takes, as the help text writes it (3/4).
_SHARE = Fraction(BUDGET_SHARE_OF_LIMIT).limit_denominator(16)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # -- what to serve --------------------------------------------------------------------------------
    model: str | None = Field(
        None,
        description="Tokenizer source: a tokenizer.json file, a HuggingFace tokenizer directory, or a hub "
        f"model id. Unset, or {DEFAULT_TOKENIZER}: the embedded default (a BERT-style Chinese/English WordPiece, "
        "works offline).",
    )
    revision: str | None = Field(
        None, description="Hub revision (branch, tag or commit) for a hub model id. Pin a commit in production."
    )
    # -- where to listen ------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Interface to bind. 0.0.0.0 in a container.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to bind (0: any free port).")
    uds: str | None = Field(
        None,
        description="Listen on this Unix socket path instead of --host/--port (URL: http+unix://<the path "
        "percent-encoded>); faster than TCP loopback on this machine. Mode 0660 (owner and group); a dead server's "
        f"socket file is replaced, a live one refused. At most {MAX_SOCKET_PATH_BYTES} bytes.",
    )
    owners_file: str | None = Field(
        None,
        description="A lock file each process using this server holds shared (set by TokenizerClient.launch), "
        f"checked {round(1 / OWNERS_CHECK_SECONDS)} times a second: once nobody holds it (all exited or were killed, "
        "SIGKILL too) the server stops as on SIGTERM, draining for nobody: listener and idle connections closed at "
        "once (no --drain-listen-seconds), exit once the requests in flight are answered. Unset: run until signalled.",
    )
    reuse_port: bool = Field(
        False,
        description="Bind --host/--port with SO_REUSEPORT, shared with the other replicas of `serve --replicas` (which "
        "sets it; one user's processes only): the kernel spreads new connections by a hash of their addresses. With "
        "--uds too, it listens on both, the socket its own (where its parent asks /readyz and /info).",
    )
    # -- parallelism ----------------------------------------------------------------------------------
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Rust (rayon) threads for batch encodes, per process. Unset: the CPUs this process may use "
        "(affinity, cgroup quota), shared by --replica-of replicas. More than the CPUs only adds contention.",
    )
    replicas: int | Literal["auto"] = Field(
        1,
        description="Server processes on this machine (each one process, one tokenizer, never forks), started by exec, "
        "sharing one TCP port (SO_REUSEPORT). One process serves at most 1 / (its Python time per request) requests "
        "a second, and one Rust pool stops gaining past a few threads: replicas, not threads, use many cores. auto: "
        "the replicas x threads a calibration of this machine and tokenizer chose (`tokenizer-service calibrate`; "
        "made at the first start and kept, a few seconds), or the default plan with --no-calibrate. --threads and "
        "--memory-budget-mib are per replica (unset: the plan's, or an equal share). The parent serves nothing: it "
        "forwards SIGTERM and SIGINT and exits once all replicas have; it fails if any fails to start, and stops "
        "all if one dies (never a partial set). In Kubernetes keep 1 and scale pods.",
    )
    calibrate: bool = Field(
        True,
        description="With --replicas auto: plan from a calibration of this machine and tokenizer (made at the first "
        "start, kept in $TOKENIZER_SERVICE_CALIBRATION_DIR, else ~/.cache/tokenizer-service/calibrations). "
        "--no-calibrate: the default plan, few Rust threads per replica (not measured here).",
    )
    replica_of: int = Field(
        1,
        ge=1,
        description="One of N replicas sharing this machine's cores and memory limit (set by `serve --replicas` and "
        "launch(replicas=N)): unset --threads and --memory-budget-mib default to a 1/N share.",
    )
    # -- limits (reported by /info) -------------------------------------------------------------------
    max_texts_per_request: int = Field(
        DEFAULT_LIMITS.max_texts_per_request,
        ge=1,
        description="Most texts (or pairs) in one /encode or /tokenize request, id lists in one /decode. Larger "
        "batches amortise HTTP better but hold the engine longer.",
    )
    max_text_chars: int = Field(
        DEFAULT_LIMITS.max_text_chars,
        ge=1,
        description="Most characters in one text. Bounds the time one request can hold the engine.",
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Largest request body accepted, in bytes (413 beyond)."
    )
    max_response_tokens: int = Field(
        DEFAULT_LIMITS.max_response_tokens,
        ge=1,
        description="Most token positions (rows x padded length) in one response: the shape of the largest "
        "answer (413 beyond). Its memory is bounded by --memory-budget-mib; checked before encoding from the "
        "request's bound when padding to max_length, else as the rows are encoded.",
    )
    memory_budget_mib: int | None = Field(
        None,
        ge=16,
        description="Memory all in-flight requests may hold at once, in MiB: each reserves an upper bound of its "
        "memory before it is read or encoded, 413 if it can never fit, 429 + Retry-After while others hold the "
        f"room. Unset: {_SHARE} of (the cgroup memory limit - {RESTING_MEMORY // MIB} MiB), or "
        f"{DEFAULT_BUDGET_WITHOUT_LIMIT // MIB} without a limit; with --replica-of N, of 1/N of the limit. A pod "
        f"needs about {RESTING_MEMORY // MIB} MiB + {1 / _SHARE} x this.",
    )
    # -- HTTP limits, in front of the app ---------------------------------------------------------------
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        description="Largest request line plus headers, in bytes; beyond, 431 and the connection is closed.",
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="A request's line and headers must arrive within this (else 408, closed)."
    )
    body_timeout_seconds: float = Field(
        60.0,
        gt=0,
        description="A request's body must arrive within this after its headers (else 408, closed), and a client "
        "must take in some of a stalled answer within it (else closed): how long a slow client holds memory.",
    )
    max_connections: int = Field(
        4096,
        ge=8,
        description="Most open client connections; beyond, new ones are closed at once and logged. Capped "
        "below the descriptor limit, which is raised to its hard limit at start.",
    )
    keep_alive_seconds: float = Field(5.0, gt=0, description="An idle keep-alive connection is closed after this.")
    http_protocol: Literal["guarded", "httptools", "h11"] = Field(
        "guarded",
        description="HTTP/1.1 implementation. guarded: uvicorn's httptools protocol with the limits above. "
        "httptools, h11: uvicorn's own, for comparison only, without the deadlines, the connection limit or the "
        "lossless drain (h11 bounds the header block).",
    )
    # -- micro-batching and backpressure (reported by /info) -------------------------------------------
    batching: bool = Field(
        DEFAULT_BATCHING.enabled,
        description="Coalesce concurrent requests with compatible options into one Rust encode. Off: each is "
        "encoded alone (for comparison; lower throughput under concurrency).",
    )
    batch_wait_ms: float = Field(
        DEFAULT_BATCHING.max_wait_seconds * 1000,
        ge=0,
        le=1000,
        description="How long a batch's first request waits for others. 0: a request starts at once when the "
        "engine is idle, batches form from what queues while it is busy. Above 0: bigger batches under light "
        "load, at that much added latency per lone request.",
    )
    max_batch_texts: int = Field(
        DEFAULT_BATCHING.max_batch_texts, ge=1, description="Texts per Rust encode call. A larger request runs alone."
    )
    max_batch_chars: int = Field(
        DEFAULT_BATCHING.max_batch_chars,
        ge=1,
        description="Characters per Rust encode call; bounds how long one batch holds the engine.",
    )
    max_queued_requests: int = Field(
        DEFAULT_BATCHING.max_queued_requests,
        ge=1,
        description="Requests allowed to wait; beyond, refuse at once with 429 and Retry-After.",
    )
    max_queued_texts: int = Field(
        DEFAULT_BATCHING.max_queued_texts, ge=1, description="Texts allowed to wait; beyond, 429 with Retry-After."
    )
    queue_timeout_seconds: float = Field(
        DEFAULT_BATCHING.queue_timeout_seconds,
        gt=0,
        description="A request still waiting for the engine after this gets 504 instead of hanging.",
    )
    # -- security and operations ----------------------------------------------------------------------
    api_key: SecretStr | None = Field(
        None,
        description="When set, every route but /healthz, /readyz, /metrics, the static playground page and the API "
        "docs (/docs, /openapi.json) needs 'Authorization: Bearer <key>' (the playground asks for it at its first "
        "call; the docs' Authorize button takes it).",
    )
    allow_chat_template_bodies: bool = Field(
        False,
        description="Let /chat/encode and /chat/render requests send a jinja template body as chat_template, not "
        "only a template's name. Risk: a body is code the server runs (in transformers' jinja sandbox) on its one "
        "render thread: a hostile one can loop as long as it likes (stopped only at its next output, 504 at the "
        "queue deadline), delaying every chat request. Only for trusted clients; off, bodies get 422.",
    )
    log_level: str = Field("info", pattern="^(critical|error|warning|info|debug)$", description="Log level.")
    access_log: bool = Field(
        False, description="Log every request. Costs CPU per request on the hot path; off by default."
    )
    graceful_shutdown_seconds: float = Field(
        30.0,
        gt=0,
        description="On SIGTERM, the most time the drain may take: in-flight requests finish within it, or the "
        "process exits 1. It exits 0 as soon as nothing is left (seconds, under steady load).",
    )
    drain_listen_seconds: float = Field(
        5.0,
        ge=0,
        description="On SIGTERM, how long the server keeps accepting connections, answering new requests 503 + "
        "Retry-After + Connection: close (clients retry elsewhere), before it closes its listener; shorter when "
        "nothing is in flight and no connection is open, at most --graceful-shutdown-seconds. Cover the time the "
        "load balancer (kube-proxy) takes to stop routing here, beyond any preStop pause.",
    )

    def engine_limits(self) -> EngineLimits:
        return EngineLimits(
            self.max_texts_per_request, self.max_text_chars, self.max_response_tokens, self.memory_budget_bytes()
        )

    def memory_budget_bytes(self) -> int:
        if self.memory_budget_mib is not None:
            return self.memory_budget_mib * 1024 * 1024
        limit = cgroup_memory_limit()
        return default_memory_budget(None if limit is None else limit // self.replica_of)

    def rust_threads(self) -> int:
        return self.threads or share_of_cores(available_cpus(), self.replica_of)

    def batching_config(self) -> BatchingConfig:
        return BatchingConfig(
            enabled=self.batching,
            max_wait_seconds=self.batch_wait_ms / 1000,
            max_batch_texts=self.max_batch_texts,
            max_batch_chars=self.max_batch_chars,
            max_queued_requests=self.max_queued_requests,
            max_queued_texts=self.max_queued_texts,
            queue_timeout_seconds=self.queue_timeout_seconds,
        )

    @field_validator("port", mode="before")
    @classmethod
    def _ignore_kubernetes_service_link(cls, value: object) -> object:
        # Kubernetes service links put TOKENIZER_SERVICE_PORT=tcp://10.0.0.1:8000 in pods beside a Service named
        # "tokenizer-service": no port anyone chose, so keep the default.
        if isinstance(value, str) and value.startswith("tcp://"):
            return cls.model_fields["port"].default
        return value

    @field_validator("replicas", mode="before")
    @classmethod
    def _check_replicas(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            value = int(value)  # a number as text (flag or environment)
        try:
            return check_replicas(value)
        except TypeError as exc:  # pydantic reports ValueErrors as invalid settings, not TypeErrors
            raise ValueError(str(exc)) from None

    @field_validator("uds")
    @classmethod
    def _check_socket_path(cls, value: str | None) -> str | None:
        if value is not None and len(os.fsencode(os.path.abspath(value))) > MAX_SOCKET_PATH_BYTES:
            raise ValueError(
                f"a Unix socket path holds at most {MAX_SOCKET_PATH_BYTES} bytes, and {os.path.abspath(value)!r} "
                "is longer: choose a shorter path"
            )
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.revision is not None and self.model in (None, DEFAULT_TOKENIZER):
            raise ValueError("--revision needs --model: the embedded default tokenizer has no revisions")
        if self.replicas != 1 and (self.reuse_port or self.owners_file or self.replica_of != 1):
            raise ValueError(
                "--replicas starts the replicas and sets --reuse-port, --owners-file and --replica-of for each of "
                "them: give none of the three with it"
            )
        if self.replicas != 1 and self.uds is not None:
            raise ValueError(
                "--replicas shares a TCP port, and a Unix socket cannot be shared: give --host/--port, or, for "
                "replicas on Unix sockets, use TokenizerClient.launch(replicas=N), whose client spreads calls over "
                "one socket per replica"
            )
        return self
