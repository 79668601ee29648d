"""Start the local S3 server (server.js) from Python: tests, benchmarks and `make run` use it."""

import os
import socket
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVER_JS = Path(__file__).resolve().parent / "server.js"


@dataclass(frozen=True)
class LocalS3:
    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str
    process: subprocess.Popen

    def settings(self) -> dict[str, str]:
        """As environment variables / Django settings."""
        return {
            "S3_ENDPOINT_URL": self.endpoint_url,
            "S3_BUCKET": self.bucket,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(
    directory: Path,
    *,
    port: int | None = None,
    bucket: str = "marketplace",
    access_key: str = "local-key",
    secret_key: str = "local-secret",  # noqa: S107 - the local server's own key pair
    keep_checksums: bool = False,
) -> LocalS3:
    """`keep_checksums`: verify, keep and return SHA-256 checksums as AWS S3 does
    (local_s3/checksums.js); by default checksums are neither verified nor kept."""
    port = port or free_port()
    env = {
        **os.environ,
        "S3_PORT": str(port),
        "S3_DATA_DIR": str(directory),
        "S3_BUCKET": bucket,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "S3_KEEP_CHECKSUMS": "1" if keep_checksums else "0",
    }
    process = subprocess.Popen(  # noqa: S603 - our own server script, fixed arguments
        ["node", str(SERVER_JS)],  # noqa: S607 - node from PATH, like npm
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("ready"):
        process.kill()
        raise RuntimeError(f"local S3 server did not start: {line} {process.stderr.read()}")
    return LocalS3(f"http://127.0.0.1:{port}", bucket, access_key, secret_key, process)


def stop(server: LocalS3) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()


@contextmanager
def running(directory: Path, **kwargs):
    server = start(directory, **kwargs)
    try:
        yield server
    finally:
        stop(server)
