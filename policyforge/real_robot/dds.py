"""DDS participants (Cyclone DDS) pinned to one network interface — the loopback for tests and peers, the
robot's Ethernet port on hardware — so that a test never talks to a robot on the LAN, and vice versa."""

from __future__ import annotations

import functools
import re

from cyclonedds.domain import Domain, DomainParticipant

_CONFIG = (
    '<CycloneDDS><Domain Id="{domain}"><General><Interfaces><NetworkInterface name="{interface}"/>'
    "</Interfaces></General></Domain></CycloneDDS>"
)


@functools.cache
def _domain(domain_id: int, interface: str) -> Domain:
    # one Domain object per id and process: Cyclone keeps the first configuration of a domain id
    return Domain(domain_id, _CONFIG.format(domain=domain_id, interface=interface))


def participant(domain_id: int, interface: str) -> DomainParticipant:
    """A participant in DDS domain `domain_id` that uses only network interface `interface` (e.g. "lo")."""
    if not 0 <= domain_id <= 232:
        raise ValueError(f"domain_id must be in [0, 232] (DDS port mapping), got {domain_id}")
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", interface):
        raise ValueError(f"interface must be a network interface name such as 'lo' or 'eth0', got {interface!r}")
    domain = _domain(domain_id, interface)
    if domain is None:
        raise RuntimeError(f"could not configure DDS domain {domain_id} on {interface}")
    return DomainParticipant(domain_id)
