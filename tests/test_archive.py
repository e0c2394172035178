"""The readers of ``popagent.store.archive``, without a database: what a backup may hold."""

from __future__ import annotations

import pytest

from popagent.errors import BackupError
from popagent.store.archive import (
    STATEMENT_CAP,
    CopyEnd,
    CopyRows,
    CopyStart,
    DataScript,
    Event,
    Expected,
    SequenceSet,
    check_toc,
    migration_rows,
    parse_toc,
)

SCRIPT = b"""--
-- PostgreSQL database dump
--

\\restrict zEgXaBTZD9wOWOiC0BZncMHIN4hCXCR1ysCZagfo2XpOTnLmtsSBxR9VDlUE34s

SET statement_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET default_table_access_method = heap;

--
-- Data for Name: popagent_memories; Type: TABLE DATA; Schema: public; Owner: postgres
--

COPY public.popagent_memories (id, resource_id, "key", content) FROM stdin;
1\tr1\t\\N\thello world
2\tr1\tdrink\ttabs\\there; COPY (SELECT 1) TO PROGRAM 'id'
\\.


COPY public.popagent_schema_migrations (version, name, applied_at) FROM stdin;
1\tmemories\t2026-12-04 20:25:50.491539+00
17\tpending_vectors\t2026-12-04 20:25:50.607103+00
\\.


SELECT pg_catalog.setval('public.popagent_memories_id_seq', 2, true);

\\unrestrict zEgXaBTZD9wOWOiC0BZncMHIN4hCXCR1ysCZagfo2XpOTnLmtsSBxR9VDlUE34s
"""


def read(script: bytes, chunk: int) -> list[Event]:
    reader = DataScript()
    events: list[Event] = []
    for start in range(0, len(script), chunk):
        events.extend(reader.feed(script[start : start + chunk]))
    reader.close()
    return events


def merged(events: list[Event]) -> list[Event]:
    """Adjacent row chunks joined: how a script is cut into chunks must not matter."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, CopyRows) and out and isinstance(out[-1], CopyRows):
            out[-1] = CopyRows(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def test_a_data_script_reads_as_rows_and_sequence_positions_in_any_chunking() -> None:
    whole = merged(read(SCRIPT, len(SCRIPT)))
    assert whole == [
        CopyStart("public", "popagent_memories", ("id", "resource_id", "key", "content")),
        CopyRows(
            b"1\tr1\t\\N\thello world\n2\tr1\tdrink\ttabs\\there; COPY (SELECT 1) TO PROGRAM 'id'\n"
        ),
        CopyEnd(),
        CopyStart("public", "popagent_schema_migrations", ("version", "name", "applied_at")),
        CopyRows(
            b"1\tmemories\t2026-12-04 20:25:50.491539+00\n"
            b"17\tpending_vectors\t2026-12-04 20:25:50.607103+00\n"
        ),
        CopyEnd(),
        SequenceSet("public", "popagent_memories_id_seq", 2, True),
    ]
    for chunk in (1, 2, 3, 7, 64):
        assert merged(read(SCRIPT, chunk)) == whole, chunk
    rows = whole[4]
    assert isinstance(rows, CopyRows)
    assert migration_rows(rows.data) == [(1, "memories"), (17, "pending_vectors")]


@pytest.mark.parametrize(
    "line",
    [
        "COPY (SELECT 1) TO PROGRAM 'touch /tmp/x';",
        "SELECT pg_catalog.set_config('search_path', '', false); DROP TABLE x;",
        "COPY public.popagent_memories (id) FROM '/etc/passwd';",
        "COPY public.popagent_memories (id) FROM stdin; SELECT 1;",
        "SET session_replication_role = replica;",
        "SET client_encoding = 'UTF8'; SELECT 1;",
        "SELECT pg_catalog.setval('public.s', 1, true); SELECT 1;",
        "SELECT pg_catalog.setval('public.s'', 1, true); SELECT pg_sleep(9); --', 1, true);",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        "\\! touch /tmp/x",
        "SELECT pg_catalog.lo_open('1', 131072);",
    ],
)
def test_any_other_statement_is_refused_naming_it(line: str) -> None:
    script = SCRIPT.replace(b"SET statement_timeout = 0;", line.encode())
    with pytest.raises(BackupError, match="statement popagent does not run") as refused:
        read(script, 5)
    assert line[:40] in str(refused.value)


def test_damaged_or_foreign_scripts_are_refused() -> None:
    with pytest.raises(BackupError, match="middle of a table's rows"):
        read(SCRIPT[: SCRIPT.index(b"\\.")], 100)
    with pytest.raises(BackupError, match="encoding LATIN1"):
        read(SCRIPT.replace(b"'UTF8'", b"'LATIN1'"), 100)
    with pytest.raises(BackupError, match="more than"):
        read(b"SELECT " + b"x" * (STATEMENT_CAP + 10), 1000)
    with pytest.raises(BackupError, match="cannot read"):
        migration_rows(b"1\tmemories\n")


LISTING = """;
; Archive created at 2026-12-04 20:25:50 UTC
;     dbname: postgres
;
3; 3079 16476 EXTENSION - btree_gin {no_owner}
3300; 0 0 COMMENT - EXTENSION btree_gin {no_owner}
375; 1255 17044 FUNCTION public popagent_scoped_lexemes(text, tsvector) postgres
224; 1259 16913 TABLE public popagent_memories postgres
223; 1259 16912 SEQUENCE public popagent_memories_id_seq postgres
3273; 0 16913 TABLE DATA public popagent_memories postgres
3304; 0 0 SEQUENCE SET public popagent_memories_id_seq postgres
3059; 2606 17673 CONSTRAINT public popagent_memories popagent_memories_pkey postgres
3061; 1259 17591 INDEX public popagent_memories_scoped_lexemes_idx postgres
3123; 2620 17604 TRIGGER public popagent_memories popagent_memories_stats_update my owner
3400; 0 0 ACL public TABLE popagent_memories postgres
""".format(no_owner="")  # an extension's entries end in a space: they have no owner

EXPECTED = Expected(
    tags={
        "TABLE": frozenset({"popagent_memories"}),
        "TABLE DATA": frozenset({"popagent_memories"}),
        "SEQUENCE": frozenset({"popagent_memories_id_seq"}),
        "SEQUENCE SET": frozenset({"popagent_memories_id_seq"}),
        "CONSTRAINT": frozenset({"popagent_memories popagent_memories_pkey"}),
        "INDEX": frozenset({"popagent_memories_scoped_lexemes_idx"}),
        "TRIGGER": frozenset({"popagent_memories popagent_memories_stats_update"}),
        "FUNCTION": frozenset({"popagent_scoped_lexemes(text, tsvector)"}),
    },
    columns={"popagent_memories": ("id", "content")},
    extensions=frozenset({"btree_gin"}),
    sequences=frozenset({"popagent_memories_id_seq"}),
)


def test_the_listing_of_a_popagent_backup_passes() -> None:
    entries = parse_toc(LISTING)
    assert [e.dump_id for e in entries][:3] == [3, 3300, 375]
    assert entries[5].kind == "TABLE DATA" and entries[5].tag == "popagent_memories"
    check_toc(entries, EXPECTED, "public")


@pytest.mark.parametrize(
    "line",
    [
        "500; 1255 1 FUNCTION public popagent_evil() postgres",
        "501; 2620 1 TRIGGER public popagent_memories popagent_evil postgres",
        "502; 3079 1 EXTENSION - dblink ",
        "503; 1259 1 TABLE public invoices postgres",
        "504; 0 1 TABLE DATA public invoices postgres",
        "505; 3466 1 EVENT TRIGGER - popagent_memories postgres",
        "506; 1259 1 VIEW public popagent_memories_view postgres",
        "507; 1259 1 TABLE other popagent_memories postgres",
        "508; 2618 1 RULE public popagent_memories popagent_rule postgres",
        "509; 0 0 COMMENT - EXTENSION dblink ",
        "510; 0 0 ACL public FUNCTION pg_read_file(text) postgres",
        "511; 2617 1 LARGE OBJECT - 16400 postgres",
        "512; 1255 1 FUNCTION public popagent_scoped_lexemes(text, tsvector, int) postgres",
    ],
)
def test_any_other_entry_is_refused_naming_it(line: str) -> None:
    # Kinds no popagent backup holds are refused as they are read; the others when checked.
    with pytest.raises(BackupError, match="popagent's migrations do not create") as refused:
        check_toc(parse_toc(LISTING + line + "\n"), EXPECTED, "public")
    assert line.split(" ", 3)[3].rstrip() in str(refused.value)
    assert f"entry {line.split(';')[0]} " in str(refused.value)


def test_a_listing_line_that_is_no_entry_is_refused() -> None:
    with pytest.raises(BackupError, match="cannot read"):
        parse_toc("COPY (SELECT 1) TO PROGRAM 'x'\n")
    with pytest.raises(BackupError, match="characters"):
        parse_toc("1; 0 0 TABLE public " + "x" * STATEMENT_CAP)
