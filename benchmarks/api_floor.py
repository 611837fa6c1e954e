"""What the tokenizers Python API itself costs the calling thread per batch, by version: the floor under any server.

    .venv/bin/python -m benchmarks.api_floor                                  # this venv's tokenizers (~1 min)
    .venv/bin/python -m benchmarks.api_floor --python /tmp/tok1/bin/python   # + another venv's, side by side

Run from the repository root. For each corpus of ``benchmarks.cpu_split`` (batches of 256 texts, truncation at
128, the tokenizer.json the servers load) and each interpreter (this one, then each ``--python``: a venv with
another tokenizers release, numpy and orjson; it runs this file by path and imports nothing else of the
repository), one thread measures its own CPU (``time.thread_time``) per batch, median over the batches:

- **parse**: the texts out of a JSON request body (orjson), as a server must;
- **in call**: the encode call (``encode_batch_fast`` with truncation set on the tokenizer in 0.x; ``encode_batch``
  with a ``Truncation`` in 1.x), parallelism on. In 0.x the calling thread waits on the pool and this is the
  call's Python side (texts to Rust strings, encodings to Python objects, GIL held); 1.x releases the GIL and the
  calling thread tokenizes beside the pool, so there only part of it holds the GIL;
- **ids read**: every encoding's ids into int64: 0.x gives a Python list of Python ints per encoding (read into one
  buffer with ``array.fromlist``, the cheapest conversion measured), 1.x a numpy array (``ids_array``);
- **freed**: dropping the encodings (Rust frees them on this thread, GIL held).

A server's GIL side can be no lighter than parse + ids read + freed + the GIL-held part of the call: this is why
one ``serve`` process holds its GIL for what it does (``benchmarks.cpu_split`` prints the 0.x floor beside it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 5


def measure(tokenizer_file: str, batches: list[list[str]], max_length: int, rounds: int) -> dict[str, Any]:
    """The per-batch medians, in ms of this thread's CPU, with whichever tokenizers this interpreter has."""
    from array import array

    import orjson
    import tokenizers

    backend = tokenizers.Tokenizer.from_file(tokenizer_file)
    version_one = not hasattr(backend, "encode_batch_fast")
    if version_one:  # 1.x: options per call, numpy ids
        truncation = tokenizers.Truncation(max_length)

        def encode(texts: list[str]) -> list[Any]:
            return list(backend.encode_batch(texts, truncation=truncation))

        def read(encodings: list[Any]) -> Any:
            return [encoding.ids_array for encoding in encodings]
    else:  # 0.x: truncation set on the tokenizer, a list of ints per encoding
        backend.enable_truncation(max_length=max_length)

        def encode(texts: list[str]) -> list[Any]:
            return list(backend.encode_batch_fast(texts))

        def read(encodings: list[Any]) -> Any:
            ids = array("Q")
            for encoding in encodings:
                ids.fromlist(encoding.ids)
            return ids

    bodies = [orjson.dumps({"texts": batch}) for batch in batches]
    for body in bodies:  # untimed: the pool and the caches warm up
        read(encode(orjson.loads(body)["texts"]))
    times: dict[str, list[float]] = {"parse": [], "in call": [], "ids read": [], "freed": []}
    for _ in range(rounds):
        for body in bodies:
            started = time.thread_time()
            texts = orjson.loads(body)["texts"]
            parsed = time.thread_time()
            encodings = encode(texts)
            encoded = time.thread_time()
            ids = read(encodings)
            read_at = time.thread_time()
            del encodings, ids
            freed = time.thread_time()
            spans = (parsed - started, encoded - parsed, read_at - encoded, freed - read_at)
            for key, seconds in zip(times, spans, strict=True):
                times[key].append(seconds)
    return {
        "tokenizers": tokenizers.__version__,
        "ms": {key: 1000 * statistics.median(values) for key, values in times.items()},
    }


def _child(task_file: str) -> int:
    task = json.loads(Path(task_file).read_text("utf-8"))
    limit, rounds = task["max_length"], task["rounds"]
    results = {name: measure(row["tokenizer"], row["batches"], limit, rounds) for name, row in task["rows"].items()}
    print(json.dumps(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[], help="another venv's interpreter to measure too")
    parser.add_argument("--corpora", default=None, help="comma-separated subset of benchmarks.cpu_split's corpora")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"passes over the batches (default {ROUNDS})")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child)

    from benchmarks import corpus
    from benchmarks.cpu_split import BATCH, CORPORA, FULL
    from benchmarks.processes import tokenizer_dir
    from benchmarks.scenarios.measuring import OPTIONS_BATCH

    rows = {
        row.name: {
            "label": row.label,
            "tokenizer": str(tokenizer_dir(row.tokenizer) / "tokenizer.json"),
            "batches": corpus.batches_of(corpus.bucket_texts(row.language, row.bucket, FULL.set_size), BATCH),
        }
        for row in CORPORA
        if args.corpora is None or row.name in args.corpora.split(",")
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="api-floor-") as scratch:
        task_file = Path(scratch) / "task.json"
        task = {"rows": rows, "max_length": OPTIONS_BATCH["max_length"], "rounds": args.rounds}
        task_file.write_text(json.dumps(task), "utf-8")
        for python in [sys.executable, *args.python]:
            done = subprocess.run(
                [python, str(Path(__file__).resolve()), "--child", str(task_file)],
                capture_output=True,
                text=True,
                check=False,
                env={"TOKENIZERS_PARALLELISM": "true", "PATH": "/usr/bin:/bin"},
            )
            if done.returncode != 0:
                print(f"{python} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                return 1
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    max_length = OPTIONS_BATCH["max_length"]
    print(f"The calling thread's CPU per batch of {BATCH} texts (truncation at {max_length}), ms, median:")
    header = f"{'corpus, tokenizer':48} | {'tokenizers':>10} | {'parse':>6} {'in call':>7} {'ids read':>8} {'freed':>6}"
    print(header + "\n" + "-" * len(header))
    for name, row in rows.items():
        for result in results:
            ms = result[name]["ms"]
            print(
                f"{row['label']:48} | {result[name]['tokenizers']:>10} | {ms['parse']:6.2f} {ms['in call']:7.2f} "
                f"{ms['ids read']:8.2f} {ms['freed']:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
