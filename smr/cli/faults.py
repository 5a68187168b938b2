"""``smr fault``: inject faults into a cluster's nodes, a local cluster's processes
(``--cluster DIR``) or the compose cluster's containers (``--docker-project NAME``), by
hand or from a chaos schedule (``smr fault run``). Registered on the main group by
:mod:`smr.cli`; the backends are in :mod:`smr.faults.backends` and :mod:`smr.faults.docker`."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from smr.cli.options import choose_keys
from smr.faults.backends import (
    FaultBackend,
    FaultLog,
    HealIncomplete,
    LocalBackend,
    parse_duration_ms,
    parse_groups,
    parse_percent_ppm,
)
from smr.faults.chaos import load_schedule, play
from smr.spec.model import ClusterError

F = TypeVar("F", bound=Callable[..., Any])


@click.group("fault")
def fault_group() -> None:
    """Inject faults into a cluster's nodes: a local cluster's processes (--cluster DIR) or
    the compose cluster's containers (--docker-project NAME). Every fault but kill heals
    by itself after its --duration; each is appended to a JSON-lines log (--log)."""


def _target_options(command: F) -> F:
    @click.option(
        "--cluster",
        "cluster_dir",
        type=click.Path(file_okay=False, path_type=Path),
        callback=choose_keys,
        help="A local cluster's directory (holds cluster.json, and keys/ when it is secured).",
    )
    @click.option(
        "--docker-project",
        help="The compose project of a Docker cluster (compose/docker-compose.yml: smr).",
    )
    @click.option(
        "--log",
        "log_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Append what was done when, as JSON lines "
        "(default: faults.jsonl in the cluster's directory; none for Docker).",
    )
    @functools.wraps(command)
    def with_target(
        cluster_dir: Path | None, docker_project: str | None, log_path: Path | None, **kw: Any
    ) -> Any:
        backend = _backend(cluster_dir, docker_project)
        if log_path is None and cluster_dir is not None:
            log_path = cluster_dir / "faults.jsonl"
        return command(backend=backend, log=FaultLog(log_path, backend.name, click.echo), **kw)

    return with_target  # type: ignore[return-value]


def _backend(cluster_dir: Path | None, docker_project: str | None) -> FaultBackend:
    if (cluster_dir is None) == (docker_project is None):
        raise click.UsageError("name the cluster: --cluster DIR or --docker-project NAME")
    if docker_project is not None:
        try:
            from smr.faults.docker import DockerBackend
        except ImportError:
            raise click.ClickException(
                "the Docker backend needs the Docker SDK: pip install 'smr-ring[docker]'"
            ) from None
        docker_backend: FaultBackend = _or_fail(DockerBackend, docker_project)
        return docker_backend
    assert cluster_dir is not None
    if not (cluster_dir / "cluster.json").is_file():
        raise click.ClickException(f"no cluster.json in {cluster_dir}")
    return LocalBackend(cluster_dir)


def _or_fail(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``action(...)``; a ClusterError (or a bad value) becomes a user error: one line,
    exit code 2."""
    try:
        return action(*args, **kwargs)
    except (ClusterError, ValueError) as error:
        raise click.ClickException(str(error)) from None


def _ms(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """A duration option's value in ms (0 allowed: a jitter)."""
    if value is None:
        return None
    try:
        return parse_duration_ms(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A duration option's value in ms, more than 0 (a fault's length, a delay)."""
    duration_ms = _ms(ctx, param, value)
    if duration_ms is not None and duration_ms <= 0:
        raise click.BadParameter(f"must be more than 0, not {value!r}")
    return duration_ms


duration_option = click.option(
    "--duration",
    "duration_ms",
    required=True,
    callback=_duration,
    help="How long the fault lasts before it heals by itself (100ms, 5s, 1m).",
)


@fault_group.command("kill")
@click.argument("node_id")
@_target_options
def fault_kill(node_id: str, backend: FaultBackend, log: FaultLog) -> None:
    """Kill node NODE_ID at once (SIGKILL): it stays dead."""
    log.record("kill", [node_id], _or_fail(backend.kill, node_id))


@fault_group.command("pause")
@click.argument("node_id")
@click.option(
    "--duration",
    "duration_ms",
    callback=_duration,
    help="Resume the node after this long (the command waits); without it, the node "
    "stays paused until `smr fault resume`.",
)
@_target_options
def fault_pause(
    node_id: str, duration_ms: int | None, backend: FaultBackend, log: FaultLog
) -> None:
    """Pause node NODE_ID (SIGSTOP, or docker pause): it runs and sends nothing."""
    log.record("pause", [node_id], _or_fail(backend.pause, node_id))
    if duration_ms is None:
        return
    try:
        time.sleep(duration_ms / 1000)
    finally:  # an interrupted wait resumes the node too
        log.record("resume", [node_id], _or_fail(backend.resume, node_id))


@fault_group.command("resume")
@click.argument("node_id")
@_target_options
def fault_resume(node_id: str, backend: FaultBackend, log: FaultLog) -> None:
    """Resume a paused node NODE_ID (SIGCONT, or docker unpause)."""
    log.record("resume", [node_id], _or_fail(backend.resume, node_id))


@fault_group.command("partition")
@click.argument("groups", nargs=-1, required=True)
@duration_option
@_target_options
def fault_partition(
    groups: tuple[str, ...], duration_ms: int, backend: FaultBackend, log: FaultLog
) -> None:
    """Cut two groups of nodes from each other: GROUPS is `A,B / C` (or `A,B`: against
    every other node). Traffic inside each group, and with clients and feeders, goes on."""
    group_a, group_b = _or_fail(parse_groups, groups, backend.nodes())
    how = _or_fail(backend.partition, group_a, group_b, duration_ms)
    log.record("partition", [*group_a, "/", *group_b], how, duration_ms=duration_ms)


@fault_group.command("delay")
@click.argument("node_id")
@click.argument("delay", callback=_duration)
@click.option("--jitter", "jitter", default="0ms", callback=_ms, help="± this much.")
@duration_option
@_target_options
def fault_delay(
    node_id: str,
    delay: int,
    jitter: int,
    duration_ms: int,
    backend: FaultBackend,
    log: FaultLog,
) -> None:
    """Delay what node NODE_ID sends and receives by DELAY (100ms)."""
    how = _or_fail(backend.delay, node_id, delay, jitter, duration_ms)
    log.record("delay", [node_id], how, duration_ms=duration_ms, delay_ms=delay, jitter_ms=jitter)


@fault_group.command("loss")
@click.argument("node_id")
@click.argument("share")
@duration_option
@_target_options
def fault_loss(
    node_id: str, share: str, duration_ms: int, backend: FaultBackend, log: FaultLog
) -> None:
    """Lose SHARE (5%) of what node NODE_ID sends and receives."""
    loss_ppm = _or_fail(parse_percent_ppm, share)
    how = _or_fail(backend.loss, node_id, loss_ppm, duration_ms)
    log.record("loss", [node_id], how, duration_ms=duration_ms, loss_ppm=loss_ppm)


@fault_group.command("heal")
@_target_options
def fault_heal(backend: FaultBackend, log: FaultLog) -> None:
    """End every partition, delay and loss now (paused nodes stay paused). A node that runs
    and cannot be reached (paused, or refusing this process's keys) is named, and the
    command exits 2 after logging the heal of the others."""
    try:
        how = backend.heal()
    except HealIncomplete as incomplete:
        if incomplete.reached:
            log.record("heal", incomplete.reached, incomplete.how)
        raise click.ClickException(str(incomplete)) from None
    except (ClusterError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    log.record("heal", backend.nodes(), how)


@fault_group.command("run")
@click.argument("schedule_path", type=click.Path(dir_okay=False, path_type=Path))
@_target_options
def fault_run(schedule_path: Path, backend: FaultBackend, log: FaultLog) -> None:
    """Play the chaos schedule in TOML file SCHEDULE_PATH (smr/faults/chaos.py says its format):
    each fault at its time, until the last one has healed."""
    schedule = _or_fail(load_schedule, schedule_path)
    actions = _or_fail(play, schedule, backend, log)
    click.echo(f"played {schedule_path}: {actions} actions")
