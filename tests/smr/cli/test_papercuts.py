"""The command line as a new user meets it, without a running cluster: each message is the
exact line, with its exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import smr
from smr.api import JobLoadError, absolute_job_ref, load_job
from smr.cli.root import first_sentence, main, main_group
from smr.client.control import none_answers_message
from smr.client.status import unreachable_line

REPO = Path(__file__).resolve().parents[3]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``smr ARGS`` in this process: exit code, standard output, standard error."""
    with pytest.raises(SystemExit) as exit_:
        main(args)
        raise SystemExit(0)
    captured = capsys.readouterr()
    code = exit_.value.code
    return (code if isinstance(code, int) else 0), captured.out, captured.err


def smr_process(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smr", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        env=env,
    )


# -- a bare smr, near misses ---------------------------------------------------------------


def test_a_bare_smr_prints_its_help_and_exits_0() -> None:
    done = smr_process()
    assert done.returncode == 0
    assert done.stderr == ""
    assert done.stdout.startswith("Usage: smr [OPTIONS] [COMMAND] [ARGS]...\n")
    assert "Commands:" in done.stdout and "smr: error" not in done.stdout


def test_a_near_miss_of_a_command_says_which_was_meant(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["stauts", "--cluster", "x"], capsys)
    assert (code, err) == (2, "smr: error: No such command 'stauts'. Did you mean 'status'?\n")


def test_a_near_miss_of_an_option_says_which_was_meant(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["query", "--clustr", "x", "k"], capsys)
    assert (code, err) == (2, "smr: error: No such option '--clustr'. Did you mean '--cluster'?\n")


def test_every_summary_in_the_help_is_a_whole_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    for name in main_group.list_commands(None):  # type: ignore[arg-type]
        command = main_group.commands[name]
        summary = command.get_short_help_str()
        assert summary.endswith((".", ")")), (name, summary)
        assert not summary.endswith("..."), (name, summary)
    assert first_sentence("A live view: a, b,\n    c. And more.") == "A live view: a, b, c."


# -- the cluster's directory ---------------------------------------------------------------


def test_cluster_up_takes_cluster_and_dir_alike_and_smr_cluster_from_the_environment(
    tmp_path: Path,
) -> None:
    # A job that does not load stops `cluster up` after its options are read: each form of
    # the directory reaches that point.
    for args, env in (
        (["--cluster", str(tmp_path / "a")], None),
        (["--dir", str(tmp_path / "a")], None),
        ([], {"SMR_CLUSTER": str(tmp_path / "a")}),
    ):
        done = smr_process(
            "cluster",
            "up",
            *args,
            "--job",
            "nowhere_job:job",
            env=None if env is None else {**_environ(), **env},
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("smr: error: job module 'nowhere_job' not found"), done.stderr
    done = smr_process("status", env={**_environ(), "SMR_CLUSTER": str(tmp_path / "b")})
    assert done.returncode == 2
    assert str(tmp_path / "b") in done.stderr and len(done.stderr.splitlines()) == 1


def _environ() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "SMR_CLUSTER"}


def test_a_refused_cluster_up_leaves_no_directory(tmp_path: Path) -> None:
    where = tmp_path / "refused"
    done = smr_process(
        "cluster",
        "up",
        "--cluster",
        str(where),
        "--nodes",
        "2",
        "--replication",
        "2",
        "--job",
        "examples.wordcount:job",
    )
    assert done.returncode == 2
    assert done.stderr == "smr: error: --replication must be between 0 and nodes - 1 (1), got 2\n"
    assert not where.exists()


# -- the job -------------------------------------------------------------------------------


def test_a_job_file_is_stored_by_its_absolute_path(tmp_path: Path) -> None:
    assert absolute_job_ref("myjob/job.py:job", tmp_path) == f"{tmp_path}/myjob/job.py:job"
    assert absolute_job_ref("/abs/job.py:job", tmp_path) == "/abs/job.py:job"
    assert absolute_job_ref("examples.wordcount:job", tmp_path) == "examples.wordcount:job"
    assert absolute_job_ref("no-colon", tmp_path) == "no-colon"


def test_a_failed_import_inside_a_job_file_names_the_import_the_file_and_the_line(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad2.py"
    bad.write_text("import os\nimport nonexistent_dep\n")
    with pytest.raises(JobLoadError) as error:
        load_job(f"{bad}:job")
    assert str(error.value) == (
        f"job module '{bad}' failed to import 'nonexistent_dep' at {bad}, line 2 "
        "(import nonexistent_dep): No module named 'nonexistent_dep'"
    )


def test_a_failed_import_inside_a_job_module_is_not_called_a_missing_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "badmod.py").write_text("\nfrom nonexistent_pkg import thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(JobLoadError) as error:
        load_job("badmod:job")
    assert str(error.value).startswith(
        f"job module 'badmod' failed to import 'nonexistent_pkg' at {tmp_path / 'badmod.py'}, "
        "line 2 (from nonexistent_pkg import thing)"
    )
    with pytest.raises(JobLoadError) as missing:
        load_job("no_such_job_module:job")
    assert str(missing.value) == (
        "job module 'no_such_job_module' not found (No module named 'no_such_job_module')"
    )


def test_a_job_file_that_raises_on_import_names_the_file_and_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "raises.py"
    bad.write_text("x = 1\nraise RuntimeError('no config')\n")
    with pytest.raises(JobLoadError) as error:
        load_job(f"{bad}:job")
    assert str(error.value) == (
        f"job module '{bad}' raised on import at {bad}, line 2 "
        "(raise RuntimeError('no config')): RuntimeError: no config"
    )


# -- a cluster that is down ----------------------------------------------------------------


def test_a_cluster_none_of_whose_nodes_answers_is_said_once_with_what_to_do() -> None:
    reason = "accepts no connection (nothing listens there; or it refused this process's keys)"
    message = none_answers_message(
        [f"node at tcp://127.0.0.1:1 {reason}", f"node at tcp://127.0.0.1:2 {reason}"]
    )
    assert message == (
        f"no node of the cluster answers (tcp://127.0.0.1:1, tcp://127.0.0.1:2: {reason}); "
        "is it running? 'smr cluster up' starts it, 'smr status' shows its nodes"
    )
    assert message.count("nothing listens there") == 1


def test_the_unreachable_line_names_the_logs_folder_of_the_cluster(tmp_path: Path) -> None:
    row = {"node": "n1", "addr": "tcp://127.0.0.1:9", "state": "unreachable"}
    line = unreachable_line([row], tmp_path / "logs")
    assert line == (
        f"smr: 1 of 1 nodes unreachable: n1 (tcp://127.0.0.1:9); see their logs in "
        f"{tmp_path / 'logs'}/, or 'smr status --json' for each reason"
    )
    assert "CLUSTER/" not in (unreachable_line([row]) or "")


# -- start time and the package's names ----------------------------------------------------


def _modules_loaded_by(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


def test_import_smr_loads_no_client_no_sockets_and_no_aggregators() -> None:
    loaded = _modules_loaded_by("import smr")
    assert not {"smr.connection", "smr.client", "smr.agg", "smr.api", "zmq"} & loaded


def test_smr_version_loads_no_command_module() -> None:
    loaded = _modules_loaded_by(
        "import contextlib\nfrom smr.cli.root import main\n"
        "with contextlib.suppress(SystemExit):\n    main(['--version'])"
    )
    # The root group is smr.cli.root; no command's module is loaded beside it.
    commands = {name for name in loaded if name.startswith(("smr.cli.", "smr.node", "zmq"))}
    assert commands == {"smr.cli.root"}
    assert "smr.autoscale" not in loaded


def test_a_command_loads_its_own_module_and_not_the_others() -> None:
    loaded = _modules_loaded_by(
        "import contextlib\nfrom smr.cli.root import main\n"
        "with contextlib.suppress(SystemExit):\n    main(['cluster', '--help'])"
    )
    assert "smr.cli.cluster" in loaded
    assert not {"smr.cli.data", "smr.cli.faults", "smr.cli.top", "smr.spark.setup", "rich"} & loaded


def test_the_client_errors_are_exported_from_smr() -> None:
    for name in (
        "ClusterError",
        "Unreachable",
        "DeliveryError",
        "EmitError",
        "MapperIdReused",
        "HistoryUnknown",
        "KeysError",
        "JobLoadError",
    ):
        assert name in smr.__all__
        assert issubclass(getattr(smr, name), Exception)
    with pytest.raises(smr.ClusterError):
        smr.connect("nowhere")
    assert {name for name in smr.__all__ if not hasattr(smr, name)} == set()


# -- the project's own files ---------------------------------------------------------------


def test_make_clean_removes_what_the_build_leaves_and_make_test_says_why_it_skips() -> None:
    done = subprocess.run(
        ["make", "-n", "clean"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert {"site", "dist", "*.egg-info"} <= set(done.stdout.split())
    makefile = (REPO / "Makefile").read_text()
    runs = [
        line for line in makefile.splitlines() if "-m pytest" in line and "-m compose" not in line
    ]
    assert runs and all(" -rs" in line for line in runs), runs


def test_the_project_smr_init_writes_names_no_tool_the_wheel_does_not_install(
    tmp_path: Path,
) -> None:
    from smr.cli.scaffold import write_project

    for path in write_project(tmp_path / "p"):
        assert "pytest" not in path.read_text(), path
