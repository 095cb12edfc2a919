"""The agent's collectors, one small class per file; every agent builds the ones below.

Registering a collector is one line here (its order is the order of the points in a
tick); ``base`` says what a collector is, ``profiler.agent.schema`` turns their
``FIELDS`` into docs/metrics.md's table.
"""

from .agent_self import AgentSelf
from .base import REGISTRY, Collector, Field, Sample, Unavailable, build, register
from .cgroup_cpu import CgroupCpu
from .cgroup_memory import CgroupMemory
from .cpu_freq import CpuFreq
from .disk import Disk
from .host_cpu import HostCpu
from .host_memory import HostMemory
from .load import Load
from .network import Network
from .pi_throttling import PiThrottling
from .processes import Processes
from .temperature import Temperature

register(HostCpu)
register(CgroupCpu)
register(Load)
register(CpuFreq)
register(HostMemory)
register(CgroupMemory)
register(Network)
register(Disk)
register(Temperature)
register(PiThrottling)
register(Processes)
register(AgentSelf)

__all__ = ["REGISTRY", "Collector", "Field", "Sample", "Unavailable", "build", "register",
           "AgentSelf", "CgroupCpu", "CgroupMemory", "CpuFreq", "Disk", "HostCpu",
           "HostMemory", "Load", "Network", "PiThrottling", "Processes", "Temperature"]
