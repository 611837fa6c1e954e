"""Token shards: one per work unit, named from it, each file written whole, closed by a ``.done`` record.

``<out>/<unit name>.parquet``
    One row per document: ``input_ids`` (a list of the narrowest unsigned integer type that holds every id
    of the vocabulary: uint16 up to 65,536 tokens, else uint32), ``position`` (where the document is in its
    input file: the byte offset of its line, or its row number in a Parquet file) and the kept fields.
    Row groups of at most 8,192 documents or 262,144 tokens, zstd-compressed.
``<out>/<unit name>.ds``, ``.ds.index`` and ``.ds.metadata`` (``--format flat``)
    datatrove's layout, read by its ``DatatroveFolderDataset``: every document's ids back to back as
    little-endian uint16/uint32 (``numpy.memmap(path, dtype)`` reads it; nanoGPT's ``train.bin`` is the same
    kind of array), the end offset of each document in tokens as little-endian uint64, and datatrove's
    metadata (``<tokenizer>|<bytes per token>``, the token count, the count in words).
``<out>/<unit name>.bin`` and ``.idx`` (``--format megatron``)
    Megatron-LM's indexed dataset, exactly as its ``tools/preprocess_data.py`` writes it for the same ids
    (one sequence per non-empty document; uint16 below 65,500 tokens, else int32, its ``optimal_dtype``),
    read by megatron-core's ``IndexedDataset``; the manifest's ``megatron-data-args.txt`` lists the prefixes.

A shard's bytes depend only on its unit's content, the tokenizer and the output settings -- never on the
number of workers, the request sizes or the timing -- so N workers write the same bytes as one.
"""

from __future__ import annotations

import json
import struct
from contextlib import ExitStack
from typing import IO, Any

import numpy as np

from ..corpus import CorpusError, Document, Folder, WorkUnit
from ..corpus.progress import human

SUFFIXES = {"parquet": (".parquet",), "flat": (".ds", ".ds.index", ".ds.metadata"), "megatron": (".bin", ".idx")}
GROUP_ROWS = 8192
GROUP_TOKENS = 256 * 1024  # ~0.5-1 MB of ids: the Parquet writer then needs ~60 MB, not ~110 MB
#: Megatron's index: header, version, dtype code; its dtype codes (``DType`` of ``indexed_dataset.py``).
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {"uint16": 8, "int32": 4}


def token_dtype(vocab_size: int, output_format: str) -> np.dtype[Any]:
    """The type of the ids in a shard: the narrowest little-endian unsigned type holding ids ``0 ..
    vocab_size - 1``; for Megatron, what its ``DType.optimal_dtype`` picks (uint16 below 65,500, else int32)."""
    if output_format == "megatron":
        return np.dtype("<u2") if vocab_size < 65500 else np.dtype("<i4")
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_files(unit: WorkUnit, output_format: str) -> list[str]:
    """The names of a unit's shard files in the output folder."""
    return [unit.name + suffix for suffix in SUFFIXES[output_format]]


class _Aborted(Exception):
    pass


class ShardWriter:
    """Writes one shard: ``write()`` documents in order, then ``commit()`` (every file appears whole) or
    ``abort()`` (nothing appears)."""

    def __init__(self, folder: Folder, unit: WorkUnit, output_format: str) -> None:
        self.folder = folder
        self.unit = unit
        self.names = shard_files(unit, output_format)
        self.documents = 0
        self.tokens = 0
        self._stack = ExitStack()

    def _file(self, name: str) -> IO[bytes]:
        stream: IO[bytes] = self._stack.enter_context(self.folder.writer(name))
        return stream

    def write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document]) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """Write what is buffered, before the files are put in place."""

    def commit(self) -> None:
        self._finish()
        self._stack.close()

    def abort(self) -> None:
        self._stack.__exit__(_Aborted, _Aborted(), None)


class FlatShardWriter(ShardWriter):
    """datatrove's format: tokens and document ends, streamed to their files; the metadata at the end."""

    def __init__(self, folder: Folder, unit: WorkUnit, dtype: np.dtype[Any], tokenizer: str) -> None:
        super().__init__(folder, unit, "flat")
        self.dtype = dtype
        self.tokenizer = tokenizer.replace("|", "_")  # datatrove splits the first line at "|"
        tokens_name, index_name, self._metadata_name = self.names
        self._tokens = self._file(tokens_name)
        self._index = self._file(index_name)

    def write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document]) -> None:
        self._tokens.write(np.ascontiguousarray(ids, dtype=self.dtype).data)
        ends = np.cumsum(lengths, dtype=np.uint64)
        ends += np.uint64(self.tokens)
        self._index.write(ends.astype("<u8", copy=False).data)
        self.tokens += int(lengths.sum())
        self.documents += len(lengths)

    def _finish(self) -> None:
        # As datatrove's DocumentTokenizer.write_final_metadata: "<tokenizer>|<token size>", count, count in words.
        lines = [f"{self.tokenizer}|{self.dtype.itemsize}", str(self.tokens), f"{human(self.tokens)}T"]
        self._file(self._metadata_name).write("\n".join(lines).encode())


class MegatronShardWriter(ShardWriter):
    """Megatron-LM's indexed dataset: the ids streamed to ``.bin``; ``.idx`` written at the end from the
    sequence lengths (4 + 8 + 8 bytes per document are held: bounded by the unit), exactly as
    ``IndexedDatasetBuilder.add_document`` + ``finalize`` write them."""

    def __init__(self, folder: Folder, unit: WorkUnit, dtype: np.dtype[Any]) -> None:
        super().__init__(folder, unit, "megatron")
        self.dtype = dtype
        bin_name, self._index_name = self.names
        self._bin = self._file(bin_name)
        self._lengths: list[np.ndarray] = []

    def write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document]) -> None:
        self._bin.write(np.ascontiguousarray(ids, dtype=self.dtype).data)
        self._lengths.append(lengths.astype(np.int64, copy=True))
        self.tokens += int(lengths.sum())
        self.documents += len(lengths)

    def _finish(self) -> None:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        # preprocess_data.py adds no sequence for a document without ids: it only closes the document.
        sequences = lengths[lengths > 0]
        pointers = np.zeros(len(sequences), dtype="<i8")
        np.cumsum(sequences[:-1] * self.dtype.itemsize, out=pointers[1:])
        document_indices = np.zeros(len(lengths) + 1, dtype="<i8")
        np.cumsum(lengths > 0, out=document_indices[1:])
        index = self._file(self._index_name)
        index.write(MEGATRON_HEADER)
        index.write(struct.pack("<Q", 1))
        index.write(struct.pack("<B", MEGATRON_DTYPE_CODES[self.dtype.name]))
        index.write(struct.pack("<Q", len(sequences)))
        index.write(struct.pack("<Q", len(document_indices)))
        index.write(sequences.astype("<i4").tobytes())
        index.write(pointers.tobytes())
        index.write(document_indices.tobytes())


class ParquetShardWriter(ShardWriter):
    """The Parquet format: documents buffered into row groups of bounded size, written as they fill."""

    def __init__(
        self,
        folder: Folder,
        unit: WorkUnit,
        dtype: np.dtype[Any],
        keep_fields: tuple[str, ...],
        field_types: dict[str, Any],
        metadata: dict[str, Any],
    ) -> None:
        super().__init__(folder, unit, "parquet")
        pa, pq = import_pyarrow()
        self._pa, self._pq = pa, pq
        self.dtype = dtype
        self.keep_fields = keep_fields
        self.field_types = dict(field_types)
        self.metadata = {"tokenizer_service": json.dumps(metadata, sort_keys=True)}
        (name,) = self.names
        self._stream = self._file(name)
        self._writer: Any = None
        self._schema: Any = None
        self._ids: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._documents: list[Document] = []
        self._buffered_tokens = 0

    def write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document]) -> None:
        self._ids.append(np.ascontiguousarray(ids, dtype=self.dtype))
        self._lengths.append(lengths.astype(np.int64, copy=False))
        self._documents.extend(documents)
        self._buffered_tokens += int(lengths.sum())
        while len(self._documents) >= GROUP_ROWS or self._buffered_tokens >= GROUP_TOKENS:
            self._write_group(self._group_size())

    def _group_size(self) -> int:
        """Documents in the next row group: up to GROUP_ROWS, and up to the one reaching GROUP_TOKENS."""
        lengths = np.concatenate(self._lengths)
        reach = int(np.searchsorted(np.cumsum(lengths), GROUP_TOKENS)) + 1
        return min(GROUP_ROWS, reach, len(lengths))

    def _write_group(self, count: int) -> None:
        pa = self._pa
        ids = np.concatenate(self._ids) if len(self._ids) != 1 else self._ids[0]
        lengths = np.concatenate(self._lengths) if len(self._lengths) != 1 else self._lengths[0]
        documents = self._documents
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(lengths[:count], out=offsets[1:])
        taken = int(offsets[-1])
        positions = np.fromiter((d.position for d in documents[:count]), np.uint64, count)
        columns: dict[str, Any] = {
            "input_ids": pa.ListArray.from_arrays(arrow_view(pa, offsets), arrow_view(pa, ids[:taken])),
            "position": arrow_view(pa, positions),
        }
        for i, name in enumerate(self.keep_fields):
            values = [d.fields[i] for d in documents[:count]]
            try:
                columns[name] = pa.array(values, type=self.field_types.get(name))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise CorpusError(
                    f"kept field {name!r} of {self.unit.name}: its values do not fit one column type "
                    f"({self.field_types.get(name)}; {exc}); a field must hold one JSON type (or null) throughout"
                ) from None
        table = pa.Table.from_arrays(list(columns.values()), names=list(columns))
        if self._writer is None:
            self._open(table.schema)
        self._writer.write_table(table.cast(self._schema))
        self.documents += count
        self.tokens += taken
        self._ids = [ids[taken:]]
        self._lengths = [lengths[count:]]
        self._documents = documents[count:]
        self._buffered_tokens -= taken

    def _open(self, schema: Any) -> None:
        for name in self.keep_fields:  # later row groups must hold the types the first one had
            self.field_types.setdefault(name, schema.field(name).type)
        self._schema = schema.with_metadata(self.metadata)
        # Dictionary encoding only pays for kept fields (labels, sources); ids and positions barely repeat.
        self._writer = self._pq.ParquetWriter(
            self._stream, self._schema, compression="zstd", use_dictionary=list(self.keep_fields)
        )

    def _finish(self) -> None:
        while self._documents:
            self._write_group(self._group_size())
        if self._writer is None:  # no document at all: a valid file with the columns and no row
            pa = self._pa
            fields = [
                pa.field("input_ids", pa.list_(pa.from_numpy_dtype(self.dtype))),
                pa.field("position", pa.uint64()),
            ]
            fields += [pa.field(name, self.field_types.get(name) or pa.null()) for name in self.keep_fields]
            self._open(pa.schema(fields))
        self._writer.close()


def arrow_view(pa: Any, values: np.ndarray) -> Any:
    """A pyarrow array over a 1-D numpy array's memory, without a copy. Not ``pa.array(values)``: that
    imports pandas when it is installed (tens of MB of a worker's memory) to check for a Series."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def numpy_view(array: Any) -> np.ndarray:
    """The values of a pyarrow array of a fixed-width integer type, as a numpy view (no pandas import, as
    ``to_numpy()`` does)."""
    data = array.buffers()[1]
    dtype = np.dtype(str(array.type)).newbyteorder("<")
    return np.frombuffer(data, dtype=dtype, count=array.offset + len(array))[array.offset :]


def import_pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or a CorpusError naming the extra that installs them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(
            "the Parquet format needs pyarrow: pip install 'tokenizer-service[pipeline]' (or use --format flat)"
        ) from None
    return pa, pq
