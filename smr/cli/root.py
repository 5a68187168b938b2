"""The ``smr`` command's entry point (:func:`main`) and its root group, which imports a
command's module only when that command runs (:data:`COMMANDS` names each one's home).

Every user error (unknown flag, bad value, missing job module or input file, unreachable
cluster) is one line on standard error starting with ``smr: error:`` and exit code 2, never a
traceback. Ctrl-C stops a command with "interrupted" and exit 2, but for ``smr top`` and
``smr tail``, whose way to stop it is, which exit quietly with 0.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Final, NoReturn

import click

# Each command's name and where it is defined (module:attribute), in the order of the help.
COMMANDS: Final = {
    "init": "smr.cli.init:init_command",
    "cluster": "smr.cli.cluster:cluster_group",
    "feed": "smr.cli.data:feed_command",
    "spark-feed": "smr.cli.spark:spark_feed_command",
    "query": "smr.cli.data:query_command",
    "dump": "smr.cli.data:dump_command",
    "status": "smr.cli.data:status_command",
    "top": "smr.cli.top:top_command",
    "tail": "smr.cli.data:tail_command",
    "output": "smr.cli.output:output_command",
    "recover": "smr.cli.data:recover_command",
    "move": "smr.cli.ring:move_command",
    "scale": "smr.cli.ring:scale_group",
    "autoscale": "smr.cli.autoscale:autoscale_group",
    "fault": "smr.cli.faults:fault_group",
    "keys": "smr.cli.keys:keys_group",
    "node": "smr.cli.node:node_command",
}


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported from its home (``module:attribute``) the
    first time it is looked up; a name's presence is known without importing it."""

    def __init__(self, homes: Mapping[str, str]) -> None:
        self._homes = dict(homes)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module_name, _, attribute = self._homes[name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            assert isinstance(command, click.Command), self._homes[name]
            self._loaded[name] = with_whole_summaries(command)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command
        self._homes.setdefault(name, "")

    def __delitem__(self, name: str) -> None:
        del self._homes[name]
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._homes

    def __iter__(self) -> Iterator[str]:
        return iter(self._homes)

    def __len__(self) -> int:
        return len(self._homes)


def with_whole_summaries(command: click.Command) -> click.Command:
    """``command`` (and each command under it) with a short help that is its help's first
    sentence, whole, where click would cut it at 45 characters."""
    if command.short_help is None and command.help:
        command.short_help = first_sentence(command.help)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            with_whole_summaries(sub)
    return command


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph (all of it if it has no full stop)."""
    paragraph = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return match.group(1) if match else paragraph


class LazyGroup(click.Group):
    """A group whose commands are named in :data:`COMMANDS` and imported on first use, in
    that order in the help (click answers a near-miss of a name with "did you mean")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def _version() -> str:
    import smr

    return str(smr.__version__)


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    help="Show the version and exit.",
    callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
)
@click.pass_context
def main_group(ctx: click.Context) -> None:
    """smr: fault-tolerant, stateful streaming MapReduce on a consistent-hash ring.

    A job's map runs in feeders (smr feed, or Spark with smr spark-feed); its reduce runs in
    reducer nodes that keep per-key state exactly once, each tuple and checkpoint backed up
    on the next R nodes, which take over a failed node's keys. Ranges move between nodes
    while the job runs (smr move), and nodes join and leave (smr scale out, smr scale in).
    """
    if ctx.invoked_subcommand is None:
        # A bare `smr`: the help, as asked for, not as an error.
        click.echo(ctx.get_help())


def _print_version(ctx: click.Context) -> None:
    click.echo(f"smr {_version()}")
    ctx.exit(0)


def fail(message: str) -> NoReturn:
    """Print one error line and exit 2."""
    click.echo(f"smr: error: {message}", err=True)
    sys.exit(2)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors a command raises for a user's mistake (imported when one is raised: the
    command that raised it has loaded its module already, or loads it now)."""
    from smr.cli.errors import USER_ERRORS

    return USER_ERRORS


def main(argv: list[str] | None = None) -> None:
    """Entry point: run a command, turning every user error into one line and exit 2."""
    try:
        main_group.main(args=argv, prog_name="smr", standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted")
    except click.exceptions.ClickException as error:
        fail(error.format_message())
    except KeyboardInterrupt:
        fail("interrupted")
    except Exception as error:
        if isinstance(error, _user_errors()):
            fail(str(error))
        raise
