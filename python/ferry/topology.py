"""This host's devices, in the shape of Mooncake's topology JSON: a map from a memory location
("cpu:<numa>", later "cuda:<n>") to [[preferred NICs], [other NICs]], where the preferred NICs
are those on the location's NUMA node. Read from sysfs; GPUs are not listed yet (ferry has no
GPU transport yet)."""

import glob
import json
import os


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def _numa_nodes():
    nodes = []
    for path in glob.glob("/sys/devices/system/node/node[0-9]*"):
        name = os.path.basename(path)[4:]
        if name.isdigit():
            nodes.append(int(name))
    return sorted(nodes) or [0]


def _rdma_devices():
    """[(name, numa node or -1)] of the RDMA devices sysfs lists."""
    out = []
    for path in sorted(glob.glob("/sys/class/infiniband/*")):
        node = _read(os.path.join(path, "device", "numa_node"), "-1")
        out.append((os.path.basename(path), int(node) if node.lstrip("-").isdigit() else -1))
    return out


def local_topology():
    """The topology as a dict (see the module docstring)."""
    nics = _rdma_devices()
    topology = {}
    for node in _numa_nodes():
        preferred = [n for n, numa in nics if numa == node]
        others = [n for n, numa in nics if numa != node]
        topology[f"cpu:{node}"] = [preferred, others]
    return topology


def local_topology_json():
    return json.dumps(local_topology())
