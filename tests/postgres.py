"""A throwaway PostgreSQL server for the tests, started from the Debian binaries when they exist.

The server runs as an unprivileged user (initdb refuses root), listens only on a Unix socket in a
temporary folder, and is stopped at the end of the session. Each test gets a database of its own.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path

SERVER_USER = "postgres"


def binaries() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    return [runuser, "-u", SERVER_USER, "--", *command] if runuser else command


class Server:
    def __init__(self, base: Path):
        self.bin = binaries()
        self.base = base
        self.data = base / "data"
        self.socket = base / "socket"
        self.port = 5432 + (os.getpid() % 1000) + 1000

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.socket.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            for path in (self.base, self.socket):
                os.chown(path, user.pw_uid, user.pw_gid)
        subprocess.run(_as_server_user([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                                        "--auth=trust", "-E", "UTF8"]), check=True, capture_output=True)
        options = f"-p {self.port} -k {self.socket} -c listen_addresses=''"
        subprocess.run(_as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                                        "-l", str(self.base / "server.log"), "-w", "start"]),
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(_as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                       capture_output=True)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.socket}&port={self.port}"

    def new_database(self) -> str:
        import psycopg
        name = "kwh_" + uuid.uuid4().hex[:10]
        with psycopg.connect(host=str(self.socket), port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
