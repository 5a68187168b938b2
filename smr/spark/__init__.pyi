# The types of the names ``smr/spark/__init__.py`` loads on first use (see its docstring):
# the same names, each from its home.
from smr.spark.partitions import FeedSettings as FeedSettings
from smr.spark.query import BatchReport as BatchReport
from smr.spark.query import SparkQueryError as SparkQueryError
from smr.spark.query import await_query as await_query
from smr.spark.query import check_input_dir as check_input_dir
from smr.spark.query import check_java as check_java
from smr.spark.query import check_workers as check_workers
from smr.spark.query import emit as emit
from smr.spark.query import feed_settings as feed_settings
from smr.spark.query import java_major_version as java_major_version
from smr.spark.query import parse_socket_ref as parse_socket_ref
from smr.spark.query import root_cause as root_cause
from smr.spark.query import session as session
from smr.spark.query import socket_lines as socket_lines
from smr.spark.query import text_files as text_files

def __dir__() -> list[str]: ...
