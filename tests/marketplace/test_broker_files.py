"""The embedded broker (marketplace/broker.py): under processes binding, unbinding, reading,
publishing and consuming at once, every exchange table and message is read whole, and each
message is delivered once. Processes fork from this one and meet at a barrier."""

import multiprocessing
import time

from kombu import Connection

from marketplace.celery import app  # registers marketplace.broker as filesystem://


def _connection(folder) -> Connection:
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
        "control_folder": str(folder / "control"),
    }
    return Connection("filesystem://", transport_options=options)


def _make_folders(tmp_path):
    for sub in ("queue", "processed", "control"):
        (tmp_path / sub).mkdir()


ROUNDS = 150


def _binder(folder, index, barrier, errors):
    """Each round, a new exchange: its table is created by whichever binder comes first,
    as the reply exchange is when a worker and Flower's parallel inspects start together."""
    channel = _connection(folder).default_channel
    for round_ in range(ROUNDS):
        barrier.wait()
        try:
            for number in range(3):
                queue = f"reply-{index}-{number}-{'x' * (round_ % 40)}"
                channel._queue_bind(f"reply{round_}", queue, "", queue)
            channel._delete(f"gone-{index}", f"reply{round_}", f"gone-{index}", "")
        except Exception as error:
            errors.put(repr(error))


def _reader(folder, barrier, errors):
    channel = _connection(folder).default_channel
    for round_ in range(ROUNDS):
        barrier.wait()
        deadline = time.monotonic() + 0.01
        while time.monotonic() < deadline:
            try:
                channel.get_table(f"reply{round_}")
            except Exception as error:
                errors.put(repr(error))


def test_exchange_tables_are_read_whole_while_rewritten(tmp_path):
    # given: three processes binding queues to a new exchange each round, one reading it
    assert app.conf  # the alias is registered with the app module
    _make_folders(tmp_path)
    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(4), context.Queue()
    processes = [
        *(
            context.Process(target=_binder, args=(tmp_path, index, barrier, errors))
            for index in range(3)
        ),
        context.Process(target=_reader, args=(tmp_path, barrier, errors)),
    ]

    # when
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)

    # then: nobody met a torn table, and no binding was lost
    seen = []
    while not errors.empty():
        seen.append(errors.get())
    assert seen == []
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    channel = _connection(tmp_path).default_channel
    for round_ in range(ROUNDS):
        table = channel.get_table(f"reply{round_}")
        assert len(table) == 9 == len(set(table)), (round_, table)


def _producer(folder, index, count, barrier):
    channel = _connection(folder).default_channel
    barrier.wait()
    for number in range(count):
        # large enough that writing one takes several system calls
        channel._put("work", {"body": f"{index}:{number}", "padding": "p" * 300_000})


def _consumer(folder, barrier, received, errors, stop):
    from queue import Empty

    channel = _connection(folder).default_channel
    barrier.wait()
    while not stop.is_set() or channel._size("work"):
        try:
            received.put(channel._get("work")["body"])
        except Empty:
            time.sleep(0.001)
        except Exception as error:
            errors.put(repr(error))


def test_each_message_is_taken_whole_and_once(tmp_path):
    # given: two producers and two consumers of one queue, consuming while messages are written
    _make_folders(tmp_path)
    context = multiprocessing.get_context("fork")
    barrier, received, errors, stop = (
        context.Barrier(4),
        context.Queue(),
        context.Queue(),
        context.Event(),
    )
    producers = [
        context.Process(target=_producer, args=(tmp_path, index, 60, barrier)) for index in (0, 1)
    ]
    consumers = [
        context.Process(target=_consumer, args=(tmp_path, barrier, received, errors, stop))
        for _ in (0, 1)
    ]

    # when
    for process in producers + consumers:
        process.start()
    for process in producers:
        process.join(timeout=60)
    stop.set()
    bodies = []
    deadline = time.monotonic() + 60
    while len(bodies) < 120 and time.monotonic() < deadline:
        if not received.empty():
            bodies.append(received.get())
        else:
            time.sleep(0.01)
    for process in consumers:
        process.join(timeout=60)

    # then: every message once, none torn
    seen_errors = []
    while not errors.empty():
        seen_errors.append(errors.get())
    assert seen_errors == []
    assert sorted(bodies) == sorted(f"{i}:{n}" for i in (0, 1) for n in range(60))
    assert list((tmp_path / "queue").iterdir()) == []
    assert [name.name for name in (tmp_path / "processed").iterdir()] == []
