"""Hostile recordings (issue 28, item 7): the fleet agent reads only inside the folder it was
given, and only what a file declares within bounds.

- LeRobot: a `data_path` / `video_path` that is absolute or climbs out with `..`, a format
  pattern with fields or widths LeRobot does not write (`{chunk_index:>400000000}` would build
  a 400 MB string), a file or folder of the dataset that is a symbolic link leading out;
- ALOHA HDF5: an external link, a virtual dataset, external raw storage, a tiny file that
  declares 50M x 8 float64 (2.98 GiB) or frames of 50000 x 50000 px or a 640 MB chunk;
- MCAP: a chunk that declares 600 MiB uncompressed, one that inflates past what it declares
  (lz4, which the mcap library decompresses without a bound), a record whose data length is
  1 TiB;
- the episode folder: a recording whose files are symbolic links to files elsewhere.

Every one is refused before anything is uploaded, with an error naming the file; the files
are written by each format's own library (the LeRobot layout by tests/fleet_agent/
import_files.py, h5py, mcap's record writer), and the memory of the reads that declare
gigabytes is measured in a subprocess (peak RSS, with an address-space cap as a safety net).
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import h5py
import lz4.frame
import numpy as np
import pytest
import zstandard
from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, DataEnd, Footer, Header, Schema
from mcap.writer import MCAP0_MAGIC

from fleet_agent.importers import Recording, RecordingError, parse_mapping, read_recordings
from tests.fleet_agent.import_files import MSGDEFS, SCENE, write_aloha, write_lerobot
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

ROOT = Path(__file__).resolve().parents[2]
DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
RSS_LIMIT_MIB = 300  # the readers' own imports take ~120 MiB

# the module-scoped recordings are made once: its tests share one xdist worker
pytestmark = pytest.mark.xdist_group("import-hostile")


def outcome(source: Path, mapping) -> tuple[list[Recording], list[str]]:
    """What the reader made of `source`: the recordings, and every error (the source's own,
    raised, or one per recording in its place)."""
    try:
        items = list(read_recordings(source, mapping))
    except RecordingError as exc:
        return [], [str(exc)]
    return (
        [i for i in items if isinstance(i, Recording)],
        [str(i) for i in items if isinstance(i, RecordingError)],
    )


# --- LeRobot --------------------------------------------------------------------------------

LEROBOT = parse_mapping({"job": "j", "format": "lerobot", "source": {"video_codec": "h264"}})


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "dataset"
    write_lerobot(root, [30, 31], cameras=(SCENE,))
    return root


@pytest.fixture
def hostile(lerobot, tmp_path):
    """(a copy of the dataset to spoil, an identical dataset outside it)."""
    copy, elsewhere = tmp_path / "given" / "dataset", tmp_path / "elsewhere"
    shutil.copytree(lerobot, copy)
    shutil.copytree(lerobot, elsewhere)
    return copy, elsewhere


def _set_info(root: Path, **changes) -> None:
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, **changes}))


def test_the_untouched_dataset_and_a_link_that_stays_inside_are_read(hostile):
    copy, _ = hostile
    data = copy / "data/chunk-000/file-000.parquet"
    shutil.move(data, copy / "data/chunk-000/real.parquet")
    data.symlink_to("real.parquet")  # a link, but to a file of the dataset
    recordings, errors = outcome(copy, LEROBOT)
    assert errors == [] and len(recordings) == 2


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        ({"data_path": "{elsewhere}/" + DATA}, r"data_path: '/.*' is not a relative path"),
        (
            {"data_path": "../../elsewhere/" + DATA},
            r"data_path: '\.\./\.\./elsewhere/.*' climbs out",
        ),
        ({"video_path": "{elsewhere}/" + VIDEO}, r"video_path: '/.*' is not a relative path"),
        ({"video_path": "videos/../../../elsewhere/" + VIDEO}, r"video_path: .* climbs out"),
    ],
)
def test_paths_out_of_the_dataset_are_refused_naming_the_key(hostile, changes, refused):
    copy, elsewhere = hostile
    _set_info(copy, **{k: v.replace("{elsewhere}", str(elsewhere)) for k, v in changes.items()})
    recordings, errors = outcome(copy, LEROBOT)
    assert recordings == []  # the same data lies outside: none of it is taken
    assert len(errors) == 2 and all("meta/info.json" in e for e in errors), errors
    for error in errors:
        assert re.search(refused, error), error


@pytest.mark.parametrize(
    ("key", "pattern", "refused"),
    [
        (
            "data_path",
            "data/chunk-{chunk_index:>400000000}/file-{file_index:03d}.parquet",
            r"\{chunk_index\} formatted as '>400000000' is not how LeRobot writes it"
            r" \(\{chunk_index:03d\}\)",
        ),
        ("data_path", "data/{chunk_index:03d}/{file_index:0999d}.p", r"'0999d' is not how"),
        ("data_path", "data/{episode_index}/x.parquet", r"\{episode_index\} is not one of"),
        ("data_path", "data/{chunk_index.__class__}/x", r"\{chunk_index.__class__\} is not one"),
        ("data_path", "data/{file_index!r}/{chunk_index:03d}", r"formatted as !r is not how"),
        ("data_path", "data/{}/{chunk_index:03d}", r"\{\} is not one of LeRobot's fields"),
        ("data_path", "data/{chunk_index", r"not a path pattern"),
        ("video_path", "videos/{video_key:>99999999}/" + DATA, r"\{video_key\} formatted as"),
        ("video_path", "videos/{chunk_index:{file_index}}/x.mp4", r"formatted as '\{file_index\}'"),
    ],
)
def test_format_patterns_take_only_lerobots_fields_and_widths(hostile, key, pattern, refused):
    copy, _ = hostile
    _set_info(copy, **{key: pattern})
    recordings, errors = outcome(copy, LEROBOT)
    assert recordings == [] and len(errors) == 1  # the source is refused before any episode
    assert f"meta/info.json {key}" in errors[0] and len(errors[0]) < 600
    assert re.search(refused, errors[0]), errors[0]


@pytest.mark.parametrize(
    ("linked", "refused"),
    [
        ("data/chunk-000/file-000.parquet", "data/chunk-000/file-000.parquet is a symbolic link"),
        (f"videos/{SCENE}/chunk-000/file-000.mp4", f"videos/{SCENE}/chunk-000/file-000.mp4 is a"),
        ("meta/info.json", "meta/info.json is a symbolic link to"),
        ("meta/tasks.parquet", "meta/tasks.parquet is a symbolic link to"),
        ("meta/episodes", "meta/episodes is a symbolic link to"),
        ("data", "data/chunk-000/file-000.parquet is a symbolic link to"),
    ],
)
def test_files_and_folders_linked_out_of_the_dataset_are_refused(hostile, linked, refused):
    copy, elsewhere = hostile
    target = copy / linked
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    target.symlink_to(elsewhere / linked, target_is_directory=(elsewhere / linked).is_dir())
    recordings, errors = outcome(copy, LEROBOT)
    assert recordings == [] and errors, "a file from elsewhere was imported"
    for error in errors:
        assert refused in error and str(elsewhere) in error and "outside the source" in error


# --- ALOHA HDF5 -----------------------------------------------------------------------------

ALOHA = parse_mapping({"job": "j", "format": "aloha-hdf5", "source": {"fps": 30}})


def _aloha_with(path: Path, build) -> None:
    """An ALOHA file whose qpos `build(handle, observations)` makes."""
    with h5py.File(path, "w") as handle:
        observations = handle.create_group("observations")
        build(handle, observations)
        if "action" not in handle:
            handle.create_dataset("action", data=np.zeros((30, 8)))


def _secret(folder: Path) -> Path:
    path = folder.parent / "secret.hdf5"  # outside the imported folder
    with h5py.File(path, "w") as handle:
        handle.create_dataset("data", data=np.linspace(-1, 1, 240).reshape(30, 8))
    return path


def _external_link(folder: Path):
    secret = _secret(folder)
    return lambda h, o: o.__setitem__("qpos", h5py.ExternalLink(str(secret), "/data"))


def _external_link_elsewhere(folder: Path):  # in a group the mapping never reads
    secret = _secret(folder)

    def build(handle, observations):
        observations.create_dataset("qpos", data=np.zeros((30, 8)))
        handle.create_group("extras")["calibration"] = h5py.ExternalLink(str(secret), "/data")

    return build


def _virtual(folder: Path):
    secret = _secret(folder)

    def build(handle, observations):
        layout = h5py.VirtualLayout(shape=(30, 8), dtype="f8")
        layout[:] = h5py.VirtualSource(str(secret), "data", shape=(30, 8))
        observations.create_virtual_dataset("qpos", layout)

    return build


def _external_storage(folder: Path):
    raw = folder.parent / "raw.bin"
    raw.write_bytes(np.zeros((30, 8)).tobytes())
    return lambda h, o: o.create_dataset(
        "qpos", shape=(30, 8), dtype="f8", external=[(str(raw), 0, 30 * 8 * 8)]
    )


def _huge_chunk(folder: Path):
    return lambda h, o: o.create_dataset(
        "qpos", shape=(30, 8), maxshape=(None, 8), chunks=(10_000_000, 8), dtype="f8"
    )


def _huge_frames(folder: Path):
    def build(handle, observations):
        observations.create_dataset("qpos", data=np.zeros((30, 8)))
        observations.create_group("images").create_dataset(
            "cam_high", shape=(30, 50_000, 50_000, 3), chunks=(1, 100, 100, 3), dtype="u1"
        )

    return build


@pytest.mark.parametrize(
    ("build", "refused"),
    [
        (_external_link, r"external link /observations/qpos -> .*secret.hdf5:/data"),
        (_external_link_elsewhere, r"external link /extras/calibration -> .*secret.hdf5"),
        (_virtual, r"/observations/qpos is a virtual dataset"),
        (_external_storage, r"/observations/qpos keeps its data in external files"),
        (_huge_chunk, r"/observations/qpos chunk: declares 10000000 x 8 items"),
        (_huge_frames, r"camera cam_high: frames must be .* up to 4096x4096 px, not 50000x50000"),
    ],
)
def test_hdf5_links_out_virtual_data_and_oversized_declarations_are_refused(
    tmp_path, build, refused
):
    folder = tmp_path / "episodes"
    folder.mkdir()
    write_aloha(folder / "a_good.hdf5", 30, cameras=("cam_high",))
    _aloha_with(folder / "b_hostile.hdf5", build(folder))
    mapping = parse_mapping(
        {"job": "j", "format": "aloha-hdf5", "source": {"fps": 30, "cameras": {"cam_high": SCENE}}}
    )
    recordings, errors = outcome(folder, mapping)
    assert [r.source_id for r in recordings] == ["a_good.hdf5"]  # the good one is still read
    assert len(errors) == 1 and errors[0].startswith("b_hostile.hdf5: "), errors
    assert re.search(refused, errors[0]), errors[0]


def test_an_hdf5_file_linked_out_of_the_folder_is_refused(tmp_path):
    folder = tmp_path / "episodes"
    folder.mkdir()
    write_aloha(tmp_path / "elsewhere.hdf5", 30)
    (folder / "ep.hdf5").symlink_to(tmp_path / "elsewhere.hdf5")
    recordings, errors = outcome(folder, ALOHA)
    assert recordings == []
    assert errors == [
        f"ep.hdf5 is a symbolic link to {tmp_path / 'elsewhere.hdf5'}, outside the source"
        " (not followed)"
    ]


READ_IN_A_SUBPROCESS = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # a safety net, not the test
from fleet_agent.importers import RecordingError, parse_mapping, read_recordings
mapping = parse_mapping(json.loads(sys.argv[2]))
try:
    items = list(read_recordings(sys.argv[1], mapping))
    errors = [str(item) for item in items if isinstance(item, RecordingError)]
except RecordingError as exc:
    errors = [str(exc)]
# this process's peak (VmHWM; getrusage's ru_maxrss also counts the parent's before exec)
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"errors": errors, "rss_mib": peak / 1024}))
"""


def read_elsewhere(path: Path, mapping: dict) -> dict:
    """The reader on `path` in a fresh process: its errors and its peak RSS (MiB)."""
    result = subprocess.run(
        [sys.executable, "-c", READ_IN_A_SUBPROCESS, str(path), json.dumps(mapping)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_tiny_hdf5_declaring_gigabytes_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "tiny.hdf5"

    def build(handle, observations):  # 50M x 8 float64 in chunks never written: 2.7 KB
        for group, name in ((observations, "qpos"), (handle, "action")):
            group.create_dataset(
                name, shape=(50_000_000, 8), chunks=(4096, 8), dtype="f8", compression="gzip"
            )

    _aloha_with(path, build)
    assert path.stat().st_size < 4096

    read = read_elsewhere(path, {"job": "j", "format": "aloha-hdf5", "source": {"fps": 30}})

    assert read["errors"] == [
        "tiny.hdf5: /observations/qpos declares 50000000 frames, 1,666,667 s at 30 fps: longer"
        " than QA accepts (3600 s); not read"
    ]
    assert read["rss_mib"] < RSS_LIMIT_MIB  # reading it whole took 2.98 GiB


# --- MCAP -----------------------------------------------------------------------------------

MCAP = {
    "job": "j",
    "format": "mcap",
    "source": {
        "fps": 30,
        "state": {"topic": "/joint_states"},
        "action": {"topic": "/leader/joint_states"},
    },
}
INFLATED = 600 * 2**20  # zero bytes of one message
MESSAGE_HEAD = 1 + 8 + 2 + 4 + 8 + 8  # opcode, length, channel, sequence, log and publish time


def _message_then_zeros(size: int):
    """A chunk's records: one message of `size` zero bytes (MCAP's own layout), in pieces."""
    head = struct.pack("<BQHIQQ", Opcode.MESSAGE, 2 + 4 + 8 + 8 + size, 1, 0, 0, 0)
    yield head
    piece = bytes(16 * 2**20)
    for start in range(0, size, len(piece)):
        yield piece[: min(len(piece), size - start)]


def _compressed(kind: str, size: int) -> bytes:
    if kind == "zstd":
        compressor = zstandard.ZstdCompressor(level=1).compressobj()
        data = b"".join(compressor.compress(p) for p in _message_then_zeros(size))
        return data + compressor.flush()
    compressor = lz4.frame.LZ4FrameCompressor()
    data = compressor.begin() + b"".join(compressor.compress(p) for p in _message_then_zeros(size))
    return data + compressor.flush()


def write_mcap_chunk(path: Path, *, compression: str, data: bytes, declared: int, length=None):
    """A bag (mcap's record writer) with one JointState channel and one chunk of `data` that
    declares `declared` bytes uncompressed (and, given, a data length of `length`)."""
    builder = RecordBuilder()
    Header(profile="ros2", library="hostile").write(builder)
    name = "sensor_msgs/msg/JointState"
    Schema(id=1, name=name, encoding="ros2msg", data=MSGDEFS[name].encode()).write(builder)
    Channel(id=1, topic="/joint_states", message_encoding="cdr", schema_id=1, metadata={}).write(
        builder
    )
    if length is None:
        Chunk(
            compression=compression,
            data=data,
            message_start_time=0,
            message_end_time=0,
            uncompressed_size=declared,
            uncompressed_crc=0,
        ).write(builder)
    else:  # Chunk.write would write the true length: the same fields, one of them forged
        builder.start_record(Opcode.CHUNK)
        for value in (0, 0, declared):
            builder.write8(value)
        builder.write4(0)
        builder.write_prefixed_string(compression)
        builder.write8(length)
        builder.write(data)
        builder.finish_record()
    DataEnd(data_section_crc=0).write(builder)
    Footer(summary_start=0, summary_offset_start=0, summary_crc=0).write(builder)
    path.write_bytes(MCAP0_MAGIC + builder.end() + MCAP0_MAGIC)


@pytest.mark.parametrize(
    ("compression", "declared", "refused"),
    [
        ("zstd", MESSAGE_HEAD + INFLATED, r"a chunk declares 629,145,631 bytes uncompressed, over"),
        ("lz4", 1024, r"a chunk holds more or less than the 1,024 bytes it declares"),
    ],
)
def test_an_mcap_chunk_that_inflates_to_hundreds_of_megabytes_is_refused_in_bounded_memory(
    tmp_path, compression, declared, refused
):
    path = tmp_path / "bomb.mcap"
    data = _compressed(compression, INFLATED)
    write_mcap_chunk(path, compression=compression, data=data, declared=declared)
    assert path.stat().st_size < 4 * 2**20

    read = read_elsewhere(path, MCAP)

    assert len(read["errors"]) == 1 and read["errors"][0].startswith("bomb.mcap: ")
    assert re.search(refused, read["errors"][0]), read["errors"]
    assert read["rss_mib"] < RSS_LIMIT_MIB  # decompressed whole: 600 MiB and more


def test_an_mcap_record_declaring_a_terabyte_is_refused(tmp_path):
    path = tmp_path / "long.mcap"
    write_mcap_chunk(path, compression="", data=b"x" * 64, declared=64, length=2**40)
    recordings, errors = outcome(path, parse_mapping(MCAP))
    assert recordings == []
    assert errors == [
        "long.mcap: a record declares 1,099,511,627,776 bytes, over the 268,435,456 read at most"
    ]


# --- The episode folder ---------------------------------------------------------------------


def test_a_recording_whose_files_link_out_of_the_folder_is_refused(tmp_path):
    from fleet_agent.episodes import make_episode

    folder, elsewhere = tmp_path / "recordings", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    for name, where in (("good", folder), ("secret", elsewhere)):
        (where / f"{name}.parquet").write_bytes(make_episode(action_dim=3, seconds=1, seed=1).data)
    (folder / "linked.parquet").symlink_to(elsewhere / "secret.parquet")
    (elsewhere / "sidecar.json").write_text('{"operator": "op-1"}')
    (folder / "good.json").symlink_to(elsewhere / "sidecar.json")
    mapping = parse_mapping({"job": "j", "format": "episode-folder"})

    recordings, errors = outcome(folder, mapping)

    assert recordings == []
    assert [e.split(":")[0] for e in errors] == ["good", "linked"]
    assert "good.json is a symbolic link to" in errors[0]
    assert "linked.parquet is a symbolic link to" in errors[1]
    assert all(str(elsewhere) in e and "outside the source" in e for e in errors)


def test_the_watch_listing_leaves_out_links_leading_out_of_the_folder(tmp_path):
    from fleet_agent.importers.watch import FolderState

    folder, elsewhere = tmp_path / "watched", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "ep.parquet").write_bytes(b"inside")
    (elsewhere / "secret.parquet").write_bytes(b"outside")
    (folder / "linked.parquet").symlink_to(elsewhere / "secret.parquet")
    (folder / "alias.parquet").symlink_to(folder / "ep.parquet")  # stays inside: watched
    os.symlink(elsewhere, folder / "linked_folder")  # os.walk does not enter it anyway
    state = FolderState(folder, settle_seconds=0)

    state.scan()

    assert sorted(p.name for p in state._files) == ["alias.parquet", "ep.parquet"]


# --- The command ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_import_command_refuses_a_hostile_dataset_locally_with_exit_3(
    platform, operator, customer, lerobot, tmp_path, capsys
):
    from datasets.models import Episode
    from fleet_agent import cli
    from tests.fleet_agent.importing import held_job

    held = held_job(platform, operator, customer, tmp_path)
    held.mapping_path.write_text(
        f'job = "{held.job_id}"\nformat = "lerobot"\noperator = "op-3"\n'
        '[source.cameras]\n"observation.images.scene" = "observation.images.wrist"\n'
    )
    given, elsewhere = tmp_path / "given", tmp_path / "elsewhere"
    shutil.copytree(lerobot, given)
    shutil.copytree(lerobot, elsewhere)
    _set_info(given, data_path=f"{elsewhere}/{DATA}")
    args = ["--config", str(held.config_path), "--mapping", str(held.mapping_path)]
    args += ["--journal", str(tmp_path / "j.sqlite3")]

    assert cli.main(["import", *args, str(given)]) == 3

    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"failed   episode_000000: episode_000000: meta/info.json data_path: '{elsewhere}/"
        "data/chunk-000/file-000.parquet' is not a relative path inside the source"
    )
    assert out[-1].startswith("import: 0 imported, 0 resumed, 0 skipped, 2 failed;")

    _set_info(given, data_path="data/chunk-{chunk_index:>400000000}/x.parquet")
    assert cli.main(["import", *args, str(given)]) == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("import: 0 imported, 0 resumed, 0 skipped, 0 failed;")
    assert "meta/info.json data_path 'data/chunk-{chunk_index:>400000000}/x.parquet':" in (
        captured.err
    )
    assert not Episode.objects.filter(order=held.order).exists()
