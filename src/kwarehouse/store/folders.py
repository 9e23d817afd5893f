"""One folder per catalog: a copy of a warehouse folder never writes the catalog its original writes.

A warehouse folder is one warehouse. A copy of the folder (cp -a, rsync, a backup restored beside
it) carries the same warehouse.json; when the catalog lives outside the folder (PostgreSQL, or a
--catalog SQLite file elsewhere) the copy would share it, and a writer or `kwh check --repair` in one
folder would change what the catalog says of the other's files (repair takes out the runs whose
files it lacks; the other folder's next writer then deletes them). So the catalog remembers which
folder writes it, by a seal: a random token that every writer renews, in the folder
(warehouse-seal.json) and in the catalog (warehouse_folders: host, path, seal), folder first. A
writer whose folder's seal is not the catalog's is in a folder that stopped being the warehouse
when another folder wrote: a copy, refused. Before any write, a folder under another path whose
seal still matches is told apart by looking at the registered folder: on this host, if it still
holds this warehouse and is not the same folder (os.path.samefile: a symlink, a bind mount), this
is a copy of a live original, refused; if it is gone, the warehouse was moved and this folder takes
over. On another host kwh cannot look, and a matching seal means the folder holds everything the
catalog names (an NFS folder seen from two hosts, or an unchanged copy): it writes, and the other
folder is refused from then on. Nothing is lost either way; only which folder is the warehouse.

A refused copy says what to do: `kwh detach` gives it a catalog of its own (catalog.sqlite beside
it, or --new-catalog URL) holding the runs whose files it has, under a new warehouse id; `kwh attach
--moved` says "this folder is the warehouse" and records the folder it displaces. `kwh check
--repair` never takes out runs while such another folder (a refused copy, a displaced one) may still
hold their files, unless --force. Reading works in a copy (kwh sql warns).

A copy that took its catalog.sqlite along is a separate warehouse already (nothing is shared, both
may write): no seal is kept for a catalog inside the folder.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

from kwarehouse.errors import KwhError
from kwarehouse.store.catalog import catalog_folders, catalog_info, database_error, now, read_folder_id
from kwarehouse.store.layout import IDENTITY_FILE

# which writer of the catalog last wrote from this folder (see the module docstring)
SEAL_FILE = "warehouse-seal.json"


def claim(warehouse) -> None:
    """Refuse to write from a copy of the folder that writes a catalog outside it (the module
    docstring says how a copy is told apart); a catalog.sqlite inside the folder went along with any copy."""
    if catalog_in_folder(warehouse.catalog_url, warehouse.root):
        return
    try:
        claim_folder(warehouse.engine, warehouse.root, warehouse.catalog_name)
    except sa.exc.DatabaseError as exc:
        raise database_error(warehouse.catalog_name, exc) from None


def problem(warehouse) -> str | None:
    """Why this folder may not write its catalog (a copy of the folder that does), or None; reads only."""
    if catalog_in_folder(warehouse.catalog_url, warehouse.root):
        return None
    with warehouse.reading() as con:
        return copy_problem(con, warehouse.root, warehouse.catalog_name)



@dataclass
class Folder:
    host: str
    path: str
    role: str
    seen_at: datetime

    def __str__(self) -> str:
        here = self.host == host_name()
        return f"{self.path}{'' if here else f' on {self.host}'} ({self.role}, seen {self.seen_at:%Y-%m-%d %H:%M} UTC)"


def host_name() -> str:
    return socket.gethostname()


def catalog_in_folder(url: str | None, root: Path) -> bool:
    """Whether the catalog is a SQLite file inside the warehouse folder: a copy of the folder then
    takes it along and is a warehouse of its own."""
    if url is None:
        return True
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return False
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database.startswith("file:"):
        return False
    return Path(parsed.database).absolute().resolve().is_relative_to(root.resolve())


def read_seal(root: Path) -> tuple[str, ...]:
    """The seals this folder accepts: its latest, and the one before it (a writer that died between
    writing the folder's new seal and committing it left the catalog with the old one)."""
    try:
        value = json.loads((root / SEAL_FILE).read_text(encoding="utf-8"))
        return tuple(s for s in (value.get("seal"), value.get("previous")) if isinstance(s, str) and s)
    except FileNotFoundError:
        return ()
    except (OSError, ValueError, AttributeError):
        return ()        # unreadable: like no seal, so a copy is still refused and the folder can re-attach


def _write_seal(root: Path, seal: str, previous: str | None) -> None:
    path = root / SEAL_FILE
    partial = root / f".{SEAL_FILE}.{uuid.uuid4().hex[:8]}"
    partial.write_text(json.dumps({"seal": seal, "previous": previous, "written_at": now().isoformat(),
                                   "note": "which folder writes the warehouse's catalog: a copy of this folder "
                                           "that shares the catalog is refused (kwh detach, kwh attach --moved)"}, indent=1)
                       + "\n", encoding="utf-8")
    os.replace(partial, path)


def _folders(con: sa.Connection) -> list[tuple]:
    return list(con.execute(sa.select(catalog_folders.c.host, catalog_folders.c.path, catalog_folders.c.role,
                                      catalog_folders.c.seal, catalog_folders.c.seen_at)))


def _holds_this_warehouse(path: str, warehouse_id: str | None) -> bool:
    try:
        return read_folder_id(Path(path)) == warehouse_id
    except (KwhError, OSError):
        return True          # cannot tell: assume it may


def _same_folder(path: str, root: Path) -> bool:
    try:
        return os.path.samefile(Path(path) / IDENTITY_FILE, root / IDENTITY_FILE)
    except OSError:
        return False


def copy_problem(con: sa.Connection, root: Path, where: str) -> str | None:
    """Why this folder must not write the catalog (it is a copy of the folder that does), or None.
    One line that says what to do."""
    if not sa.inspect(con).has_table(catalog_folders.name):
        return None
    current = [r for r in _folders(con) if r.role == "current"]
    if not current:
        return None          # nobody wrote with seals yet (a new catalog, or an older kwh's): the next writer claims it
    host, path, _, seal, seen_at = current[0]
    here = str(root)
    other = f"{path}{'' if host == host_name() else f' on {host}'}"
    advice = (f"run kwh detach here to give this copy a catalog of its own (catalog.sqlite beside it, or "
              f"--new-catalog URL), or kwh attach --moved if this folder is the warehouse and {other} a stale "
              "copy; reading still works")
    if seal not in read_seal(root):
        return (f"{here} is a copy of the warehouse whose catalog {where} is written from {other} (last "
                f"{seen_at:%Y-%m-%d %H:%M} UTC) and holds other files than this folder: writing or repairing here "
                f"would change that folder's runs; {advice}")
    if (host, path) == (host_name(), here) or host != host_name():
        return None
    if Path(path).exists() and _holds_this_warehouse(path, read_folder_id(root)) and not _same_folder(path, root):
        return (f"{here} is a copy of the warehouse at {other}, whose catalog {where} it shares: writing or "
                f"repairing here would change that folder's runs; {advice}")
    return None              # the registered folder is gone (moved here) or is this one under another path


def claim_folder(engine: sa.Engine, root: Path, where: str) -> None:
    """At a writer's start, under its lock: refuse a copy (KwhError, and the copy recorded so that
    repairs elsewhere know it may hold files), else renew the seal, the folder's first. One
    transaction that first locks catalog_info's id row: the writers of two folders (each under its own
    folder's lock) claim one after the other, never both."""
    with engine.begin() as con:
        _serialize(con)
        problem = copy_problem(con, root, where)
        if problem:
            displaced = con.execute(sa.select(catalog_folders.c.role).where(
                catalog_folders.c.host == host_name(), catalog_folders.c.path == str(root))).scalar() == "displaced"
            _record(con, root, "displaced" if displaced else "copy")
        else:
            current = [r for r in _folders(con) if r.role == "current"]
            seal = uuid.uuid4().hex
            _write_seal(root, seal, current[0].seal if current else None)
            if current and current[0].host == host_name() and _same_folder(current[0].path, root):
                # this folder itself, maybe under another path (a symlink, a bind mount): keep its registered path
                con.execute(catalog_folders.update().where(catalog_folders.c.role == "current")
                            .values(seal=seal, seen_at=now()))
            else:
                con.execute(catalog_folders.delete().where(catalog_folders.c.role == "current"))
                _record(con, root, "current", seal)
    if problem:
        raise KwhError(problem)


def _serialize(con: sa.Connection) -> None:
    """Take the catalog's write lock for this transaction (a row lock on PostgreSQL, the database
    lock on SQLite) by touching a row every catalog has."""
    con.execute(catalog_info.update().where(catalog_info.c.key == "warehouse_id")
                .values(value=catalog_info.c.value))


def attach_moved(engine: sa.Engine, root: Path) -> Folder | None:
    """`kwh attach --moved`: this folder is the warehouse. The folder that wrote the catalog until now
    is recorded as displaced (it may hold runs; repair then asks for --force). Returns it, or None."""
    with engine.begin() as con:
        _serialize(con)
        current = [r for r in _folders(con) if r.role == "current"]
        displaced = None
        seal = uuid.uuid4().hex
        _write_seal(root, seal, current[0].seal if current else None)
        if current:
            host, path, _, _, seen_at = current[0]
            con.execute(catalog_folders.delete().where(catalog_folders.c.role == "current"))
            if (host, path) != (host_name(), str(root)):
                displaced = Folder(host, path, "displaced", seen_at)
                _record(con, Path(path), "displaced", host=host)
        _record(con, root, "current", seal)
    return displaced


def forget_folder(con: sa.Connection, root: Path) -> None:
    """A detached copy no longer holds this catalog's runs: it stops counting as a folder that may."""
    con.execute(catalog_folders.delete().where(catalog_folders.c.host == host_name(),
                                               catalog_folders.c.path == str(root),
                                               catalog_folders.c.role != "current"))


def other_folders(con: sa.Connection, root: Path) -> list[Folder]:
    """Copies and displaced folders of this catalog that may still exist and hold files this folder
    lacks (one on this host that is gone or holds another warehouse does not count)."""
    if not sa.inspect(con).has_table(catalog_folders.name):
        return []
    warehouse_id = read_folder_id(root)
    out = []
    for host, path, role, _, seen_at in _folders(con):
        if role == "current" or (host, path) == (host_name(), str(root)):
            continue
        if host == host_name() and (not Path(path).exists() or not _holds_this_warehouse(path, warehouse_id)
                                    or _same_folder(path, root)):
            continue
        out.append(Folder(host, path, role, seen_at))
    return out


def _record(con: sa.Connection, root: Path, role: str, seal: str | None = None, host: str | None = None) -> None:
    host = host or host_name()
    con.execute(catalog_folders.delete().where(catalog_folders.c.host == host, catalog_folders.c.path == str(root)))
    con.execute(catalog_folders.insert().values(host=host, path=str(root), role=role, seal=seal, seen_at=now()))
