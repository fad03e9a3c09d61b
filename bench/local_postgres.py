"""A throwaway PostgreSQL server for the invoke benchmark: initdb + pg_ctl on a free port under
the benchmark's work directory, fsync off (as `scripts/test.sh` does), stopped with pg_ctl."""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.procfs import children_of
from core.local_ports import free_port


def find_pg_bin() -> Path | None:
    dirs: list[str] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        dirs.append(out.stdout.strip())
    dirs += glob.glob("/usr/lib/postgresql/*/bin")
    usable = [
        Path(d)
        for d in dirs
        if d and all((Path(d) / b).exists() for b in ("initdb", "pg_ctl", "postgres"))
    ]

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", str(p))) or (0,)

    return max(usable, key=version) if usable else None


@dataclass
class LocalPostgres:
    work: Path
    bin: Path | None = None
    data: Path | None = None
    run_as: list[str] = field(default_factory=list)
    log: Path | None = None
    postmaster: int | None = None
    server_url: str = ""  # the maintenance database, SQLAlchemy asyncpg URL
    _options: str = ""

    def start(self) -> str:
        """initdb + pg_ctl on a free port, fsync off; returns the server URL. As root, the
        server runs as the `postgres` user through runuser."""
        self.bin = find_pg_bin()
        if self.bin is None and os.geteuid() == 0:
            print("installing PostgreSQL (Debian package postgresql)…", flush=True)
            subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "postgresql"],
                check=True,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            self.bin = find_pg_bin()
        if self.bin is None:
            raise RuntimeError(
                "PostgreSQL server binaries not found: install Debian's postgresql package or "
                "set MODEL_ROUTER_BENCH_DATABASE_URL to a PostgreSQL server URL"
            )
        pg_dir, sock = self.work / "pg", self.work / "pgsock"
        pg_dir.mkdir()
        sock.mkdir()
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            for d in (pg_dir, sock):
                os.chown(d, user.pw_uid, user.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.data = pg_dir / "data"
        self.log = pg_dir / "postgres.log"
        port = free_port()
        subprocess.run(
            [
                *self.run_as,
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self._options = (
            f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._pg_ctl_start()
        self.server_url = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres"
        return self.server_url

    def _pg_ctl_start(self) -> None:
        assert self.bin is not None and self.data is not None and self.log is not None
        subprocess.run(
            [
                *self.run_as,
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "start",
                "-o",
                self._options,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.postmaster = int((self.data / "postmaster.pid").read_text().split()[0])

    def restart(self) -> None:
        """Start the stopped server again: same data, same port (the fault tests' outage)."""
        self._pg_ctl_start()

    def pids(self) -> list[int]:
        """The postmaster and its current children (backends come and go)."""
        if self.postmaster is None:
            return []
        return [self.postmaster, *children_of(self.postmaster)]

    def stop(self, mode: str = "fast") -> None:
        if self.bin is None or self.data is None:
            return
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [
                    *self.run_as,
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.data),
                    *("-m", mode, "-w", "-t", "30", "stop"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
