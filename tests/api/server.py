"""The Training API app under a real uvicorn server on 127.0.0.1, in a thread (test-only)."""

from __future__ import annotations

import socket
import threading
import time


class ServerThread:
    def __init__(self, app) -> None:
        import uvicorn

        from jobs.api.app import SERVER_OPTIONS

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, **SERVER_OPTIONS
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
