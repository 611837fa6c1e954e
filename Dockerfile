# tokenizer-service: one uvicorn process (never forking) serving one fast tokenizer. deploy/README.md has
# the whole story; in short:
#
#   docker build -t tokenizer-service .        # serves the embedded default tokenizer, needs no network
#   docker build --target baked -t tokenizer-service:bert-base-uncased \
#       --build-arg TOKENIZER_MODEL=google-bert/bert-base-uncased \
#       --build-arg TOKENIZER_REVISION=<commit sha> .   # a hub tokenizer baked in, never downloaded at start
#
# Behind a TLS-re-signing proxy add `--secret id=ca,src=/etc/ssl/certs/ca-certificates.crt`: the bundle is
# mounted only into the steps that download, never stored in a layer. No `# syntax=` line on purpose: it
# would pull a frontend image; the BuildKit built into the engine understands RUN --mount.
# BASE_IMAGE must provide python3.11 with venv, and a shell (CI builds a Debian bookworm one with
# mmdebstrap: deploy/check.sh).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
# /opt/venv becomes the image's; /opt/build only turns the project into a wheel and stays behind.
RUN python3 -m venv /opt/venv \
    && python3 -m venv /opt/build
# Dependencies first (the slow layer), from the hash-pinned locks: rebuilt only when a lock changes.
COPY requirements/server.lock requirements/build.lock /src/requirements/
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && /opt/venv/bin/pip install --require-hashes -r /src/requirements/server.lock \
    && /opt/build/bin/pip install --require-hashes -r /src/requirements/build.lock
COPY pyproject.toml README.md /src/
COPY service /src/service
# The project itself, without dependency resolution: the lock has installed them all (checked: every package of the
# server extra, at a version in its declared range, as `serve` checks at start-up).
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheels /src \
    && /opt/venv/bin/pip install --no-deps /tmp/wheels/*.whl \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/python -c "import sys; from service.extras import unmet_line; sys.exit(unmet_line('server'))" \
    && /opt/venv/bin/python -c "import service.cli, service.http.app" \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && rm -rf /tmp/wheels

# Downloads the tokenizer files of TOKENIZER_MODEL at TOKENIZER_REVISION into /opt/tokenizer and proves that
# the service can load them. Built only for the `baked` target.
FROM builder AS tokenizer-download
# DL3064 flags any name containing "TOKEN"; these name a tokenizer, not a credential.
# hadolint ignore=DL3064
ARG TOKENIZER_MODEL
# hadolint ignore=DL3064
ARG TOKENIZER_REVISION
COPY deploy/bake_tokenizer.py /src/bake_tokenizer.py
# Plain HTTPS downloads (no Xet transfer client), so that the CA secret applies to every connection.
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca REQUESTS_CA_BUNDLE=/run/secrets/ca; fi \
    && HF_HOME=/tmp/hf HF_HUB_DISABLE_XET=1 /opt/venv/bin/python /src/bake_tokenizer.py \
        "${TOKENIZER_MODEL}" "${TOKENIZER_REVISION}" /opt/tokenizer \
    && rm -rf /tmp/hf

FROM ${BASE_IMAGE} AS runtime-base
ARG APP_UID=10001
# A fixed non-root user; the HF cache directory is its only writable path in the image (mount a volume
# there for hub models: with a read-only root filesystem nothing else can be written but /tmp).
RUN groupadd --system --gid "${APP_UID}" tokenizer \
    && useradd --system --uid "${APP_UID}" --gid tokenizer --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tokenizer \
    && mkdir -p /var/cache/huggingface \
    && chown "${APP_UID}:${APP_UID}" /var/cache/huggingface
COPY --from=builder /opt/venv /opt/venv
# No torch here on purpose: TRANSFORMERS_NO_ADVISORY_WARNINGS silences transformers' start-up advice about it.
ENV PATH=/opt/venv/bin:${PATH} \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/var/cache/huggingface \
    HF_HUB_DISABLE_TELEMETRY=1 \
    TRANSFORMERS_NO_ADVISORY_WARNINGS=1
USER ${APP_UID}:${APP_UID}
EXPOSE 8000
# Python's standard library only (no curl in the image); follows TOKENIZER_SERVICE_PORT if it is set.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/opt/venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TOKENIZER_SERVICE_PORT', '8000'), timeout=4)"]
# One process, no shell, no init: the server is PID 1, handles SIGTERM itself (graceful drain) and never
# forks, so there is nothing to reap. Every other setting comes from TOKENIZER_SERVICE_* variables.
CMD ["tokenizer-service", "serve", "--host", "0.0.0.0"]

# `--target baked`: the tokenizer chosen at build time, loaded from /opt/tokenizer with no network at start.
FROM runtime-base AS baked
# hadolint ignore=DL3064
ARG TOKENIZER_MODEL
# hadolint ignore=DL3064
ARG TOKENIZER_REVISION
LABEL org.opencontainers.image.title="tokenizer-service" \
      io.github.tokenizer-service.model="${TOKENIZER_MODEL}" \
      io.github.tokenizer-service.revision="${TOKENIZER_REVISION}"
COPY --from=tokenizer-download /opt/tokenizer /opt/tokenizer
# hadolint ignore=DL3064
ENV TOKENIZER_SERVICE_MODEL=/opt/tokenizer \
    HF_HUB_OFFLINE=1

# The default target: the embedded default tokenizer, or a hub id / mounted directory via
# TOKENIZER_SERVICE_MODEL (downloaded into HF_HOME at start).
FROM runtime-base AS runtime
LABEL org.opencontainers.image.title="tokenizer-service"
