"""The tables of ``smr status`` and ``smr top``: the columns by priority, fitted to the
terminal's width (the columns that do not fit are named below the table), drawn with rich."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from smr.client.status import Row


@dataclass(frozen=True)
class Column:
    """One column: its header (a line break keeps it narrow) and its cell for a node up."""

    header: str
    cell: Callable[[Row], str]


# Most useful first; a narrow terminal loses columns from the end of this list.
COLUMNS_BY_PRIORITY: Final = (
    Column("node", lambda row: str(row["node"])),
    # An answering node shows its role: serving, standby, or fenced (rejoined empty).
    Column("state", lambda row: str(row.get("role", row["state"]))),
    Column("keys", lambda row: f"{row['keys']:,}"),
    Column("offline\nslots", lambda row: f"{row.get('offline_slots', 0):,}"),
    Column("reduce\nerrors", lambda row: f"{row['tuples_failed']:,}"),
    Column("bad\nframes", lambda row: f"{row['bad_frames']:,}"),
    Column("under-\nreplicated", lambda row: f"{row['under_replicated_slots']:,}"),
    Column("tuples/s", lambda row: f"{row['tuples_per_s']:,.0f}"),
    Column("applied", lambda row: f"{row['tuples_applied']:,}"),
    Column("range", lambda row: f"{row['range_share']:.1%}"),
    Column("token", lambda row: "-" if row["token"] is None else str(row["token"])),
    Column("cpu%", lambda row: f"{row.get('load', {}).get('cpu_percent', 0):.0f}"),
)

# The order the kept columns are shown in.
_DISPLAY_ORDER: Final = (
    "node",
    "state",
    "token",
    "range",
    "keys",
    "offline\nslots",
    "tuples/s",
    "cpu%",
    "applied",
    "reduce\nerrors",
    "bad\nframes",
    "under-\nreplicated",
)

_ALWAYS_SHOWN: Final = 2  # node and state

_UNBOUNDED_WIDTH: Final = 10_000

# `smr top`'s columns, most useful first (those it shares with `smr status` are the same
# columns), and the order it shows them in.
_STATUS_COLUMN: Final = {column.header: column for column in COLUMNS_BY_PRIORITY}

TOP_COLUMNS_BY_PRIORITY: Final = (
    _STATUS_COLUMN["node"],
    _STATUS_COLUMN["state"],
    _STATUS_COLUMN["tuples/s"],
    Column("inbox", lambda row: f"{row.get('inbox_tuples', 0):,}"),
    _STATUS_COLUMN["cpu%"],
    Column("rss\nMiB", lambda row: f"{row.get('rss_bytes', 0) / 2**20:,.0f}"),
    _STATUS_COLUMN["keys"],
    _STATUS_COLUMN["under-\nreplicated"],
    Column("moves", lambda row: f"{len(row.get('moves', {}).get('under_way', ())):,}"),
    _STATUS_COLUMN["bad\nframes"],
    _STATUS_COLUMN["reduce\nerrors"],
)

_TOP_DISPLAY_ORDER: Final = tuple(c.header for c in TOP_COLUMNS_BY_PRIORITY)


def table(
    rows: Sequence[Row],
    title: str,
    width: int,
    columns: Sequence[Column] = COLUMNS_BY_PRIORITY,
    order: Sequence[str] = _DISPLAY_ORDER,
) -> tuple[Table, list[str]]:
    """The table of ``columns`` (most useful first; shown in ``order``) for ``rows``, with
    as many columns as fit in ``width``, and the headers of the columns left out."""
    kept = list(columns)
    # Measured unbounded: rich clamps a measurement to the width it is given.
    console = Console(width=_UNBOUNDED_WIDTH)
    while True:
        candidate = _table(rows, title, kept, order)
        needed = Measurement.get(console, console.options, candidate).maximum
        if needed <= width or len(kept) <= _ALWAYS_SHOWN:
            left_out = [_one_line(c.header) for c in columns if c not in kept]
            return candidate, left_out
        kept.pop()


def top_table(rows: Sequence[Row], title: str, width: int) -> tuple[Table, list[str]]:
    """`smr top`'s table: rate, inbox, CPU, RSS, keys, under-replicated slots and moves
    under way per node, fitted to ``width`` as :func:`table` does."""
    return table(rows, title, width, TOP_COLUMNS_BY_PRIORITY, _TOP_DISPLAY_ORDER)


def print_table(rows: Sequence[Row], title: str, console: Console | None = None) -> None:
    """Print the table to ``console`` (standard output by default), fitting its width."""
    console = console or Console()
    shown, left_out = table(rows, title, console.width)
    console.print(shown)
    if left_out:
        console.print(f"not shown at this width: {', '.join(left_out)} (see --json)")


def _table(
    rows: Sequence[Row], title: str, columns: Sequence[Column], order: Sequence[str]
) -> Table:
    ordered = sorted(columns, key=lambda c: order.index(c.header))
    shown = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ordered:
        shown.add_column(
            column.header,
            justify="left" if column.header in ("node", "state") else "right",
            no_wrap=True,
        )
    for row in rows:
        if row["state"] != "up":
            shown.add_row(*(c.cell(row) if c.header in ("node", "state") else "-" for c in ordered))
        else:
            shown.add_row(*(c.cell(row) for c in ordered))
    return shown


def _one_line(header: str) -> str:
    return header.replace("-\n", "-").replace("\n", " ")
