"""The Internet sockets a process holds, from the kernel's socket tables: /proc/<pid>/net/{tcp,udp,tcp6,udp6}
matched with the socket inodes among /proc/<pid>/fd, plus the interface a socket is bound to with
SO_BINDTODEVICE (not in /proc: from the netlink sock_diag dump, as `ss` shows it after a '%')."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import struct

TCP_LISTEN, TCP_CLOSE = "0A", "07"
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_F_REQUEST, NLM_F_DUMP, NLMSG_DONE, NLMSG_ERROR = 0x1, 0x300, 3, 2


@dataclasses.dataclass(frozen=True)
class BoundSocket:
    protocol: str
    """"tcp", "udp", "tcp6" or "udp6"."""
    address: str
    """Local address it is bound to ("0.0.0.0" / "::" for any)."""
    port: int
    listening: bool
    """A TCP listener or an unconnected UDP socket (it accepts packets from anyone who reaches it)."""
    device: str | None
    """The interface it is bound to with SO_BINDTODEVICE (None: all)."""

    @property
    def loopback_only(self) -> bool:
        """Reachable only through the loopback: bound to a loopback address, or to the `lo` device."""
        return ipaddress.ip_address(self.address).is_loopback or self.device == "lo"


def process_sockets(pid: int) -> list[BoundSocket]:
    """Every TCP/UDP socket process `pid` holds that is bound to a local port."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    devices = _bound_devices()
    found = []
    for protocol in ("tcp", "udp", "tcp6", "udp6"):
        with open(f"/proc/{pid}/net/{protocol}") as table:
            next(table)
            for line in table:
                fields = line.split()
                local, state, inode = fields[1], fields[3], int(fields[9])
                address, port = local.split(":")
                if inode not in inodes or int(port, 16) == 0:
                    continue
                listening = state == TCP_LISTEN if protocol.startswith("tcp") else state == TCP_CLOSE
                found.append(BoundSocket(protocol, _address(address), int(port, 16), listening, devices.get(inode)))
    return found


def _address(hex_address: str) -> str:
    """/proc/net's address notation (host-order 32-bit words in hex) as text."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _bound_devices() -> dict[int, str]:
    """inode → interface name of every TCP/UDP socket bound to a device (sock_diag dump of this namespace)."""
    names = dict(socket.if_nameindex())
    devices = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        for protocol in (socket.IPPROTO_TCP, socket.IPPROTO_UDP):
            for inode, index in _diag_dump(family, protocol):
                if index:
                    devices[inode] = names.get(index, f"if{index}")
    return devices


def _diag_dump(family: int, protocol: int) -> list[tuple[int, int]]:
    """(inode, bound interface index) of every socket of `family`/`protocol` (inet_diag_req_v2, all states)."""
    request = struct.pack("=BBBxI", family, protocol, 0, 0xFFFFFFFF) + bytes(48)  # inet_diag_req_v2, any socket
    header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    out = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.send(header + request)
        while True:
            data = diag.recv(65536)
            offset = 0
            while offset < len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind in (NLMSG_DONE, NLMSG_ERROR):
                    return out
                body = offset + 16  # inet_diag_msg: 4 bytes, sockid (ports 4, addresses 32, if 4, cookie 8), ...
                interface = struct.unpack_from("=I", data, body + 4 + 36)[0]
                inode = struct.unpack_from("=I", data, body + 4 + 48 + 16)[0]
                out.append((inode, interface))
                offset += (length + 3) & ~3
