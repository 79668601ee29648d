"""Importing a fleet's own recordings (issue 17): readers turn a recording in a foreign
format into a `Recording` in the platform's episode format; the import pipeline uploads
them, resumably, to the job the mapping file names.

    fleet_agent/importers/base.py       Recording, RecordingError, the reader registry
    fleet_agent/importers/mapping.py    the mapping file (TOML): job, format, reader options
    fleet_agent/importers/lerobot.py    "lerobot": a local LeRobot v3.0 dataset (clips.py cuts
                                        each episode's video out of the concatenated files)
    fleet_agent/importers/aloha_hdf5.py "aloha-hdf5": ALOHA / ACT episode files
    fleet_agent/importers/ros2_mcap.py  "mcap": ROS 2 bags in MCAP (alignment.py: the rule)
    fleet_agent/importers/convert.py    arrays and frames -> Episode (parquet, MP4s)
    fleet_agent/importers/sources.py    what a reader may read: paths kept inside the source,
                                        declared sizes checked (mcap_records.py: MCAP's)
    fleet_agent/importers/local_checks.py  the platform's QA rules, run before upload
    fleet_agent/importers/episode_folder.py  format episode-folder (the platform's own files)
    fleet_agent/importers/journal.py    the per-job journal (SQLite): what was done, to resume
    fleet_agent/importers/pipeline.py   import_recordings: register, upload, complete, once
    fleet_agent/importers/watch.py      watch_folder: import recordings as they finish
    fleet_agent/importers/command.py    `fleet-agent import` and `fleet-agent watch`
"""

from fleet_agent.importers.base import READERS, Recording, RecordingError, read_recordings
from fleet_agent.importers.mapping import ImportMapping, MappingError, load_mapping, parse_mapping

__all__ = [
    "READERS",
    "ImportMapping",
    "MappingError",
    "Recording",
    "RecordingError",
    "load_mapping",
    "parse_mapping",
    "read_recordings",
]
