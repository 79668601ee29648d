"""The embedded broker (`filesystem://`): kombu's filesystem transport with atomic files.

kombu's own transport (5.x) rewrites an exchange table in place: `open("wb")` truncates the
file before the lock is taken, and a bind that read a shorter table can overwrite a longer
one without truncating it, so a reader (a worker answering Flower's `inspect`, a broadcast)
sees an empty or doubled table ("JSONDecodeError: Extra data"). It also writes a message
file in place, under its final name, where a consumer can take it half-written; and a
consumer moves a taken message to the temporary folder with `shutil.move`, a copy when that
folder is on another filesystem, which two consumers can both make (one message, two runs).

Here every file appears whole or not at all: a table or message is written to a temporary
name in the same folder and `os.replace`d into place; writers of one table serialize on a
lock file beside it (the table's own inode changes on each replace); a consumer takes a
message by renaming it within the broker's folders (one rename wins) and reads it there.
The file names and formats are kombu's, so a process running the stock transport on the
same folders still interoperates. marketplace/celery.py registers this class as
`filesystem://`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

TEMPORARY_PREFIX = ".tmp-"  # never ends in ".<queue>.msg": listing, size and purge skip it


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, replacing what was there in one step: a reader opens either the
    old file or the new one, both whole."""
    temporary = path.with_name(f"{TEMPORARY_PREFIX}{uuid.uuid4().hex}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class Channel(filesystem.Channel):
    @contextlib.contextmanager
    def _table_lock(self, exchange):
        """Exclusive among the writers of one exchange table (every process)."""
        file = self._exchange_file(exchange)
        with open(file.with_name(file.name + ".lock"), "ab") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield file
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _read_table(file: Path) -> list:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        return [filesystem.exchange_queue_t(*q) for q in loads(data)]

    def get_table(self, exchange):
        return self._read_table(self._exchange_file(exchange))

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        self.control_folder.mkdir(exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            queues = self._read_table(file)
            if entry not in queues:
                queues.insert(0, entry)
                write_atomically(file, dumps(queues).encode())

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # the virtual channel's bookkeeping (not the filesystem transport's table rewrite)
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            queues = self._read_table(file)
            if entry in queues:
                queues.remove(entry)
                write_atomically(file, dumps(queues).encode())

    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: the message file appears under its name whole."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_atomically(Path(self.data_folder_out) / name, dumps(payload).encode())
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _get(self, queue):
        """Take the oldest message of `queue`: renamed into the processed folder (one
        consumer's rename wins, the others move on), read there, removed unless kept."""
        wanted = f"{queue}.msg"
        taken_folder = Path(self.processed_folder)
        taken_folder.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            taken = taken_folder / name
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except OSError:
                continue  # another consumer took it
            try:
                payload = taken.read_bytes()
                if not self.store_processed:
                    taken.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {str(taken)!r} from queue.") from exc
            return loads(payload)
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
