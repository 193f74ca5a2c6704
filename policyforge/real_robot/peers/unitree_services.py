"""Unitree's request/response services a Go2 answers besides the low-level topics, on Unitree's RPC wire format
(`unitree_api` Request_/Response_ on `rt/api/<service>/request` and `/response`), so that Unitree's own SDK
programs run against a simulated peer unmodified.

The motion switcher is the one the SDK's low-level examples call first (`MotionSwitcherClient.CheckMode`, then
`ReleaseMode` while a mode is active); they stop with an exception if nothing answers.
"""

from __future__ import annotations

import collections
import json

from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from unitree_sdk2py.comm.motion_switcher.motion_switcher_api import (
    MOTION_SWITCHER_API_ID_CHECK_MODE,
    MOTION_SWITCHER_API_ID_RELEASE_MODE,
    MOTION_SWITCHER_API_ID_SELECT_MODE,
    MOTION_SWITCHER_API_VERSION,
    MOTION_SWITCHER_SERVICE_NAME,
)
from unitree_sdk2py.core.channel_name import ChannelType, GetServerChannelName
from unitree_sdk2py.idl.unitree_api.msg.dds_ import Request_, Response_, ResponseHeader_, ResponseStatus_
from unitree_sdk2py.rpc.internal import RPC_API_ID_INTERNAL_API_VERSION, RPC_ERR_SERVER_API_NOT_IMPL, RPC_OK


class MotionSwitcherService:
    """The Go2's motion-switcher service. `mode` is the name CheckMode reports: "" when no motion mode runs (the
    low-level commands drive the motors, as on this peer), e.g. "normal" while the sport controller runs.
    SelectMode and ReleaseMode change it. Call `poll()` from the peer's loop; `calls` counts requests by API id."""

    def __init__(self, participant: DomainParticipant, mode: str = ""):
        def topic(kind: ChannelType, message_type):
            return Topic(participant, GetServerChannelName(MOTION_SWITCHER_SERVICE_NAME, kind), message_type)

        self.mode = mode
        self.calls: collections.Counter[int] = collections.Counter()
        self._requests = DataReader(participant, topic(ChannelType.RECV, Request_))
        self._responses = DataWriter(participant, topic(ChannelType.SEND, Response_))

    def poll(self) -> None:
        """Answer the requests that came since the last poll."""
        for request in self._requests.take(N=16):
            if not isinstance(request, Request_):
                continue
            identity = request.header.identity
            self.calls[identity.api_id] += 1
            code, data = self._answer(identity.api_id, request.parameter)
            header = ResponseHeader_(identity=identity, status=ResponseStatus_(code=code))
            self._responses.write(Response_(header=header, data=data, binary=[]))

    def _answer(self, api_id: int, parameter: str) -> tuple[int, str]:
        if api_id == RPC_API_ID_INTERNAL_API_VERSION:
            return RPC_OK, MOTION_SWITCHER_API_VERSION
        if api_id == MOTION_SWITCHER_API_ID_CHECK_MODE:
            return RPC_OK, json.dumps({"form": "0", "name": self.mode})
        if api_id == MOTION_SWITCHER_API_ID_RELEASE_MODE:
            self.mode = ""
            return RPC_OK, ""
        if api_id == MOTION_SWITCHER_API_ID_SELECT_MODE:
            self.mode = json.loads(parameter or "{}").get("name", "")
            return RPC_OK, ""
        return RPC_ERR_SERVER_API_NOT_IMPL, ""
