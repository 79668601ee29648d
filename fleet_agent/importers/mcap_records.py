"""The decoded messages of an MCAP file, read within bounds whatever the file declares.

The `mcap` library's readers size their reads and decompression by what the file declares:
a record's length (up to 4 GiB by default), a chunk's data length (unchecked on the seeking
path), a chunk's `uncompressed_size` (zstd's output buffer; lz4 is not bounded at all), so
a few kilobytes of file can ask for gigabytes. Here the file is read record by record
(`StreamReader`, chunks emitted whole) through a file object that refuses any one read over
`MAX_RECORD_BYTES`, and each chunk is decompressed through a stream reader that stops at its
declared size, itself at most `MAX_RECORD_BYTES`. Messages come in file order (a recorder
writes them as they arrive); the ROS 2 reader sorts samples by time itself.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import lz4.frame
import zstandard
from mcap.exceptions import McapError
from mcap.records import Channel, Chunk, Message, Schema
from mcap.stream_reader import StreamReader, breakup_chunk
from mcap_ros2.decoder import DecoderFactory

from fleet_agent.importers.base import RecordingError

MAX_RECORD_BYTES = 256 * 2**20  # one record, or one chunk once decompressed
DECOMPRESSORS = {
    "zstd": lambda raw: zstandard.ZstdDecompressor().stream_reader(raw),
    "lz4": lz4.frame.LZ4FrameFile,
}


class _BoundedFile:
    """The file as the stream reader sees it: no single read larger than the limit."""

    def __init__(self, handle, limit: int):
        self.handle, self.limit = handle, limit

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.limit:
            raise RecordingError(
                f"a record declares {size:,} bytes, over the {self.limit:,} read at most"
            )
        return self.handle.read(size)


def _inflated(chunk: Chunk) -> Chunk:
    size = chunk.uncompressed_size
    if size > MAX_RECORD_BYTES:
        raise RecordingError(
            f"a chunk declares {size:,} bytes uncompressed, over the {MAX_RECORD_BYTES:,} read"
            " at most"
        )
    if not chunk.compression:
        return chunk
    opener = DECOMPRESSORS.get(chunk.compression)
    if opener is None:
        raise RecordingError(f"chunk compression {chunk.compression!r} is not zstd or lz4")
    try:
        with opener(io.BytesIO(chunk.data)) as stream:
            data = stream.read(size + 1)
    except (zstandard.ZstdError, RuntimeError, OSError, EOFError) as exc:
        raise RecordingError(f"a chunk does not decompress ({exc})") from exc
    if len(data) != size:
        raise RecordingError(f"a chunk holds more or less than the {size:,} bytes it declares")
    return replace(chunk, compression="", data=data)


def decoded_messages(path: Path, topics: list[str]) -> Iterator[tuple[str, str, object, int]]:
    """(schema name, topic, decoded message, log time) of each message on `topics`, in file
    order, decoded with the definitions the file carries (`ros2msg`)."""
    factory = DecoderFactory()
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    decoders: dict[int, object] = {}
    wanted = set(topics)

    def take(record) -> Iterator[tuple[str, str, object, int]]:
        if isinstance(record, Schema):
            schemas[record.id] = record
        elif isinstance(record, Channel):
            channels[record.id] = record
        elif isinstance(record, Message) and channels[record.channel_id].topic in wanted:
            channel = channels[record.channel_id]
            schema = schemas.get(channel.schema_id)
            if record.channel_id not in decoders:
                decoders[record.channel_id] = factory.decoder_for(channel.message_encoding, schema)
            decoder = decoders[record.channel_id]
            if decoder is None:
                raise RecordingError(f"{channel.topic}: no decoder for {channel.message_encoding}")
            name = schema.name if schema is not None else ""
            yield name, channel.topic, decoder(record.data), record.log_time

    try:
        with path.open("rb") as handle:
            reader = StreamReader(
                _BoundedFile(handle, MAX_RECORD_BYTES),
                emit_chunks=True,
                record_size_limit=MAX_RECORD_BYTES,
            )
            for record in reader.records:
                inner = breakup_chunk(_inflated(record)) if isinstance(record, Chunk) else [record]
                for item in inner:
                    yield from take(item)
    except (McapError, ValueError, EOFError, KeyError, OSError, IndexError, struct.error) as exc:
        if isinstance(exc, RecordingError):
            raise
        raise RecordingError(f"not a readable MCAP file ({exc})") from exc
