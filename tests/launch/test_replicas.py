"""Replicas on one machine: ``TokenizerClient.launch(replicas=K)`` and ``tokenizer-service serve --replicas K``.

The sizing and the bad input run in this process, start nothing, and are quick. The rest are real processes, at
most two replicas (this machine has 2 cores): a training script with DataLoader workers (fork and spawn) against
the in-process tokenizer, a replica SIGKILLed under load, two local ranks attached to one set, owners killed with
SIGKILL, a replica that cannot start or serves another tokenizer; ``serve --replicas`` answering on its port,
draining on SIGTERM, failing at start, stopping when a replica dies, and leaving nothing behind its SIGKILLed
parent. Each launch test has a launch directory of its own."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.addresses import unix_socket_url
from service.client import AsyncTokenizerClient, LaunchError, RetryPolicy, TokenizerClient, TokenizerServiceError
from service.http.cli import main as serve_main
from service.launch.rendezvous import LAUNCH_DIR_ENV
from service.sizing import REFERENCE, cgroup_cpu_quota, check_replicas, choose_plan, plan_replicas
from testkit.launching import (
    check_a_launched_dataloader,
    kill,
    private_launch_directory,
    replica_sockets,
    texts_encoded,
    wait_gone,
)
from testkit.servers import REPO, ServerProcess, alive, free_port, script_env

TEXTS = ["今天天气很好", "The weather is nice today.", "质量太差了，不推荐", "一般般吧 so-so"]


@pytest.fixture
def launch_dir(monkeypatch) -> Iterator[Path]:
    with private_launch_directory() as folder:
        monkeypatch.setenv(LAUNCH_DIR_ENV, str(folder))
        yield folder


def servers_in(folder: Path | str) -> list[int]:
    """Processes whose command line names ``folder`` (the servers launched there), read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# -- sizing: the cores this process may use ---------------------------------------------------------------
def test_auto_without_a_calibration_is_the_planners_choice_on_the_reference_and_says_so():
    """No calibration: the planner on service.sizing.REFERENCE (the evidence, not this machine), few threads each."""
    for cores in (1, 2, 16, 64):
        plan = plan_replicas("AUTO", cores=cores, memory_bytes=1 << 40)
        chosen = choose_plan(REFERENCE, cores)
        assert (plan.count, plan.threads) == (chosen.replicas, chosen.threads), cores
        assert "not measured here" in plan.source and "calibrate" in plan.source
    assert plan_replicas("auto", cores=64, memory_bytes=1 << 40).threads_each <= 2  # #2337's pool: few threads each
    held = plan_replicas("auto", cores=64, memory_bytes=4 * REFERENCE.replica_bytes + (256 << 20))
    assert held.count == 4  # the memory limit caps the count
    even = plan_replicas(2, cores=4)
    assert (even.count, even.threads_each, even.warning) == (2, 2, None)  # an equal share of the cores each
    assert plan_replicas(3, cores=4).threads_each == 1
    assert plan_replicas(2, threads=3, cores=8).threads_each == 3  # threads= is each replica's
    crowded = plan_replicas(3, cores=2)
    assert crowded.count == 3 and "more than the 2 cores" in crowded.warning and "memory" in crowded.warning
    oversubscribed = plan_replicas(2, threads=4, cores=4)
    assert "8 Rust threads on 4 cores" in oversubscribed.warning and "2 each" in oversubscribed.warning


def test_the_cores_are_the_affinity_and_the_cgroup_quota_never_the_hosts_count(tmp_path):
    pinned = subprocess.run(
        [sys.executable, "-c", "import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
         "from service.sizing import available_cpus, plan_replicas\n"
         "print(available_cpus(), plan_replicas(2).warning is not None, os.cpu_count())"],
        cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert pinned[:2] == ["1", "True"], pinned  # taskset to one core: one core, whatever the host has
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(v2) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(v1) == 4.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(v1) is None


def test_the_launch_key_holds_the_replicas_asked_for_and_auto_is_one_key_whatever_the_cores(monkeypatch):
    """One set per tokenizer and settings per machine: replicas are part of the settings; ``"auto"`` is one key, so
    local ranks that see different cores (pinned each to its own) still meet at one set."""
    from service import sizing
    from service.launch.command import ServeCommand
    from service.launch.rendezvous import ServicePaths

    def key(replicas: object = 1, **options: object) -> str:
        return ServeCommand.build(None, options, None, sys.executable, replicas).key()

    assert key() == key(1) != key(2) != key("auto", calibrate=False)
    assert key(2) != key(2, threads=1)
    monkeypatch.setattr(sizing, "available_cpus", lambda: 64)
    many = ServeCommand.build(None, {"calibrate": False}, None, sys.executable, "auto")
    monkeypatch.setattr(sizing, "available_cpus", lambda: 7)
    few = ServeCommand.build(None, {"calibrate": False}, None, sys.executable, "auto")
    big, small = choose_plan(REFERENCE, 64, sizing.memory_limit()), choose_plan(REFERENCE, 7, sizing.memory_limit())
    assert (many.replicas, many.threads) == (big.replicas, big.threads)
    assert (few.replicas, few.threads) == (small.replicas, small.threads)
    assert many.key() == few.key()
    argv = many.argv(ServicePaths.of(Path("/tmp/nowhere"), many.key(), 0))
    assert argv[argv.index("--threads") + 1] == str(big.threads)  # each replica runs the plan's threads


def test_a_replica_takes_its_share_of_the_cores_and_of_the_memory_limit(monkeypatch):
    from service.engine.memory import default_memory_budget
    from service.http import settings as settings_module
    from service.http.settings import Settings

    monkeypatch.setattr(settings_module, "available_cpus", lambda: 8)
    monkeypatch.setattr(settings_module, "cgroup_memory_limit", lambda: 8 << 30)
    alone, quarter = Settings(), Settings(replica_of=4)
    assert (alone.rust_threads(), quarter.rust_threads(), Settings(replica_of=4, threads=3).rust_threads()) == (8, 2, 3)
    assert alone.memory_budget_bytes() == default_memory_budget(8 << 30)
    assert quarter.memory_budget_bytes() == default_memory_budget(2 << 30)  # four of them fit the one limit
    assert Settings(replica_of=4, memory_budget_mib=100).memory_budget_bytes() == 100 << 20  # as asked, per replica
    monkeypatch.setattr(settings_module, "cgroup_memory_limit", lambda: None)
    assert quarter.memory_budget_bytes() == default_memory_budget(None)  # no limit to share


# -- bad input ----------------------------------------------------------------------------------------------
BAD_REPLICAS = [(0, ValueError, "at least 1"), (-2, ValueError, "at least 1"), (1.5, ValueError, "whole number"),
                ("two", ValueError, "whole number"), (True, TypeError, "whole number"),
                (None, TypeError, "whole number"), ([2], TypeError, "whole number")]  # fmt: skip


@pytest.mark.parametrize("value,error,says", BAD_REPLICAS)
def test_bad_replicas_are_refused_before_anything_starts(value, error, says, launch_dir):
    with pytest.raises(error, match=says) as info:
        check_replicas(value)
    assert "auto" in str(info.value)  # what to write instead
    with pytest.raises(error, match=says):
        TokenizerClient.launch(replicas=value)
    assert list(launch_dir.iterdir()) == [] and servers_in(launch_dir) == []


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--replicas", "0"], "replicas must be at least 1"),
        (["--replicas", "-3"], "replicas must be at least 1"),
        (["--replicas", "two"], "replicas must be a whole number"),
        (["--replicas", "2", "--uds", "/tmp/x.sock"], "a Unix socket cannot be shared"),
        (["--replicas", "2", "--reuse-port"], "sets --reuse-port, --owners-file and --replica-of"),
        (["--replicas", "2", "--replica-of", "2"], "sets --reuse-port, --owners-file and --replica-of"),
    ],
)
def test_serve_refuses_bad_replicas_with_what_to_fix(argv, says, capsys):
    assert serve_main(argv) == 2
    assert says in capsys.readouterr().err


def test_serve_replicas_refuses_a_port_a_server_answers_on(servers, capsys):
    server = servers["wordpiece_default"]
    port = server.url.rsplit(":", 1)[1]
    assert serve_main(["--replicas", "2", "--port", port]) == 1
    said = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in said  # as `serve` alone says it
    assert TokenizerClient(server.url).info()["fingerprint"][:19] in said  # what serves there
    assert "pick another port: " in said and "--port " in said


# -- launch(replicas=2): DataLoader workers -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_launched_replicas_feed_spawned_dataloader_workers_the_in_process_tensors(
    launch_dir, tokenizer_dirs, reference_tokenizers, corpus, tmp_path
):
    """Spawned workers get the launched client pickled, and spread their calls over both replicas (the fork
    case, one server, is in test_launch.py)."""
    texts = corpus["zh"][:60] + corpus["en"][:20]
    model = str(tokenizer_dirs["sentencepiece"])
    check_a_launched_dataloader(model, "spawn", 2, texts, reference_tokenizers["sentencepiece"], tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_async_twin_spreads_its_calls_over_the_replicas(launch_dir, reference_tokenizers):
    async def main() -> tuple[list[list[list[int]]], list[float], tuple[int, ...]]:
        async with AsyncTokenizerClient.launch(replicas=2) as client:
            answers = await asyncio.gather(*(client(TEXTS) for _ in range(16)))
            encoded = [texts_encoded(url) for url in client.service.urls]
            return [a["input_ids"] for a in answers], encoded, client.service.pids

    answers, encoded, pids = asyncio.run(main())
    assert answers == [reference_tokenizers["wordpiece_default"](TEXTS)["input_ids"]] * 16
    assert all(count > 0 for count in encoded), encoded  # 16 calls at once: the fewest outstanding, both replicas
    assert all(wait_gone(pid, 10) for pid in pids)


# -- a replica killed under load ---------------------------------------------------------------------------
class Load:
    """Threads calling ``client`` in a loop, each call checked against ``expected``; when each call ended."""

    def __init__(self, client: TokenizerClient, expected: list[list[int]], threads: int) -> None:
        self.client, self.expected = client, expected
        self.stop = threading.Event()
        self.done: list[list[float]] = [[] for _ in range(threads)]
        self.failures: list[TokenizerServiceError | str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        for thread in self.threads:
            thread.start()

    def _run(self, index: int) -> None:
        while not self.stop.is_set():
            try:
                ids = self.client(TEXTS)["input_ids"]
            except TokenizerServiceError as exc:  # a lost call
                self.failures.append(exc)
                return
            if ids != self.expected:
                self.failures.append(f"wrong ids: {ids}")
            self.done[index].append(time.monotonic())

    def calls_between(self, start: float, end: float) -> list[int]:
        return [sum(start <= t <= end for t in times) for times in self.done]

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def wait_relaunched(client: TokenizerClient, replica: int, dead: int, seconds: float = 90.0) -> float:
    """When the replica's record named a new server that answers (monotonic time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pid = client.service.pids[replica]
        if pid != dead and alive(pid):
            try:
                if TokenizerClient(client.urls[replica], retry=RetryPolicy(max_attempts=1)).info():
                    return time.monotonic()
            except TokenizerServiceError:
                pass
        time.sleep(0.02)
    raise AssertionError(f"replica {replica} was not relaunched within {seconds}s")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_replica_sigkilled_under_load_loses_no_call_and_is_relaunched_once(launch_dir, reference_tokenizers, caplog):
    expected = reference_tokenizers["wordpiece_default"](TEXTS)["input_ids"]
    caplog.set_level(logging.WARNING, logger="service.launch")
    with TokenizerClient.launch(replicas=2, retry=RetryPolicy(max_attempts=10, deadline=60)) as client:
        first = client.service.pids
        load = Load(client, expected, threads=3)
        try:
            time.sleep(0.5)
            killed = time.monotonic()
            os.kill(first[0], signal.SIGKILL)  # mid-training: an OOM kill, say
            relaunched = wait_relaunched(client, 0, first[0])
            time.sleep(0.5)
            again = client.service.pids
            assert again[1] == first[1] and alive(again[0])
            os.kill(again[0], signal.SIGKILL)  # its second death: given up on, the calls stay on replica 1
            assert wait_gone(again[0])
            deadline = time.monotonic() + 30  # (replica 0 may be cooling down in the clients: up to backoff_max)
            while not any("died again after its one relaunch" in r.message for r in caplog.records):
                assert time.monotonic() < deadline, [r.message for r in caplog.records]
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            load.finish()
        assert load.failures == [], load.failures[:3]
        # the calls moved to the other replica at once: every thread went on calling while replica 0 relaunched
        # (a transport that waits for the relaunch holds the thread that noticed for the whole of it)
        moved = load.calls_between(killed + 0.1, relaunched - 0.1)
        assert relaunched - killed > 0.5 and all(count > 0 for count in moved), (moved, relaunched - killed)
        log = Path(client.service.log_paths[0]).read_text()
        assert "relaunched (launch 2 of 2)" in log
        given_up = [r.message for r in caplog.records if "died again after its one relaunch" in r.message]
        assert given_up[0].startswith("the launched replica 1 of 2 of the tokenizer service") and len(given_up) == 1
        assert client(TEXTS)["input_ids"] == expected  # replica 1 serves on
        pids = client.service.pids
    for pid in pids:
        assert wait_gone(pid, 20)


# -- local ranks and owners --------------------------------------------------------------------------------
RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from service.client import TokenizerClient

    client = TokenizerClient.launch(replicas=2)
    print(json.dumps({"pids": client.service.pids, "launched": client.service.launched}), flush=True)
    for line in sys.stdin:
        if line.strip() == "encode":
            print(json.dumps([client(["rank says hello"])["input_ids"] for _ in range(4)]), flush=True)
        else:
            break
""")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_local_ranks_attach_to_one_set_that_lives_until_the_last_has_gone(launch_dir):
    def rank(local_rank: int) -> subprocess.Popen[str]:
        env = script_env(LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE="2", **{LAUNCH_DIR_ENV: str(launch_dir)})
        return subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    ranks = [rank(0), rank(1)]  # started together: they race for the rendezvous lock
    try:
        reports = [json.loads(r.stdout.readline()) for r in ranks]  # type: ignore[union-attr]
        assert reports[0]["pids"] == reports[1]["pids"] and len(set(reports[0]["pids"])) == 2
        assert sorted(r["launched"] for r in reports) == [False, True]  # one set: one launched, one attached
        assert sorted(servers_in(launch_dir)) == sorted(reports[0]["pids"])  # and no other server
        replicas = reports[0]["pids"]
        launcher = ranks[[r["launched"] for r in reports].index(True)]
        other = ranks[[r["launched"] for r in reports].index(False)]
        os.kill(launcher.pid, signal.SIGKILL)  # the rank that started the set dies first, without a word
        launcher.wait(10)
        time.sleep(1.0)  # four times the replicas' owner checks
        assert all(alive(pid) for pid in replicas), "a replica died with its launcher while another rank used it"
        other.stdin.write("encode\n")  # type: ignore[union-attr]
        other.stdin.flush()  # type: ignore[union-attr]
        assert all(ids[0][0] == 2 for ids in json.loads(other.stdout.readline()))  # type: ignore[union-attr]
        other.stdin.write("exit\n")  # type: ignore[union-attr]
        other.stdin.flush()  # type: ignore[union-attr]
        assert other.wait(30) == 0
        assert all(wait_gone(pid) for pid in replicas), "a replica outlived the last rank"
    finally:
        for r in ranks:
            kill(r.pid)
            r.wait(10)


KILLED_OWNER = textwrap.dedent("""
    import json, time
    from service.client import TokenizerClient

    client = TokenizerClient.launch(replicas=2)
    client(["used"])
    print(json.dumps({"pids": client.service.pids}), flush=True)
    time.sleep(120)
""")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_owner_killed_with_sigkill_leaves_no_replica(launch_dir):
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        env=script_env(**{LAUNCH_DIR_ENV: str(launch_dir)}),
    )
    pids: list[int] = []
    try:
        pids = json.loads(owner.stdout.readline())["pids"]  # type: ignore[union-attr]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        assert all(wait_gone(pid, 10) for pid in pids), "a SIGKILLed owner left a replica running"
        assert servers_in(launch_dir) == []
    finally:
        kill(owner.pid)
        for pid in pids:
            kill(pid)


# -- a replica that cannot start, or serves another tokenizer ---------------------------------------------
def interpreter_for_replica_two(path: Path, extra: str) -> str:
    """An interpreter that runs the second replica with ``extra`` arguments (the first as asked)."""
    path.write_text(
        "#!/bin/sh\n"
        'case "$*" in *-1.sock*) exec ' + f'"{sys.executable}" "$@" {extra} ;; esac\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_replica_that_cannot_start_or_serves_another_tokenizer_fails_the_launch(launch_dir, tokenizer_dirs, tmp_path):
    broken = interpreter_for_replica_two(tmp_path / "broken", "--model /no/such/tokenizer")
    with pytest.raises(LaunchError) as info:
        TokenizerClient.launch(replicas=2, python=broken)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("replica 2 of 2 of the tokenizer service for the embedded default tokenizer")
    assert "tokenizer-service serve:" in first_line and "/no/such/tokenizer" in first_line  # its own error line
    assert info.value.log_path.endswith("-1.log")
    assert servers_in(launch_dir) == [], "replica 1 was left running beside the one that failed"

    other = interpreter_for_replica_two(tmp_path / "other", f"--model {tokenizer_dirs['bytelevel_bpe']}")
    with pytest.raises(LaunchError, match="the replicas serve different tokenizers") as info:
        TokenizerClient.launch(replicas=2, python=other)
    assert "replica 1 of 2" in str(info.value) and "replica 2 of 2" in str(info.value)
    assert servers_in(launch_dir) == []


# -- serve --replicas ---------------------------------------------------------------------------------------
def start_replicas(log: Path, *args: str) -> tuple[ServerProcess, dict[int, str]]:
    """``serve --replicas 2`` up: every replica ready (the parent has said so); replica pid -> its own socket."""
    server = ServerProcess("--replicas", "2", *args, log_path=log).start()
    deadline = time.monotonic() + 90
    while " with 2 replicas (pids " not in log.read_text():
        assert time.monotonic() < deadline and server.proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    sockets = replica_sockets(server.pid)
    assert len(sockets) == 2
    return server, sockets


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_serve_replicas_answers_on_its_port_and_drains_every_replica_on_sigterm(tmp_path, reference_tokenizers, corpus):
    log = tmp_path / "serve.log"
    server, sockets = start_replicas(log)
    try:
        reference = reference_tokenizers["wordpiece_default"]
        clients = [TokenizerClient(server.url) for _ in range(16)]  # 16 connections: the kernel spreads them
        for client in clients:
            assert client(TEXTS, padding=True)["input_ids"] == reference(TEXTS, padding=True)["input_ids"]
        encoded = [texts_encoded(unix_socket_url(path)) for path in sockets.values()]
        assert all(count > 0 for count in encoded), f"one port, yet a replica served nothing: {encoded}"

        long_texts = [text * 40 for text in corpus["zh"][:256]]  # about a second of encoding on one thread
        answered: list[list[list[int]]] = []
        in_flight = threading.Thread(target=lambda: answered.append(clients[0](long_texts)["input_ids"]))
        in_flight.start()
        time.sleep(0.3)
        stopped = time.monotonic()
        os.kill(server.pid, signal.SIGTERM)  # to the parent only: it forwards it, every replica drains
        assert server.proc.wait(60) == 0, log.read_text()[-3000:]
        in_flight.join(30)
        assert answered and answered[0] == reference(long_texts)["input_ids"], "a request in flight was cut"
        assert all(not alive(pid) for pid in sockets), "a replica outlived its parent's exit"
        assert log.read_text().count("drained in") == 2 and time.monotonic() - stopped < 30
    finally:
        server.stop(signal.SIGKILL)
        for pid in sockets:
            kill(pid)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_serve_replicas_stops_the_set_when_a_replica_dies_and_leaves_none_after_a_sigkill(tmp_path):
    log = tmp_path / "dies.log"
    server, sockets = start_replicas(log)
    try:
        dead, survivor = list(sockets)
        os.kill(dead, signal.SIGKILL)
        assert server.proc.wait(60) == 1  # never a partial set that looks healthy
        assert wait_gone(survivor, 5)
        assert re.search(rf"replica \d of 2, pid {dead} was killed by SIGKILL while serving", log.read_text())
    finally:
        server.stop(signal.SIGKILL)
        for pid in sockets:
            kill(pid)

    server, sockets = start_replicas(tmp_path / "killed.log")
    try:
        os.kill(server.pid, signal.SIGKILL)  # the parent, without a word: each replica's owners watch stops it
        server.proc.wait(10)
        assert all(wait_gone(pid, 15) for pid in sockets), "a replica outlived its SIGKILLed parent"
    finally:
        for pid in sockets:
            kill(pid)
        for path in sockets.values():  # what the killed parent could not remove: its folder of owners files
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_serve_replicas_fails_at_start_with_the_replicas_own_error_and_leaves_none(tmp_path):
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--replicas", "2", "--port", str(port), "--model", "/no/such/tok"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 1
    assert re.search(r"^tokenizer-service serve: .*/no/such/tok", done.stderr, re.MULTILINE), done.stderr[-2000:]
    assert re.search(r"replica \d of 2, pid \d+ exited with code 1 before it was ready; stopping the others",
                     done.stderr), done.stderr[-2000:]  # fmt: skip
    assert servers_in(f"--port\0{port}\0") == []
