"""How many server processes the cores keep busy, and how many Rust threads each (:mod:`.planner`), from what
this machine gives a process (:mod:`.machine`). ``launch(replicas=)``, ``serve --replicas`` and ``tokenizer-service
calibrate`` size by it. Standard library only (launcher and server import it)."""

from .machine import allowed_cpus, available_cpus, cgroup_cpu_quota, cgroup_memory_limit, cpu_model, memory_limit
from .planner import (
    AUTO,
    DEFAULT_SOURCE,
    MODEL,
    REFERENCE,
    TIE,
    Curve,
    Measurement,
    Plan,
    ReplicaPlan,
    check_replicas,
    choose_plan,
    plan_replicas,
    share_of_cores,
    throughput,
    workaround_throughput,
)

__all__ = [
    "AUTO",
    "DEFAULT_SOURCE",
    "MODEL",
    "REFERENCE",
    "TIE",
    "Curve",
    "Measurement",
    "Plan",
    "ReplicaPlan",
    "allowed_cpus",
    "available_cpus",
    "cgroup_cpu_quota",
    "cgroup_memory_limit",
    "check_replicas",
    "choose_plan",
    "cpu_model",
    "memory_limit",
    "plan_replicas",
    "share_of_cores",
    "throughput",
    "workaround_throughput",
]
