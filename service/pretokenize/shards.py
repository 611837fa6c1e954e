"""Token shards, one per work unit, in the trainers' own layouts (Parquet, datatrove's, Megatron-LM's), with the
loss masks of conversations beside the ids: each file written whole, closed by a ``.done`` record. The files and
who reads them: docs/guides/pretokenize.md ("Outputs") and conversations.md. A shard's bytes depend only on its
unit's content, the tokenizer and the output settings: N workers write the same bytes as one.
"""

from __future__ import annotations

import json
import struct
from contextlib import ExitStack
from typing import IO, Any

import numpy as np

from ..jobs import CorpusError, Document, Folder, WorkUnit
from ..jobs.progress import human

SUFFIXES = {"parquet": (".parquet",), "flat": (".ds", ".ds.index", ".ds.metadata"), "megatron": (".bin", ".idx")}
#: The loss masks' files, beside the ids (Parquet holds them in a column of the same file).
MASK_SUFFIXES = {"parquet": (), "flat": (".ds.loss",), "megatron": (".loss.bin", ".loss.idx")}
#: The Parquet column of the loss masks (a conversations run), named as transformers names them.
MASKS_COLUMN = "assistant_masks"
GROUP_ROWS = 8192
GROUP_TOKENS = 256 * 1024  # ~0.5-1 MB of ids: the Parquet writer then needs ~60 MB, not ~110 MB
#: Megatron's index: header, version, dtype code; its dtype codes (``DType`` of ``indexed_dataset.py``).
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {"uint8": 1, "uint16": 8, "int32": 4}


def token_dtype(vocab_size: int, output_format: str) -> np.dtype[Any]:
    """The narrowest little-endian unsigned type holding ids ``0 .. vocab_size - 1``; for Megatron, what its
    ``DType.optimal_dtype`` picks (uint16 below 65,500, else int32)."""
    if output_format == "megatron":
        return np.dtype("<u2") if vocab_size < 65500 else np.dtype("<i4")
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_files(unit: WorkUnit, output_format: str, masks: bool = False) -> list[str]:
    """The names of a unit's shard files (with the loss masks' files, when ``masks``)."""
    suffixes = SUFFIXES[output_format] + (MASK_SUFFIXES[output_format] if masks else ())
    return [unit.name + suffix for suffix in suffixes]


def loss_bytes(masks: np.ndarray) -> memoryview:
    """Mask values as datatrove's loss files hold them: a byte per token, 1 where it counts toward the loss."""
    return np.ascontiguousarray(masks != 0, dtype=np.uint8).data


class _Aborted(Exception):
    pass


class ShardWriter:
    """Writes one shard: ``write()`` documents in order, then ``commit()`` (every file appears whole) or
    ``abort()`` (nothing appears)."""

    def __init__(self, folder: Folder, unit: WorkUnit, output_format: str, dtype: np.dtype[Any], masks: bool) -> None:
        self.folder = folder
        self.unit = unit
        self.dtype = dtype
        self.masks = masks
        self.names = shard_files(unit, output_format, masks)
        self.documents = 0
        self.tokens = 0
        self._stack = ExitStack()

    def _file(self, name: str) -> IO[bytes]:
        stream: IO[bytes] = self._stack.enter_context(self.folder.writer(name))
        return stream

    def write(
        self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document], masks: np.ndarray | None = None
    ) -> None:
        """Append documents: their ids back to back, each one's length, and (with ``masks``) every id's loss mask."""
        if self.masks and (masks is None or len(masks) != len(ids)):
            raise CorpusError(f"a shard with loss masks needs one mask value per id ({len(ids)} ids)")
        self._write(ids, lengths, documents, masks)
        self.tokens += int(lengths.sum())
        self.documents += len(lengths)

    def _write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document], masks: Any) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """Write what is buffered, before the files are put in place."""

    def commit(self) -> None:
        self._finish()
        self._stack.close()

    def abort(self) -> None:
        self._stack.__exit__(_Aborted, _Aborted(), None)


class FlatShardWriter(ShardWriter):
    """datatrove's format: tokens and document ends streamed to their files, the metadata at the end."""

    def __init__(
        self, folder: Folder, unit: WorkUnit, dtype: np.dtype[Any], tokenizer: str, masks: bool = False
    ) -> None:
        super().__init__(folder, unit, "flat", dtype, masks)
        self.tokenizer = tokenizer.replace("|", "_")  # datatrove splits the first line at "|"
        tokens_name, index_name, self._metadata_name = self.names[:3]
        self._tokens = self._file(tokens_name)
        self._index = self._file(index_name)
        self._loss = self._file(self.names[3]) if masks else None

    def _write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document], masks: Any) -> None:
        self._tokens.write(np.ascontiguousarray(ids, dtype=self.dtype).data)
        if self._loss is not None:
            self._loss.write(loss_bytes(masks))
        ends = np.cumsum(lengths, dtype=np.uint64)
        ends += np.uint64(self.tokens)
        self._index.write(ends.astype("<u8", copy=False).data)

    def _finish(self) -> None:
        # As datatrove's DocumentTokenizer.write_final_metadata: "<tokenizer>|<token size>", count, count in words.
        lines = [f"{self.tokenizer}|{self.dtype.itemsize}", str(self.tokens), f"{human(self.tokens)}T"]
        self._file(self._metadata_name).write("\n".join(lines).encode())


class _IndexedDataset:
    """One Megatron-LM indexed dataset: values streamed to ``.bin``, ``.idx`` written at the end from the lengths
    held (bounded by the unit), exactly as ``IndexedDatasetBuilder.add_document`` + ``finalize`` write them."""

    def __init__(self, writer: ShardWriter, bin_name: str, index_name: str, dtype: np.dtype[Any]) -> None:
        self.dtype = dtype
        self._bin = writer._file(bin_name)
        self._index = (writer, index_name)
        self._lengths: list[np.ndarray] = []

    def write(self, values: np.ndarray, lengths: np.ndarray) -> None:
        self._bin.write(np.ascontiguousarray(values, dtype=self.dtype).data)
        self._lengths.append(lengths.astype(np.int64, copy=True))

    def finish(self) -> None:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        # preprocess_data.py adds no sequence for a document without ids: it only closes the document.
        sequences = lengths[lengths > 0]
        pointers = np.zeros(len(sequences), dtype="<i8")
        np.cumsum(sequences[:-1] * self.dtype.itemsize, out=pointers[1:])
        document_indices = np.zeros(len(lengths) + 1, dtype="<i8")
        np.cumsum(lengths > 0, out=document_indices[1:])
        writer, name = self._index
        index = writer._file(name)
        code = MEGATRON_DTYPE_CODES[self.dtype.name]  # after the header: version 1, dtype, sequences, documents
        index.write(MEGATRON_HEADER + struct.pack("<QBQQ", 1, code, len(sequences), len(document_indices)))
        index.write(sequences.astype("<i4").tobytes())
        index.write(pointers.tobytes())
        index.write(document_indices.tobytes())


class MegatronShardWriter(ShardWriter):
    """Megatron-LM's indexed dataset of the ids, and (with ``masks``) one of uint8 loss masks, same sequences."""

    def __init__(self, folder: Folder, unit: WorkUnit, dtype: np.dtype[Any], masks: bool = False) -> None:
        super().__init__(folder, unit, "megatron", dtype, masks)
        self._ids = _IndexedDataset(self, self.names[0], self.names[1], dtype)
        self._masks = _IndexedDataset(self, self.names[2], self.names[3], np.dtype("u1")) if masks else None

    def _write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document], masks: Any) -> None:
        self._ids.write(ids, lengths)
        if self._masks is not None:
            self._masks.write(np.asarray(masks != 0, dtype=np.uint8), lengths)

    def _finish(self) -> None:
        self._ids.finish()
        if self._masks is not None:
            self._masks.finish()


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
        masks: bool = False,
    ) -> None:
        super().__init__(folder, unit, "parquet", dtype, masks)
        self._pa, self._pq = import_pyarrow()
        self.keep_fields = keep_fields
        self.field_types = dict(field_types)
        self.metadata = {"tokenizer_service": json.dumps(metadata, sort_keys=True)}
        (name,) = self.names
        self._stream = self._file(name)
        self._writer: Any = None
        self._schema: Any = None
        # Buffered: the values of each list column (ids, masks), and per document its length and itself.
        self._lists = {"input_ids": [np.zeros(0, dtype)], **({MASKS_COLUMN: [np.zeros(0, np.uint8)]} if masks else {})}
        self._lengths = [np.zeros(0, np.int64)]
        self._documents: list[Document] = []
        self._buffered_tokens = 0

    def _write(self, ids: np.ndarray, lengths: np.ndarray, documents: list[Document], masks: Any) -> None:
        self._lists["input_ids"].append(np.ascontiguousarray(ids, dtype=self.dtype))
        if self.masks:
            self._lists[MASKS_COLUMN].append(np.asarray(masks != 0, dtype=np.uint8))
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
        """Write the next ``count`` buffered documents as a row group (none: only open the file)."""
        pa = self._pa
        self._lists = {name: [_joined(parts)] for name, parts in self._lists.items()}
        lengths = _joined(self._lengths)
        documents = self._documents
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(lengths[:count], out=offsets[1:])
        taken = int(offsets[-1])
        columns: dict[str, Any] = {
            name: pa.ListArray.from_arrays(arrow_view(pa, offsets), arrow_view(pa, values[:taken]))
            for name, (values,) in self._lists.items()
        }
        columns["position"] = arrow_view(pa, np.fromiter((d.position for d in documents[:count]), np.uint64, count))
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
        if count:
            self._writer.write_table(table.cast(self._schema))
        self._lists = {name: [values[taken:]] for name, (values,) in self._lists.items()}
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
            self._write_group(0)
        self._writer.close()


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def arrow_view(pa: Any, values: np.ndarray) -> Any:
    """A pyarrow array over a 1-D numpy array's memory, without a copy. Not ``pa.array(values)``: that
    imports pandas when it is installed (tens of MB of a worker's memory) to check for a Series."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def numpy_view(array: Any) -> np.ndarray:
    """A pyarrow integer array's values as a numpy view (``to_numpy()`` imports pandas)."""
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
