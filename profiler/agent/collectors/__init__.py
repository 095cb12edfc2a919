"""The agent's collectors, one small class per file; every agent builds the ones below.

Registering a collector is one line here (its order is the order of the points in a
tick), or an installed distribution's entry point of the group ``edgeprof.collectors``
naming its class (``base.PLUGINS``, built after these). ``base`` says what a collector
is, ``profiler.agent.schema`` turns the built-ins' ``FIELDS`` into docs/metrics.md's table.
"""

from .agent_self import AgentSelf
from .base import PLUGINS, REGISTRY, Collector, Field, Sample, Unavailable, build, register
from .cgroup_cpu import CgroupCpu
from .cgroup_memory import CgroupMemory
from .container_cpu import ContainerCpu
from .container_memory import ContainerMemory
from .container_network import ContainerNetwork
from .cpu_freq import CpuFreq
from .disk import Disk
from .host_cpu import HostCpu
from .host_memory import HostMemory
from .hwmon_power import HwmonPower
from .load import Load
from .network import Network
from .pi5_pmic import Pi5Pmic
from .pi_throttling import PiThrottling
from .processes import Processes
from .rapl import Rapl
from .temperature import Temperature

register(HostCpu)
register(CgroupCpu)
register(ContainerCpu)
register(Load)
register(CpuFreq)
register(HostMemory)
register(CgroupMemory)
register(ContainerMemory)
register(Network)
register(ContainerNetwork)
register(Disk)
register(Temperature)
register(PiThrottling)
register(Pi5Pmic)
register(HwmonPower)
register(Rapl)
register(Processes)
register(AgentSelf)

__all__ = ["PLUGINS", "REGISTRY", "Collector", "Field", "Sample", "Unavailable", "build",
           "register",
           "AgentSelf", "CgroupCpu", "CgroupMemory", "ContainerCpu", "ContainerMemory",
           "ContainerNetwork", "CpuFreq", "Disk", "HostCpu",
           "HostMemory", "HwmonPower", "Load", "Network", "Pi5Pmic", "PiThrottling", "Processes",
           "Rapl", "Temperature"]
