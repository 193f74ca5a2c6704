"""DDS participants (Cyclone DDS) pinned to one network interface — the loopback for tests and peers, the
robot's Ethernet port on hardware — so that a test never talks to a robot on the LAN, nor the LAN to it.

Cyclone DDS (11.0.1 and master alike) binds its *receive* sockets to the wildcard address whatever interface
it is configured to use (eclipse-cyclonedds/cyclonedds#1923, #2090): configured for "lo", it still accepts
packets sent to the Ethernet address from anywhere on the LAN, so any host could discover the participant and
publish `rt/lowcmd` to it. There is no configuration option for it, so once the domain exists its wildcard
receive sockets are bound to the interface with SO_BINDTODEVICE (the kernel then delivers them only packets
that arrived on that interface; the multicast discovery port is one of them). On the loopback, participants
announce themselves both by multicast (SPDP only: Unitree's SDK, its examples and its unitree_mujoco bridge
configure "lo" with Cyclone's defaults, a random unicast port, and are found only that way) and by unicast to
localhost's well-known ports; data goes by unicast. On a robot's Ethernet port multicast stays on for everything:
the robot discovers by multicast.
"""

from __future__ import annotations

import functools
import re
import socket

from cyclonedds.domain import Domain, DomainParticipant

from policyforge.config import ConfigError
from policyforge.real_robot.netbind import bind_wildcard_sockets, socket_fds

_CONFIG = (
    '<CycloneDDS><Domain Id="{domain}"><General><Interfaces><NetworkInterface name="{interface}"/>'
    "</Interfaces><AllowMulticast>{multicast}</AllowMulticast></General><Discovery>"
    "<ParticipantIndex>auto</ParticipantIndex>{peers}</Discovery></Domain></CycloneDDS>"
)
# ParticipantIndex auto: the unicast ports are 7400 + 250·domain + 10 + 2·index (+1), inside the domain's
# block of 250 ports (DDSI-RTPS 9.6.1.1), like the multicast ones; "none" would pick random ports
PORT_BASE, DOMAIN_GAIN = 7400, 250


def domain_config(domain_id: int, interface: str) -> str:
    """The Cyclone DDS configuration (XML) of domain `domain_id` on network interface `interface`."""
    loopback = interface == "lo"
    peers = '<Peers><Peer address="localhost"/></Peers>' if loopback else ""
    return _CONFIG.format(
        domain=domain_id, interface=interface, multicast="spdp" if loopback else "default", peers=peers
    )


def domain_ports(domain_id: int) -> range:
    """The UDP ports DDS uses in domain `domain_id` (discovery and data, unicast and multicast)."""
    base = PORT_BASE + DOMAIN_GAIN * domain_id
    return range(base, base + DOMAIN_GAIN)


@functools.cache
def _domain(domain_id: int, interface: str) -> Domain:
    # one Domain object per id and process: Cyclone keeps the first configuration of a domain id
    before = socket_fds()
    domain = Domain(domain_id, domain_config(domain_id, interface))
    bind_wildcard_sockets(socket_fds() - before, interface, domain_ports(domain_id))
    return domain


def participant(domain_id: int, interface: str) -> DomainParticipant:
    """A participant in DDS domain `domain_id` that uses, and is reachable on, only network interface
    `interface` (e.g. "lo")."""
    if not 0 <= domain_id <= 232:
        raise ConfigError("domain_id", f"must be in [0, 232] (DDS port mapping), got {domain_id}")
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", interface):
        raise ConfigError("interface", f"must be a network interface name such as 'lo' or 'eth0', got {interface!r}")
    names = [name for _, name in socket.if_nameindex()]
    if interface not in names:
        raise ConfigError("interface", f"no network interface {interface!r} on this computer; it has {names}")
    domain = _domain(domain_id, interface)
    if domain is None:
        raise RuntimeError(f"could not configure DDS domain {domain_id} on {interface}")
    return DomainParticipant(domain_id)
