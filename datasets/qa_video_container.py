"""A camera file's structure, read from its box headers before FFmpeg sees it (issue 28).

A camera's video is an MP4 or MOV (ISO base media) file of one track: its first box is a
file-type box (`ftyp`) naming an MP4 or QuickTime brand; it has one index (`moov`) box, within
the file, not compressed (`cmov`: a zlib stream FFmpeg would inflate whatever its declared
size) and no larger than the episode's frames can need; and that index describes exactly one
track. Only box headers are read (8 or 16 bytes each, a bounded number of them) and the index
itself (bounded); nothing is decoded. QA then opens the file with FFmpeg's MP4 demuxer forced,
so FFmpeg never guesses the format from the contents (Matroska, MPEG-TS, playlists naming
other files), and opens it only once the index is known to be small and of one track (an MP4
of 1,000 tracks cost 4.5 s and 2 GB in FFmpeg's probing before this check).

Hand-written: the MP4 parsers on PyPI (pymp4) read whole boxes, media data included.
Pure: no Django, no storage.
"""

import os
import struct
from dataclasses import dataclass

# ISO base media and QuickTime brands; a file names one of them as its major brand or among its
# compatible brands (FFmpeg writes "isom" + "iso2 avc1 mp41"; QuickTime "qt  ").
BRANDS = frozenset(
    [b"isom", b"mp41", b"mp42", b"qt  ", b"M4V "] + [f"iso{n}".encode() for n in range(2, 10)]
)
FTYP_MAX_BYTES = 4096  # a file-type box is a few dozen bytes
INDEX_BASE_BYTES = 1024 * 1024  # the index's fixed part (headers, metadata) at most
INDEX_BYTES_PER_FRAME = 64  # each sample's size, time, chunk, sync and order entries take < 40
BOXES_BASE = 64  # top-level boxes: ftyp, moov, mdat, free...; a fragmented file adds two per
BOXES_PER_FRAME = 2  # fragment (moof + mdat), at most one fragment per frame
INDEX_MAX_CHILDREN = 64  # besides its tracks, an index holds a header and metadata: a few boxes


@dataclass(frozen=True)
class Layout:
    """What the box headers say: `problem` is why the file is not an MP4/MOV QA reads ("" when
    it is one); `tracks` how many tracks its index describes."""

    problem: str = ""
    tracks: int = 0


def read_layout(path, frames: int) -> Layout:
    """The layout of the file at `path`, for an episode of `frames` frames (the allowances
    grow with them: the index's size, the number of top-level boxes)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        problem = _file_type_problem(handle.read(FTYP_MAX_BYTES))
        if problem:
            return Layout(problem)
        index_limit = INDEX_BASE_BYTES + INDEX_BYTES_PER_FRAME * frames
        found = _find_index(handle, size, BOXES_BASE + BOXES_PER_FRAME * (frames + 1))
        if isinstance(found, str):
            return Layout(found)
        start, end = found
        if end - start > index_limit:
            return Layout(
                f"its index (moov box) has {end - start:,} bytes; {frames:,} frames need at most"
                f" {index_limit:,}"
            )
        handle.seek(start)
        return _index_layout(handle.read(end - start))


def _file_type_problem(head: bytes) -> str:
    if len(head) < 16 or head[4:8] != b"ftyp":
        return "it does not start with an MP4/MOV file-type box (ftyp)"
    box_size = struct.unpack_from(">I", head)[0]
    if not 16 <= box_size <= min(len(head), FTYP_MAX_BYTES) or box_size % 4:
        return f"its file-type box declares {box_size} bytes"
    brands = {head[8:12]} | {head[i : i + 4] for i in range(16, box_size, 4)}
    if not brands & BRANDS:
        return f"its brand {head[8:12].decode('latin-1')!r} is not an MP4 or QuickTime one"
    return ""


def _box_header(data: bytes, offset: int, end: int) -> tuple[bytes, int, int] | None:
    """(type, header length, box length) of the box at `offset` of a span ending at `end`;
    None when the header does not fit or declares an impossible length."""
    if offset + 8 > end:
        return None
    declared, kind = struct.unpack_from(">I4s", data, offset)
    header = 8
    if declared == 1:  # a 64-bit length follows
        if offset + 16 > end:
            return None
        declared, header = struct.unpack_from(">Q", data, offset + 8)[0], 16
    elif declared == 0:  # to the end of the span
        declared = end - offset
    if declared < header:
        return None
    return kind, header, declared


def _find_index(handle, size: int, max_boxes: int) -> tuple[int, int] | str:
    """Where the one index box's body lies (start, end), by reading only the top-level boxes'
    headers; or why the file has no usable index."""
    offset, boxes, index = 0, 0, None
    while offset + 8 <= size:
        boxes += 1
        if boxes > max_boxes:
            return f"it has more than {max_boxes:,} top-level boxes"
        handle.seek(offset)
        header = _box_header(handle.read(16), 0, size - offset)
        if header is None:
            return f"the box at byte {offset:,} declares an impossible length"
        kind, header_bytes, length = header
        if kind == b"moov":
            if index is not None:
                return "it has two indexes (moov boxes)"
            if offset + length > size:
                return "its index (moov box) is cut short"
            index = (offset + header_bytes, offset + length)
        offset += length
    return index or "it has no index (moov box)"


def _index_layout(index: bytes) -> Layout:
    """The tracks of an index whose children are all well formed and none compressed."""
    offset, tracks, others = 0, 0, 0
    while offset + 8 <= len(index):  # FFmpeg too ignores fewer than 8 trailing bytes
        header = _box_header(index, offset, len(index))
        if header is None or offset + header[2] > len(index):
            return Layout(f"its index has a malformed box at byte {offset:,}")
        kind, _, length = header
        if kind == b"cmov":
            return Layout("its index is compressed (cmov)")
        if kind == b"trak":  # counted whatever their number (the index's size bounds it)
            tracks += 1
        else:
            others += 1
            if others > INDEX_MAX_CHILDREN:
                return Layout(f"its index has more than {INDEX_MAX_CHILDREN} boxes")
        offset += length
    return Layout(tracks=tracks)
