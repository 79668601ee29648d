"""Count the statements a server really sends PostgreSQL: a loopback TCP proxy that reads the
frontend protocol and counts every simple Query ('Q') and every Execute ('E') message, which
includes what the test client cannot see (conn_health_checks' `SELECT 1`, BEGIN, COMMIT).

    with StatementCounter("127.0.0.1", 5432) as proxy:
        url = proxy.database_url("postgres://postgres@127.0.0.1:5432/db")  # through the proxy
        ...; before = proxy.count; <one request>; statements = proxy.count - before

SSL and GSS encryption are turned off on the proxied URL (an encrypted stream cannot be read).
"""

import contextlib
import socket
import struct
import threading

SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
COUNTED = {b"Q", b"E"}
TEXT = {b"Q", b"P"}  # a simple query's text; a Parse's (statement name, then text)


class StatementCounter:
    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.count = 0
        self.statements: list[bytes] = []  # the first bytes of each text sent, for a report
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._closed = True
        self._listener.close()

    def database_url(self, url: str) -> str:
        scheme, rest = url.split("://", 1)
        credentials, _, tail = rest.rpartition("@")
        _, _, path = tail.partition("/")
        separator = "&" if "?" in path else "?"
        who = f"{credentials}@" if credentials else ""
        return (
            f"{scheme}://{who}127.0.0.1:{self.port}/{path}"
            f"{separator}sslmode=disable&gssencmode=disable"
        )

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._frontend, args=(client, server), daemon=True).start()
            threading.Thread(target=_pipe, args=(server, client), daemon=True).start()

    def _frontend(self, client: socket.socket, server: socket.socket) -> None:
        buffer = b""
        started = False  # before the startup message, messages carry no type byte
        with contextlib.suppress(OSError):
            while True:
                data = client.recv(65536)
                if not data:
                    break
                server.sendall(data)
                buffer += data
                while True:
                    if not started:
                        if len(buffer) < 8:
                            break
                        (length,) = struct.unpack("!I", buffer[:4])
                        if len(buffer) < length:
                            break
                        (code,) = struct.unpack("!I", buffer[4:8])
                        started = code not in (SSL_REQUEST, GSSENC_REQUEST)
                        buffer = buffer[length:]
                        continue
                    if len(buffer) < 5:
                        break
                    kind = buffer[:1]
                    (length,) = struct.unpack("!I", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    with self._lock:
                        if kind in COUNTED:
                            self.count += 1
                        if kind in TEXT:
                            body = buffer[5 : 1 + length]
                            if kind == b"P":
                                body = body.split(b"\0", 1)[-1]
                            self.statements.append(body[:60])
                    buffer = buffer[1 + length :]
        _close(client, server)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    _close(source, sink)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()
