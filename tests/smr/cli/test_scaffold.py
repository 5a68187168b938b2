"""smr init: the project it writes runs as written (its test passes, in a process of its
own), and it never overwrites a user's file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import smr
from smr.api import load_job
from smr.cli.root import main
from smr.cli.scaffold import FILES, job_name
from smr.testing import run_job


def test_init_writes_a_project_whose_test_passes(tmp_path: Path) -> None:
    project = tmp_path / "Word Freq"
    main(["init", str(project)])
    assert sorted(p.name for p in project.iterdir()) == sorted(FILES)
    done = subprocess.run(
        [sys.executable, "test_job.py"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2 tests passed"
    # The job loads as the cluster loads it, by file path, and counts the sample.
    job = load_job(f"{project / 'job.py'}:job")
    assert job.name == "word_freq"
    states = run_job(job, (project / "sample.txt").read_text().splitlines()).states
    assert states["whale"] == {"count": 4}


def test_init_never_overwrites_and_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.py").write_text("mine = 1\n")
    with pytest.raises(SystemExit) as exit_:
        main(["init", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds job.py" in err[0]
    assert (tmp_path / "job.py").read_text() == "mine = 1\n"
    assert not (tmp_path / "test_job.py").exists()


def test_init_refuses_a_file_as_its_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a-file"
    target.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["init", str(target)])
    assert exit_.value.code == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "expected"), [("My Words", "my_words"), ("x--1", "x_1"), ("___", "job")]
)
def test_the_job_name_comes_from_the_directory(name: str, expected: str) -> None:
    assert job_name(Path("/tmp") / name) == expected


def test_version_is_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--version"])
    assert capsys.readouterr().out.strip() == f"smr {smr.__version__}"
    assert smr.__version__[0].isdigit() and smr.__version__ != "0+unknown"


# A Python without PySpark: an import hook that finds no pyspark, as on a machine without
# the spark extra.
WITHOUT_PYSPARK = """
import sys
class NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoPySpark())
"""


def test_without_pyspark_spark_feed_says_how_to_install_it_in_one_line(tmp_path: Path) -> None:
    program = WITHOUT_PYSPARK + (
        "from smr.cli.root import main\n"
        f"main(['spark-feed', '--cluster', {str(tmp_path)!r}, '--input', {str(tmp_path)!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "smr: error: the Spark tier needs pyspark, which is not installed: "
        "pip install 'smr-ring[spark]'"
    ]


def test_without_pyspark_a_name_of_smr_spark_says_how_to_install_it() -> None:
    # The package imports (smr.spark.setup and smr.spark.checkpoint need no pyspark); its
    # public names load the query module, which says what to install.
    program = WITHOUT_PYSPARK + (
        "import smr.spark, smr.spark.setup, smr.spark.checkpoint\n"
        "try:\n"
        "    from smr.spark import emit\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"
        "import smr, smr.connection, smr.cli\n"  # the rest of the package does not need it
        "print('rest ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "SparkMissing the Spark tier needs pyspark, which is not installed: "
        "pip install 'smr-ring[spark]'",
        "rest ok",
    ]
