"""Read and rewrite the table of contents of a ``pg_dump`` custom-format archive, for tests.

The tests of ``popagent restore`` need backups edited the way an attacker
would edit them: a statement added to an entry's definition, to a table's
``COPY`` line or to the search-path header, or a whole entry added. pg_dump
cannot write such files, so this module rewrites the archive's table of
contents (format 1.14 to 1.16, as pg_dump 16 to 18 write it) and moves the
data blocks' recorded offsets by the size change. The data blocks
themselves are copied byte for byte.

The layout (PostgreSQL's ``pg_backup_archiver.c`` ``WriteHead``/``WriteToc``
and ``pg_backup_custom.c``): the magic ``PGDMP``, three version bytes, the
int and offset sizes, the format; a compression byte (1.15+); seven ints of
the creation time; three strings (database, server and pg_dump versions);
then the entry count and each entry: dump id, has-data flag, table oid, oid,
tag, kind, section, definition, drop statement, copy statement, schema,
tablespace, table access method, relkind (1.16+), owner, "false",
dependency ids ending with a null string, and the data offset (a flag byte
and ``offset_size`` bytes). An int is a sign byte and ``int_size`` bytes,
least significant first; a string is its length as an int (-1 for null),
then its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_OFFSET_SET = 2
_OFFSET_NO_DATA = 3
SECTION_PRE_DATA = 2


@dataclass
class Entry:
    dump_id: int
    has_data: int
    table_oid: str | None
    oid: str | None
    tag: str | None
    kind: str | None
    section: int
    definition: str | None
    drop: str | None
    copy: str | None
    schema: str | None
    tablespace: str | None
    table_am: str | None
    relkind: int | None
    owner: str | None
    with_oids: str | None
    dependencies: list[str] = field(default_factory=list)
    offset_flag: int = _OFFSET_NO_DATA
    offset: int = 0


@dataclass
class Archive:
    head: bytes  # everything before the entry count, unchanged
    int_size: int
    offset_size: int
    version: tuple[int, int, int]
    entries: list[Entry]
    rest: bytes  # the data blocks, unchanged
    toc_end: int  # where the data blocks began in the original file

    def entry(self, kind: str, tag: str | None = None) -> Entry:
        return next(e for e in self.entries if e.kind == kind and (tag is None or e.tag == tag))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.int_size = 4
        self.offset_size = 8

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int(self) -> int:
        sign = self.byte()
        raw = self.data[self.pos : self.pos + self.int_size]
        self.pos += self.int_size
        value = int.from_bytes(raw, "little")
        return -value if sign else value

    def str(self) -> str | None:
        length = self.int()
        if length < 0:
            return None
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8")


class _Writer:
    def __init__(self, int_size: int, offset_size: int) -> None:
        self.parts: list[bytes] = []
        self.int_size = int_size
        self.offset_size = offset_size

    def int(self, value: int) -> None:
        self.parts.append(bytes([1 if value < 0 else 0]))
        self.parts.append(abs(value).to_bytes(self.int_size, "little"))

    def str(self, value: str | None) -> None:
        if value is None:
            self.int(-1)
            return
        raw = value.encode("utf-8")
        self.int(len(raw))
        self.parts.append(raw)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def read(data: bytes) -> Archive:
    """Parse a custom-format archive's header and table of contents."""
    assert data[:5] == b"PGDMP", "not a custom-format archive"
    r = _Reader(data)
    r.pos = 5
    version = (r.byte(), r.byte(), r.byte())
    assert (1, 14, 0) <= version <= (1, 16, 0), version
    r.int_size, r.offset_size = r.byte(), r.byte()
    assert r.byte() == 1, "not the custom format"
    if version >= (1, 15, 0):
        r.byte()  # compression algorithm
    for _ in range(7):
        r.int()  # creation time
    for _ in range(3):
        r.str()  # database, server version, pg_dump version
    head = data[: r.pos]
    entries: list[Entry] = []
    for _ in range(r.int()):
        entry = Entry(
            dump_id=r.int(),
            has_data=r.int(),
            table_oid=r.str(),
            oid=r.str(),
            tag=r.str(),
            kind=r.str(),
            section=r.int(),
            definition=r.str(),
            drop=r.str(),
            copy=r.str(),
            schema=r.str(),
            tablespace=r.str(),
            table_am=r.str(),
            relkind=r.int() if version >= (1, 16, 0) else None,
            owner=r.str(),
            with_oids=r.str(),
        )
        while (dep := r.str()) is not None:
            entry.dependencies.append(dep)
        entry.offset_flag = r.byte()
        entry.offset = int.from_bytes(r.data[r.pos : r.pos + r.offset_size], "little")
        r.pos += r.offset_size
        entries.append(entry)
    return Archive(head, r.int_size, r.offset_size, version, entries, data[r.pos :], r.pos)


def write(archive: Archive) -> bytes:
    """The archive with its (possibly edited) entries; data offsets follow the size change."""

    def toc(shift: int) -> bytes:
        w = _Writer(archive.int_size, archive.offset_size)
        w.int(len(archive.entries))
        for e in archive.entries:
            w.int(e.dump_id)
            w.int(e.has_data)
            for text in (e.table_oid, e.oid, e.tag, e.kind):
                w.str(text)
            w.int(e.section)
            for text in (e.definition, e.drop, e.copy, e.schema, e.tablespace, e.table_am):
                w.str(text)
            if archive.version >= (1, 16, 0):
                w.int(e.relkind or 0)
            w.str(e.owner)
            w.str(e.with_oids)
            for dep in e.dependencies:
                w.str(dep)
            w.str(None)
            offset = e.offset + shift if e.offset_flag == _OFFSET_SET else e.offset
            w.parts.append(bytes([e.offset_flag]))
            w.parts.append(offset.to_bytes(archive.offset_size, "little"))
        return w.bytes()

    # The entries' size does not depend on the offsets' values: measure, then shift.
    size = len(archive.head) + len(toc(0))
    return archive.head + toc(size - archive.toc_end) + archive.rest


def add_entry(archive: Archive, kind: str, tag: str, definition: str, schema: str = "") -> Entry:
    """Append a schema entry (no data) that runs ``definition`` when pg_restore restores it."""
    entry = Entry(
        dump_id=max(e.dump_id for e in archive.entries) + 1,
        has_data=0,
        table_oid="0",
        oid="0",
        tag=tag,
        kind=kind,
        section=SECTION_PRE_DATA,
        definition=definition,
        drop="",
        copy="",
        schema=schema,
        tablespace=None,
        table_am=None,
        relkind=0,
        owner="postgres",
        with_oids="false",
    )
    archive.entries.append(entry)
    return entry
