"""Engine options from Mooncake-style arguments and the environment: the one place the Python
package reads environment variables.

Environment:
  FERRY_FORCE_TCP, MC_FORCE_TCP   "1"/"true"/"yes"/"on": install tcp only, whatever the protocol
                                  (MC_FORCE_TCP is Mooncake's switch, accepted for drop-in use)
  FERRY_RDMA_PROVIDER             libfabric provider for protocol "rdma" ("verbs;ofi_rxm", ...)
(FERRY_AUTH_SECRET and FERRY_LOG_LEVEL are read by the library itself.)
"""

import os

from ._errors import InvalidArgumentError

_TRUE = {"1", "true", "yes", "on"}
_KNOWN_TRANSPORTS = ("tcp", "shm", "cxl", "rdma")


def force_tcp():
    """True when FERRY_FORCE_TCP or MC_FORCE_TCP asks for tcp only."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE
               for name in ("FERRY_FORCE_TCP", "MC_FORCE_TCP"))


def transports_for(protocol, device_name=""):
    """(transports, extra options) for a Mooncake protocol argument.

    "tcp" -> tcp only (no shm), "shm" -> shm, "rdma" -> rdma (provider from FERRY_RDMA_PROVIDER,
    NICs from device_name, a comma list), "cxl" -> cxl, "auto" (or "" / None) -> what the engine
    finds; a comma list ("tcp,shm") names several. FERRY_FORCE_TCP / MC_FORCE_TCP win over all.
    """
    extra = {}
    if force_tcp():
        return ["tcp"], extra
    text = (protocol or "auto").strip().lower()
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["auto"]:
        transports = ["auto"]
    else:
        for n in names:
            if n not in _KNOWN_TRANSPORTS:
                raise InvalidArgumentError(
                    f"unknown protocol '{n}' "
                    "(accepted: tcp, shm, rdma, cxl, auto, or a comma list)")
        if len(set(names)) != len(names) or not names:
            raise InvalidArgumentError(f"protocol '{protocol}' names a transport twice or none")
        transports = names
    if "rdma" in transports or transports == ["auto"]:
        provider = os.environ.get("FERRY_RDMA_PROVIDER", "")
        if provider:
            extra["rdma_provider"] = provider
        devices = [d.strip() for d in (device_name or "").split(",") if d.strip()]
        if devices:
            extra["rdma_devices"] = devices
    return transports, extra


def metadata_conn(metadata_server, metadata_type=None):
    """ferry's connection string for Mooncake's metadata_server (and initialize_ext's
    metadata_type): "P2PHANDSHAKE", "etcd://h:p", "redis://h:p", "http://h:p/metadata" pass
    through; a bare "h:p[,h2:p]" is etcd (as in Mooncake) unless metadata_type names another
    store ("etcd", "redis", "http")."""
    if metadata_server is None or not str(metadata_server).strip():
        raise InvalidArgumentError(
            "metadata_server is empty (accepted: P2PHANDSHAKE, etcd://h:p, a bare h:p for etcd, "
            "redis://h:p, http://h:p/metadata)")
    conn = str(metadata_server).strip()
    if conn.upper() == "P2PHANDSHAKE":
        return "P2PHANDSHAKE"
    if "://" in conn:
        return conn
    kind = (metadata_type or "etcd").strip().lower()
    if kind not in ("etcd", "redis", "http"):
        raise InvalidArgumentError(
            f"unknown metadata_type '{metadata_type}' (accepted: etcd, redis, http)")
    return f"{kind}://{conn}"


def split_host_port(local_hostname):
    """(host, port or 0) of "host", "host:port" or "[v6]:port"."""
    text = (local_hostname or "").strip()
    if not text:
        raise InvalidArgumentError("local_hostname is empty (give this host's address)")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidArgumentError(f"local_hostname '{local_hostname}': unclosed '['")
        host, rest = text[1:end], text[end + 1:]
        port_text = rest[1:] if rest.startswith(":") else rest
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not port_text:
        return host, 0
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidArgumentError(f"local_hostname '{local_hostname}': bad port '{port_text}'")
    return host, int(port_text)


def engine_options(local_hostname, metadata_server, protocol, device_name="",
                   metadata_type=None, **overrides):
    """The options dict ferry._ferry.Engine.init takes, for Mooncake's initialize arguments.

    With P2PHANDSHAKE the segment name is "<host>:<rpc port>": a bare host gets the port the
    engine picks (get_rpc_port()), "host:port" asks for that port. With a store the segment name
    is local_hostname as given, and its port (if any) is the RPC port.
    """
    conn = metadata_conn(metadata_server, metadata_type)
    host, port = split_host_port(local_hostname)
    transports, extra = transports_for(protocol, device_name)
    options = {"metadata_conn": conn, "host": host, "rpc_port": port, "transports": transports}
    if conn != "P2PHANDSHAKE":
        options["local_server_name"] = local_hostname.strip()
    options.update(extra)
    options.update(overrides)
    return options
