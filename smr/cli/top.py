"""``smr top``: a live view of every node, refreshed in place. Loaded by :mod:`smr.cli` when it
runs."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from smr.autoscale.controller import read_status
from smr.cli import status_view
from smr.cli.options import cluster_option
from smr.client import status
from smr.connection import Cluster, connect


@click.command("top")
@cluster_option
@click.option(
    "--interval-s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.2),
    help="Seconds between refreshes.",
)
@click.option("--count", type=click.IntRange(1), help="Refresh this many times, then exit.")
def top_command(cluster_arg: str, interval_s: float, count: int | None) -> None:
    """A live view of every node, refreshed in place until Ctrl-C: tuples/s, inbox, CPU,
    RSS, keys, under-replicated slots and moves under way, fitted to the terminal's width
    (80 columns when not a terminal); below it the moves, unreachable and offline lines
    of smr status and, for a cluster directory, the autoscaler's last decision."""
    console = Console()
    # Ctrl-C is the way to quit: the view stops there, quietly, with exit 0.
    with (
        contextlib.suppress(KeyboardInterrupt),
        connect(cluster_arg, timeout_s=min(1.0, interval_s)) as cluster,
        Live(console=console, auto_refresh=False) as live,
    ):
        refreshes = 0
        while count is None or refreshes < count:
            live.update(render(cluster, console.width), refresh=True)
            refreshes += 1
            if count is None or refreshes < count:
                time.sleep(interval_s)
    if not console.is_terminal:
        console.line()  # the last screen, printed once, ends its line


def render(cluster: Cluster, width: int) -> Group:
    """One screen: the nodes' table and the lines below it."""
    rows = cluster.status()
    title = f"smr top {cluster.ref.arg}  {time.strftime('%H:%M:%S')}"
    shown, left_out = status_view.top_table(rows, title, width)
    lines: list[Any] = [shown]
    if left_out:
        lines.append(Text(f"not shown at this width: {', '.join(left_out)}"))
    for line, style in (
        (status.moves_line(rows), ""),
        (status.unreachable_line(rows, _logs_dir(cluster)), "yellow"),
        (status.dead_line(rows), "red"),
        (status.offline_line(rows), "red"),
    ):
        if line is not None:
            lines.append(Text(line, style=style))
    if cluster.ref.directory is not None:
        lines.append(Text(autoscaler_line(read_status(cluster.ref.directory))))
    return Group(*lines)


def _logs_dir(cluster: Cluster) -> Path | None:
    return None if cluster.ref.directory is None else cluster.ref.directory / "logs"


def autoscaler_line(status: dict[str, Any] | None) -> str:
    """The autoscaler's last decision in one line (or that none runs here)."""
    if status is None:
        return "autoscaler: none has run on this cluster"
    age_s = time.time() - status["updated_at_unix_s"]
    decision = status["decision"]
    return (
        f"autoscaler ({status['policy']}, {age_s:.0f} s ago): {decision['nodes_wanted']} "
        f"nodes: {decision['reason']}"
    )
