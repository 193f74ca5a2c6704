"""Sockets that third-party protocol libraries open on the wildcard address (0.0.0.0 / ::), bound afterwards to
the one network interface they are meant to use (SO_BINDTODEVICE), so that nothing on another interface — a
LAN — reaches them. For libraries with no option to bind by address: Cyclone DDS's receive sockets, libfranka's
UDP state socket."""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import socket
import struct

log = logging.getLogger(__name__)

SIOCGIFADDR = 0x8915
"""ioctl: an interface's IPv4 address."""


def socket_fds() -> set[int]:
    """The file descriptors of this process that are sockets (take it before and after a library opens its
    sockets: the difference is theirs)."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                fds.add(int(name))
        except OSError:
            continue
    return fds


def bind_wildcard_sockets(fds: set[int], interface: str, ports: range | None = None) -> list[int]:
    """Bind each UDP socket among `fds` that is bound to the wildcard address (at a port in `ports`, if given)
    to network interface `interface`; returns their ports. Other sockets are left alone."""
    bound = []
    for fd in sorted(fds):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # closed meanwhile, or not a socket
            continue
        try:
            if sock.type != socket.SOCK_DGRAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address, port = sock.getsockname()[:2]
            if address not in ("0.0.0.0", "::") or (ports is not None and port not in ports):
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            except PermissionError:  # kernels before 5.7 want CAP_NET_RAW for it
                log.warning(
                    "could not bind UDP port %d to interface %s (SO_BINDTODEVICE not permitted): it also accepts "
                    "packets from other interfaces", port, interface,
                )  # fmt: skip
                continue
            bound.append(port)
        finally:
            sock.detach()
    return bound


def interface_to(host: str) -> str:
    """The network interface this computer reaches IPv4 `host` through (the routing table's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # a UDP connect only looks up the route: nothing is sent
        local = probe.getsockname()[0]
    if ipaddress.ip_address(local).is_loopback:  # all of 127/8 is lo's, not only its primary address
        return "lo"
    for _, name in socket.if_nameindex():
        if local in _ipv4_addresses(name):
            return name
    raise OSError(f"no network interface has the address {local} this computer would reach {host} from")


def _ipv4_addresses(interface: str) -> set[str]:
    """The IPv4 address of `interface` (SIOCGIFADDR: its primary one); empty without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            request = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError:
            return set()
    return {socket.inet_ntoa(request[20:24])}
