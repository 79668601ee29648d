"""A private RabbitMQ node for one test, so it can really be restarted.

The shared broker on 127.0.0.1:5672 is never touched: this node has its own name, AMQP and
distribution ports, data folder (kept across restarts, so durable queues and persistent
messages survive as they would in production) and an empty plugin list. Its config file
replaces the machine's /etc/rabbitmq/rabbitmq.conf (which pins the listener to 5672).
The Debian wrapper runs the server as user `rabbitmq`, so the folder is handed to it.
Start takes ~4-5 s here, a clean stop ~0.5 s.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from local_s3.launcher import free_port


class PrivateRabbit:
    def __init__(self, base: Path):
        self.base = base
        self.node = f"mkfault_{os.getpid()}_{uuid.uuid4().hex[:6]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        (base / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (base / "enabled_plugins").write_text("[].\n")
        for path in [base, *base.iterdir()]:
            shutil.chown(path, "rabbitmq", "rabbitmq")
        os.chmod(base, 0o755)  # noqa: S103 - the server runs as user rabbitmq
        self.env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(base / "node.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "ERL_CRASH_DUMP": str(base / "erl_crash.dump"),
        }
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def reachable(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def start(self, timeout: float = 60) -> float:
        """Start the node; returns the seconds until it accepted AMQP connections."""
        self.starts += 1
        started = time.monotonic()
        with (self.base / f"server-{self.starts}.out").open("wb") as out:
            self.process = subprocess.Popen(
                ["rabbitmq-server"],
                cwd=self.base,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while time.monotonic() - started < timeout:
            if self.reachable():
                return time.monotonic() - started
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        output = (self.base / f"server-{self.starts}.out").read_text(errors="replace")
        self.kill()
        raise AssertionError(f"private RabbitMQ did not start:\n{output[-3000:]}")

    def stop(self, timeout: float = 60) -> float:
        """A clean shutdown (`rabbitmqctl stop`); returns the seconds it took."""
        started = time.monotonic()
        subprocess.run(
            ["rabbitmqctl", "-n", self.node, "stop"],
            env=self.env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if self.process is not None:
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        assert not self.reachable(), "private RabbitMQ still answers after stop"
        return time.monotonic() - started

    def kill(self) -> None:
        """Last resort at teardown: the node's own pid (from its pid file), nothing broader."""
        pid_file = self.base / "node.pid"
        if pid_file.exists():
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
