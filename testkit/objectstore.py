"""A real S3-protocol server on 127.0.0.1 for tests and benchmarks: moto's server mode (as s3fs's own test
suite runs it), in a thread of this process, on a free port, reached through a small TCP relay on another
port. Stopping the store closes the relay's port and drops every open connection (as a store that goes away
does; moto's own server would keep serving connections already open); starting it again listens on the same
port, with the buckets intact (moto's state lives in this process)."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from testkit.servers import free_port

#: Credentials for the fake store: moto accepts any; the standard chain finds them in the environment.
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


class LoopbackS3:
    """moto's S3 server on 127.0.0.1, reached at :attr:`endpoint` (a relay: :meth:`stop` and :meth:`start`
    stage an outage); :meth:`client_env` is the environment a job process needs."""

    def __init__(self) -> None:
        self._server: Any = None
        self._relay: Relay | None = None
        os.environ.update({name: os.environ.get(name, value) for name, value in CREDENTIALS.items()})

    @property
    def port(self) -> int:
        assert self._relay is not None
        return self._relay.port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint}

    @property
    def options_json(self) -> str:
        return json.dumps(self.storage_options)

    def client_env(self) -> dict[str, str]:
        """What a job process needs to reach this store: the credentials (the standard chain reads them)."""
        return dict(CREDENTIALS)

    @property
    def direct_endpoint(self) -> str:
        """moto's own port, without the relay (for benchmarks)."""
        return f"http://127.0.0.1:{self._moto_port}"

    @property
    def running(self) -> bool:
        return self._relay is not None and self._relay._listener is not None

    def start(self) -> LoopbackS3:
        """Start moto (first time), and open the relay's port (again)."""
        if self._server is None:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
            self._moto_port = free_port()
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self._moto_port, verbose=False)
            self._server.start()
            self._relay = Relay(self._moto_port)
        assert self._relay is not None
        self._relay.start()
        return self

    def stop(self) -> None:
        """The store goes away: its port closed, every connection dropped (its buckets stay)."""
        if self._relay is not None:
            self._relay.stop()

    def close(self) -> None:
        self.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def filesystem(self) -> Any:
        """An s3fs filesystem on this store, listings never cached (tests look at what workers wrote)."""
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

    def tree(self, prefix: str) -> dict[str, bytes]:
        """Every object under ``bucket/prefix``, by key relative to it."""
        fs = self.filesystem()
        root = prefix.removeprefix("s3://").rstrip("/")
        try:
            keys = sorted(fs.find(root))
        except FileNotFoundError:
            return {}
        return {key[len(root) + 1 :]: fs.cat_file(key) for key in keys}

    def __enter__(self) -> LoopbackS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
