"""Object stores on 127.0.0.1 for tests and benchmarks, one per protocol the docs name, each a real server of
that store's protocol reached through fsspec exactly as a user's job reaches the real one:

- ``s3://``: moto's server mode (as s3fs's own test suite runs it), in a thread of this process;
- ``gs://``: gcp-storage-emulator (the GCS JSON API, pure Python, from PyPI), in a thread of this process;
- ``az://``: Azurite (Microsoft's Azure Storage emulator, the npm package ``azurite``), its blob service in a
  Node process of its own, stopped by PID.

Each listens on a free port behind a small TCP relay on another port (:class:`LoopbackStore`): stopping the
store closes the relay's port and drops every open connection (as a store that goes away does; the servers
themselves would keep serving connections already open); starting it again listens on the same port, with the
buckets intact (the server itself keeps running)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testkit.servers import REPO, free_port

#: Credentials for the fake S3 store: moto accepts any; the standard chain finds them in the environment.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Relay:
    """Forwards connections from 127.0.0.1:``port`` to 127.0.0.1:``target``; :meth:`stop` closes the port and
    drops every connection, :meth:`start` listens again on the same port."""

    def __init__(self, target: int, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            self._close(end)

    def _close(self, end: socket.socket) -> None:
        with self._lock:
            self._open.discard(end)
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        end.close()

    def stop(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            ends = list(self._open)
        for end in ends:
            self._close(end)


class StoreUnavailable(RuntimeError):
    """The store's server is not installed here (the message says how to install it)."""


class LoopbackStore:
    """A store's server on 127.0.0.1, reached at :attr:`endpoint` through a :class:`Relay` (:meth:`stop` and
    :meth:`start` stage an outage). What a job needs to reach it: :attr:`storage_options` (its
    ``--storage-options``) and :meth:`client_env` (environment variables of the job's process). Buckets are
    named as in a URL's first segment (``s3://bucket/key``, ``gs://bucket/key``, ``az://container/key``)."""

    #: The URL scheme, and the extra of pyproject.toml that installs its fsspec package.
    scheme = ""
    extra = ""

    def __init__(self) -> None:
        self._relay: Relay | None = None

    # -- what each store defines ------------------------------------------------------------------------
    def _launch(self) -> int:
        """Start the server (first start only); its port."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    @property
    def storage_options(self) -> dict[str, Any]:
        raise NotImplementedError

    def client_env(self) -> dict[str, str]:
        """The environment variables a job process needs to reach this store (credentials, client settings)."""
        return {}

    def filesystem(self) -> Any:
        """An fsspec filesystem on this store, listings never cached (tests look at what workers wrote)."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._relay is not None
        return self._relay.port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def options_json(self) -> str:
        return json.dumps(self.storage_options)

    def url(self, path: str) -> str:
        """``bucket/key`` as this store's URL."""
        return f"{self.scheme}://{path}"

    @property
    def running(self) -> bool:
        return self._relay is not None and self._relay._listener is not None

    def start(self) -> LoopbackStore:
        """Start the server (first time), and open the relay's port (again)."""
        if self._relay is None:
            self._relay = Relay(self._launch())
        self._relay.start()
        return self

    def stop(self) -> None:
        """The store goes away: its port closed, every connection dropped (its buckets stay)."""
        if self._relay is not None:
            self._relay.stop()

    def close(self) -> None:
        self.stop()
        if self._relay is not None:
            self._shutdown()
            self._relay = None

    def make_buckets(self, *names: str) -> None:
        fs = self.filesystem()
        for name in names:
            fs.mkdir(name)

    def tree(self, prefix: str) -> dict[str, bytes]:
        """Every object under ``bucket/prefix`` (a URL of this store, or without its scheme), by key relative
        to it."""
        fs = self.filesystem()
        root = prefix.removeprefix(f"{self.scheme}://").rstrip("/")
        try:
            keys = sorted(fs.find(root))
        except FileNotFoundError:
            return {}
        return {key[len(root) + 1 :]: fs.cat_file(key) for key in keys}

    def __enter__(self) -> LoopbackStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoopbackS3(LoopbackStore):
    """moto's S3 server, in a thread of this process; the credentials come from the environment (moto accepts
    any, unless :meth:`authenticating`)."""

    scheme = "s3"
    extra = "s3"

    def __init__(self) -> None:
        super().__init__()
        self._server: Any = None
        os.environ.update({name: os.environ.get(name, value) for name, value in CREDENTIALS.items()})

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint}

    def client_env(self) -> dict[str, str]:
        """The credentials (the standard chain reads them)."""
        return dict(CREDENTIALS)

    @property
    def direct_endpoint(self) -> str:
        """moto's own port, without the relay (for benchmarks)."""
        return f"http://127.0.0.1:{self._moto_port}"

    def _launch(self) -> int:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self._moto_port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self._moto_port, verbose=False)
        self._server.start()
        # moto keeps its buckets in this process's memory, whatever server serves them: a new store starts
        # empty, not with the buckets an earlier module's store left (FileExistsError on its first mkdir).
        reset = urllib.request.Request(f"http://127.0.0.1:{self._moto_port}/moto-api/reset", method="POST")
        with urllib.request.urlopen(reset, timeout=30) as answer:
            answer.read()
        return self._moto_port

    def _shutdown(self) -> None:
        self._server.stop()
        self._server = None

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(
            client_kwargs={"endpoint_url": self.endpoint}, use_listings_cache=False, skip_instance_cache=True
        )

    def user(self, name: str, statements: list[dict[str, Any]]) -> dict[str, str]:
        """An IAM user of the store allowed only ``statements`` (an IAM policy's), and the environment
        variables of its access key, for :meth:`authenticating`."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"])
        iam.create_user(UserName=name)
        policy = {"Version": "2012-10-17", "Statement": statements}
        iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}

    @contextmanager
    def authenticating(self) -> Iterator[None]:
        """Inside the block the store checks every request's credentials and IAM policy, as AWS does (moto
        accepts any credentials otherwise)."""
        self._moto_api("reset-auth", "0")
        try:
            yield
        finally:
            self._moto_api("reset-auth", "inf")

    def _moto_api(self, action: str, body: str) -> None:
        request = urllib.request.Request(
            f"{self.direct_endpoint}/moto-api/{action}", body.encode(), {"Content-Type": "text/plain"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def __enter__(self) -> LoopbackS3:
        self.start()
        return self


#: What gcsfs needs to talk to a server of the JSON API alone: its default filesystem (since 2026) first asks
#: the bucket's layout over gRPC (zonal and hierarchical buckets), which an emulator does not serve (each
#: attempt fails a TLS handshake and is retried for minutes). Real GCS needs nothing.
GCS_CLIENT_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


class LoopbackGCS(LoopbackStore):
    """gcp-storage-emulator (the GCS JSON API, in memory), in a thread of this process; anonymous access
    (``token: anon``, as against any emulator)."""

    scheme = "gs"
    extra = "gcs"

    def __init__(self) -> None:
        super().__init__()
        self._server: Any = None
        os.environ.update({name: os.environ.get(name, value) for name, value in GCS_CLIENT_ENV.items()})

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "loopback"}

    def client_env(self) -> dict[str, str]:
        return dict(GCS_CLIENT_ENV)

    def _launch(self) -> int:
        from gcp_storage_emulator.server import create_server

        logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
        port = free_port()
        self._server = create_server("127.0.0.1", port, in_memory=True)
        self._server.start()
        # a client that closes a connection early (a read-ahead cut short) is not worth a traceback
        self._server._api._httpd.handle_error = lambda request, address: None
        return port

    def _shutdown(self) -> None:
        self._server.stop()
        self._server = None

    def filesystem(self) -> Any:
        import gcsfs

        return gcsfs.GCSFileSystem(**self.storage_options, use_listings_cache=False, skip_instance_cache=True)


#: Azurite's pinned version is the Makefile's (``make emulators`` installs it under .cache/azurite);
#: ``$TOKENIZER_SERVICE_AZURITE`` names another copy's ``azurite-blob`` (the mutation check's copy has no .cache).
AZURITE_BIN = REPO / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ENV = "TOKENIZER_SERVICE_AZURITE"
#: Azurite's one account and its key: public, the same in every copy of Azurite (Microsoft's documentation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class LoopbackAzure(LoopbackStore):
    """Azurite's blob service (in memory) in a Node process of its own, stopped by PID; the account's key and
    endpoint reach adlfs as a connection string (its ``connection_string`` storage option)."""

    scheme = "az"
    extra = "azure"

    def __init__(self) -> None:
        super().__init__()
        self._process: subprocess.Popen[bytes] | None = None
        self._workspace: Path | None = None

    @staticmethod
    def binary() -> Path:
        """Azurite's blob server: the project's copy, else one on PATH; StoreUnavailable says how to install."""
        for candidate in (os.environ.get(AZURITE_ENV), AZURITE_BIN):
            if candidate and Path(candidate).exists():
                return Path(candidate)
        found = shutil.which("azurite-blob")
        if found is None:
            raise StoreUnavailable(
                "Azurite (npm package azurite) is not installed: `make emulators` (needs node and npm) installs "
                "it under .cache/azurite"
            )
        return Path(found)

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint}/{AZURITE_ACCOUNT};"
        )

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"connection_string": self.connection_string}

    def _launch(self) -> int:
        binary = self.binary()
        port = free_port()
        self._workspace = Path(tempfile.mkdtemp(prefix="azurite-"))
        log = open(self._workspace / "azurite.log", "wb")
        command = [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence"]
        command += ["--silent", "--disableTelemetry", "--skipApiVersionCheck"]
        self._process = subprocess.Popen(command, cwd=self._workspace, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return port
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                output = (self._workspace / "azurite.log").read_text(errors="replace")
                self._shutdown()
                raise StoreUnavailable(f"Azurite did not start on 127.0.0.1:{port}: {output[-2000:]}")
            time.sleep(0.1)

    def _shutdown(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(30)
            self._process = None
        if self._workspace is not None:
            shutil.rmtree(self._workspace, ignore_errors=True)
            self._workspace = None

    def filesystem(self) -> Any:
        import adlfs

        return adlfs.AzureBlobFileSystem(
            connection_string=self.connection_string, use_listings_cache=False, skip_instance_cache=True
        )


#: Every store the docs name that runs here, by the extra that installs its package.
STORES: dict[str, type[LoopbackStore]] = {"s3": LoopbackS3, "gcs": LoopbackGCS, "azure": LoopbackAzure}
