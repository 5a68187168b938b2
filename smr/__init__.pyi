# The types of the names ``smr/__init__.py`` loads on first use (see its docstring): the same
# names, each from its home.
from typing import Final

from smr import agg as agg
from smr import windows as windows
from smr.api import Job as Job
from smr.api import JobLoadError as JobLoadError
from smr.api import load_job as load_job
from smr.connection import Cluster as Cluster
from smr.connection import DeliveryError as DeliveryError
from smr.connection import EmitError as EmitError
from smr.connection import HistoryUnknown as HistoryUnknown
from smr.connection import LostSlotsSkipped as LostSlotsSkipped
from smr.connection import MapperIdReused as MapperIdReused
from smr.connection import SlotsLost as SlotsLost
from smr.connection import Unreachable as Unreachable
from smr.connection import connect as connect
from smr.spec.model import ClusterError as ClusterError
from smr.transport.security import KeysError as KeysError

__version__: str
DISTRIBUTION: Final[str]

def __dir__() -> list[str]: ...
