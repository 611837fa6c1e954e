"""Documents out of a work unit, streamed one line or row at a time: each line of a text file (without its line
break, empty ones too), each non-blank line of JSON Lines (an object whose ``text_field`` is a string; missing
``keep_fields`` are None), each row of a unit's Parquet row groups (``text_field`` a string column); gzip files
decompressed as read. With ``messages_field``, the conversation that field holds. A UTF-8 BOM is not part of the
first document; JSON is parsed by the standard library only. A record that cannot be a document is a
:class:`BadRecord`, or with ``on_bad_record="skip"`` is counted (docs/guides/pretokenize.md, "Bad input").
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..plurals import counted
from .errors import BadRecord, CorpusError
from .stores import Storage
from .work_units import WorkUnit, parquet_file

#: What to do with a record that cannot be read as a document.
BAD_RECORD_POLICIES = ("error", "skip")
#: Longest line read as one record; a longer one is a bad record (and is never held whole in memory).
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
#: How many skipped records are described in :attr:`DocumentReader.skipped_examples`.
SKIPPED_EXAMPLES = 5


def describe_skipped(skipped: int, examples: Sequence[str]) -> str:
    """``1 record skipped: a.jsonl:121: malformed JSON (...)``: a count of skipped records and the first few."""
    said = f"{counted(skipped, 'record')} skipped"
    if not examples:
        return said
    shown = examples[:SKIPPED_EXAMPLES]
    more = f"; and {skipped - len(shown):,} more" if skipped > len(shown) else ""
    return f"{said}: {'; '.join(shown)}{more}"


_BOM = b"\xef\xbb\xbf"
_READ_CHUNK = 1 << 20
_PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True, slots=True)
class Document:
    """One document. ``position``: the byte offset where its line starts (in the decompressed stream for gzip),
    or its Parquet row number; ``fields``: the kept fields, in the order asked for; ``conversation``: with a
    messages field, its messages (``text`` is then empty)."""

    text: str
    position: int
    fields: tuple[Any, ...] = ()
    conversation: list[dict[str, Any]] | None = None

    @property
    def size(self) -> int:
        """Characters of the document: its text's, or the string values of its conversation's messages."""
        if self.conversation is None:
            return len(self.text)
        return sum(_chars(value) for message in self.conversation for value in message.values())


class DocumentReader:
    """Iterate the documents of one :class:`WorkUnit`; ``consumed``: how much of its ``weight`` has been read."""

    def __init__(
        self,
        unit: WorkUnit,
        *,
        text_field: str = "text",
        keep_fields: Sequence[str] = (),
        on_bad_record: str = "error",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        storage: Storage | None = None,
        messages_field: str | None = None,
    ) -> None:
        if on_bad_record not in BAD_RECORD_POLICIES:
            raise CorpusError(f"on_bad_record must be one of {BAD_RECORD_POLICIES}, not {on_bad_record!r}")
        if keep_fields and unit.file.format.startswith("txt"):
            raise CorpusError(f"{unit.file.path}: a text file has no fields to keep ({', '.join(keep_fields)})")
        if messages_field is not None and unit.file.format.startswith("txt"):
            raise CorpusError(f"{unit.file.path}: a text file holds no conversations (--messages-field)")
        if messages_field is not None:
            text_field = messages_field  # the field each document is read from
        if text_field in keep_fields:
            raise CorpusError(f"the text field {text_field!r} cannot also be a kept field")
        self.messages = messages_field is not None
        self.unit = unit
        self.path = unit.file.path
        self.text_field = text_field
        self.keep_fields = tuple(keep_fields)
        self.on_bad_record = on_bad_record
        self.max_record_bytes = max_record_bytes
        self.storage = storage if storage is not None else Storage()
        self.consumed = 0
        self.skipped = 0
        self._examples: list[tuple[int, str]] = []  # (position, reason): the first few by position
        self.field_types: dict[str, Any] = {}  # Parquet: the arrow type of each kept field

    def locate(self, position: int) -> str:
        if self.unit.file.format == "parquet":
            return f"{self.path} row {position}"
        return f"{self.path}:{line_number(self._open(), position)}"

    def reject(self, position: int, reason: str) -> None:
        """Raise :class:`BadRecord` for the record at ``position``, or count it (any order: examples are sorted)."""
        if self.on_bad_record == "error":
            raise BadRecord(self.locate(position), reason)
        self.skipped += 1
        bisect.insort(self._examples, (position, reason))
        del self._examples[SKIPPED_EXAMPLES:]

    @property
    def skipped_examples(self) -> list[str]:
        """The first few skipped records in the file, as ``path:line: reason``."""
        return [f"{self.locate(position)}: {reason}" for position, reason in self._examples]

    def __iter__(self) -> Iterator[Document]:
        file_format = self.unit.file.format
        if file_format == "parquet":
            return self._parquet()
        return self._lines(json_lines=file_format.startswith("jsonl"))

    def _open(self) -> IO[bytes]:
        stream = self.storage.open_input(self.path)
        if self.unit.file.format.endswith(".gz"):
            decompressed = gzip.GzipFile(fileobj=stream, mode="rb")
            decompressed.myfileobj = stream  # type: ignore[assignment]  # closed with it, as if it had opened it
            return decompressed  # type: ignore[return-value]
        return stream

    def _lines(self, json_lines: bool) -> Iterator[Document]:
        start, end = self.unit.start, self.unit.end
        compressed = self.unit.file.format.endswith(".gz")
        with self._open() as stream:
            raw: Any = getattr(stream, "fileobj", None)  # gzip: the compressed file, whose position shows progress
            lines = 0
            position = start
            if start > 0:  # the line holding byte start-1 belongs to the unit before
                stream.seek(start - 1)
                position = start - 1 + _skip_line(stream)
            while compressed or position < end:
                line = stream.readline(self.max_record_bytes + 1)
                if not line:
                    break
                line_start = position
                position += len(line)
                if not compressed:
                    self.consumed = min(position, end) - start
                else:
                    lines += 1
                    if lines % 1024 == 0 and raw is not None:
                        self.consumed = min(raw.tell(), self.unit.weight)
                if len(line) > self.max_record_bytes and not line.endswith(b"\n"):
                    position += _skip_line(stream)
                    self.reject(line_start, f"the line is longer than {self.max_record_bytes} bytes")
                    continue
                if line_start == 0 and line.startswith(_BOM):
                    line = line[len(_BOM) :]
                try:
                    decoded = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.reject(line_start, f"not valid UTF-8 (byte {exc.start} of the line)")
                    continue
                if not json_lines:
                    yield Document(decoded[:-2] if decoded.endswith("\r\n") else decoded.removesuffix("\n"), line_start)
                elif (document := self._json_line(decoded, line_start)) is not None:
                    yield document
        self.consumed = self.unit.weight

    def _json_line(self, decoded: str, position: int) -> Document | None:
        if not decoded.strip():
            return None  # a blank line is not a record
        try:
            record = json.loads(decoded.rstrip("\r\n"))
        except ValueError as exc:
            self.reject(position, f"malformed JSON ({exc})")
            return None
        if isinstance(record, str):  # refused, as datasets' and datatrove's JSON readers refuse it too
            field = json.dumps(self.text_field, ensure_ascii=False)
            self.reject(
                position,
                f'a bare JSON string, not an object: write each line as {{{field}: "..."}}; a file of bare '
                f"strings converts with  jq -c '{{{field}: .}}' IN.jsonl > OUT.jsonl",
            )
            return None
        if not isinstance(record, dict):
            self.reject(position, f"a JSON {type(record).__name__}, not an object")
            return None
        text = record.get(self.text_field, _MISSING)
        if text is _MISSING:
            self.reject(position, f"no field {self.text_field!r} (fields: {', '.join(list(record)[:10])})")
            return None
        fields = tuple(record.get(name) for name in self.keep_fields)
        if self.messages:
            return self._conversation(text, position, fields)
        if not isinstance(text, str):
            self.reject(position, f"field {self.text_field!r} is {_json_type(text)}, not a string")
            return None
        return Document(text, position, fields)

    def _conversation(self, value: Any, position: int, fields: tuple[Any, ...]) -> Document | None:
        problem = conversation_problem(value)
        if problem is not None:
            self.reject(position, f"field {self.text_field!r} {problem}")
            return None
        return Document("", position, fields, value)

    def _parquet(self) -> Iterator[Document]:
        import pyarrow as pa

        parquet: Any = parquet_file(self.path, self.storage)
        schema = parquet.schema_arrow
        for name in (self.text_field, *self.keep_fields):
            if schema.get_field_index(name) < 0:
                raise CorpusError(f"{self.path}: no column {name!r} (columns: {', '.join(schema.names[:20])})")
        text_type = schema.field(self.text_field).type
        if self.messages:
            if not (pa.types.is_list(text_type) or pa.types.is_large_list(text_type)):
                raise CorpusError(
                    f"{self.path}: column {self.text_field!r} is {text_type}, not a list of messages (structs)"
                )
        elif not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type) or _is_string_view(text_type)):
            raise CorpusError(f"{self.path}: column {self.text_field!r} is {text_type}, not a string column")
        self.field_types = {name: schema.field(name).type for name in self.keep_fields}
        metadata = parquet.metadata
        groups = range(self.unit.start, self.unit.end)
        row = sum(metadata.row_group(i).num_rows for i in range(self.unit.start))
        rows_in_unit = sum(metadata.row_group(i).num_rows for i in groups) or 1
        first_row = row
        if not groups:
            return
        batches = parquet.iter_batches(
            batch_size=_PARQUET_BATCH_ROWS, row_groups=list(groups), columns=[self.text_field, *self.keep_fields]
        )
        for batch in batches:
            texts = batch.column(0).to_pylist()
            kept = [batch.column(i + 1).to_pylist() for i in range(len(self.keep_fields))]
            for i, text in enumerate(texts):
                if text is None:
                    self.reject(row + i, f"column {self.text_field!r} is null")
                    continue
                fields = tuple(column[i] for column in kept)
                if not self.messages:
                    yield Document(text, row + i, fields)
                elif (document := self._conversation(text, row + i, fields)) is not None:
                    yield document
            row += len(texts)
            self.consumed = self.unit.weight * (row - first_row) // rows_in_unit
        self.consumed = self.unit.weight


_MISSING = object()


def conversation_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a conversation (a non-empty list of objects with a string role), or None."""
    if not isinstance(value, list):
        return f"is {_json_type(value)}, not a list of messages"
    if not value:
        return "is an empty conversation: it needs at least one message"
    for j, message in enumerate(value):
        if not isinstance(message, dict):
            return f"message {j} is {_json_type(message)}, not an object"
        if not isinstance(message.get("role"), str):
            return f"message {j} has no role (a string)"
    return None


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_chars(item) for item in value)
    if isinstance(value, dict):
        return sum(_chars(item) for item in value.values())
    return 0


def _is_string_view(arrow_type: Any) -> bool:
    import pyarrow as pa

    check = getattr(pa.types, "is_string_view", None)
    return bool(check and check(arrow_type))


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _skip_line(stream: IO[bytes]) -> int:
    """Skip past the next newline (or to the end) in bounded chunks; the bytes skipped."""
    skipped = 0
    while True:
        chunk = stream.readline(_READ_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def line_number(stream: IO[bytes], position: int) -> int:
    """The 1-based number of the line starting at byte ``position`` (for messages: it rereads the file's head)."""
    newlines = 0
    with stream:
        remaining = position
        while remaining > 0:
            chunk = stream.read(min(_READ_CHUNK, remaining))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            remaining -= len(chunk)
    return newlines + 1
