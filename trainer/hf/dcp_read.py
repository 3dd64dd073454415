"""Full tensors out of a local DCP checkpoint with one read each, for the export.

`dcp.load` reads each saved chunk into a bytes buffer, unpickles it into a new tensor and
copies that into the target: three passes over every byte, which made it over half of an
export's time. Here each chunk's bytes go with one `preadv` straight into its rows of the
output tensor (or, when the export converts the dtype, into one reused scratch buffer that is
converted into place).

What a chunk is comes from DCP's own records, never from assumptions: `.metadata` names each
chunk's file, offset and length; torch's zip reader (`PyTorchFileReader`) gives the offset of
the chunk's one storage record inside it; `torch.load` under `torch.serialization.skip_data()`
gives its shape, stride and dtype without reading the data. A chunk that is not a contiguous
block of whole rows (not what FSDP2 or HSDP write) is read by `dcp.load` instead.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex


class _Window(io.RawIOBase):
    """A read-only view of bytes [start, start + length) of an open file (one saved item)."""

    def __init__(self, fd: int, start: int, length: int) -> None:
        self._fd, self._start, self._length, self._pos = fd, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self._length - self._pos)
        if size <= 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buffer)[:size]], self._start + self._pos)
        self._pos += got
        return got


class CheckpointTensors:
    """Reads full tensors of the checkpoint in `directory` (whose parsed `.metadata` is given);
    use as a context manager (it keeps the shard files open)."""

    def __init__(self, directory: Path, metadata: Metadata) -> None:
        self._directory = directory
        self._metadata = metadata
        self._files: dict[str, int] = {}
        self._scratch = torch.empty(0, dtype=torch.uint8)

    def __enter__(self) -> CheckpointTensors:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._metadata.state_dict_metadata[key].size)  # type: ignore[union-attr]

    def read_into(self, key: str, out: torch.Tensor) -> None:
        """Fill `out` (contiguous, `key`'s shape, any float dtype) with the whole tensor `key`."""
        entry = self._metadata.state_dict_metadata[key]
        for chunk in entry.chunks:  # type: ignore[union-attr]
            if not self._read_chunk(key, chunk, out):
                out.copy_(self._read_with_dcp(key, entry))
                return

    def _read_chunk(self, key: str, chunk, out: torch.Tensor) -> bool:
        """Chunk `chunk` of `key` into its rows of `out`; False when it is not whole rows."""
        if out.dim() == 0:
            return False
        first, *rest = chunk.offsets
        if any(rest) or tuple(chunk.sizes[1:]) != tuple(out.shape[1:]):
            return False
        info = self._metadata.storage_data[MetadataIndex(key, chunk.offsets)]
        if getattr(info, "transform_descriptors", None):
            return False  # compressed or otherwise transformed on save
        fd = self._fd(info.relative_path)
        window = _Window(fd, info.offset, info.length)
        records = torch._C.PyTorchFileReader(window)
        storages = [r for r in records.get_all_records() if r.startswith("data/")]
        window.seek(0)
        with torch.serialization.skip_data():  # shape, stride and dtype; no data read
            saved = torch.load(window, weights_only=True)
        nbytes = saved.numel() * saved.element_size()
        whole = (
            len(storages) == 1
            and saved.is_contiguous()
            and saved.storage_offset() == 0
            and tuple(saved.shape) == tuple(chunk.sizes)
            and records.get_record_size(storages[0]) == nbytes
        )
        if not whole:
            return False
        rows = out.narrow(0, first, chunk.sizes[0])
        direct = saved.dtype == out.dtype
        target = rows if direct else self._scratch_for(saved)
        offset = info.offset + records.get_record_offset(storages[0])
        got = os.preadv(fd, [memoryview(target.view(torch.uint8).numpy()).cast("B")], offset)
        if got != nbytes:
            raise OSError(f"{self._directory / info.relative_path} is truncated (short read)")
        if not direct:
            rows.copy_(target)
        return True

    def _scratch_for(self, saved: torch.Tensor) -> torch.Tensor:
        """A view of one reused buffer shaped like `saved` (a dtype conversion's source)."""
        nbytes = saved.numel() * saved.element_size()
        if self._scratch.numel() < nbytes:
            self._scratch = torch.empty(nbytes, dtype=torch.uint8)
        return self._scratch[:nbytes].view(saved.dtype).view(saved.shape)

    def _fd(self, relative_path: str) -> int:
        if relative_path not in self._files:
            self._files[relative_path] = os.open(self._directory / relative_path, os.O_RDONLY)
        return self._files[relative_path]

    def _read_with_dcp(self, key: str, entry) -> torch.Tensor:
        state = {key: torch.empty(tuple(entry.size), dtype=entry.properties.dtype)}
        with warnings.catch_warnings():  # "assuming ... a single process": yes, on purpose
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(state, storage_reader=FileSystemReader(str(self._directory)), no_dist=True)
        return state[key]
