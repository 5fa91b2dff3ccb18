"""A peer driven by hand: tests dial a node's route or gateway port with it and send raw frames.

It speaks the link handshake with whatever secret a test gives it (through the shipped
``Handshake``), then sends what the test says, and collects every byte the node sends back.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import trio

from cluster.decoder import FrameDecoder
from cluster.frames import (
    Challenge,
    Frame,
    GatewayHello,
    Hello,
    LinkError,
    PeerInfo,
    Proof,
    RouteHello,
    encode,
)
from cluster.handshake import Handshake


@attrs.define
class Impostor:
    """One raw link connection to a node.

    Attributes:
        received: every byte the node sent so far.
    """

    stream: trio.abc.Stream
    kind: str
    secret: str = ""
    listener: bool = False
    received: bytes = b""
    _decoder: FrameDecoder = attrs.field(factory=lambda: FrameDecoder(1 << 26))

    async def send(self, *frames: bytes) -> None:
        for frame in frames:
            await self.stream.send_all(frame)

    async def next_frame(self, seconds: float = 2.0) -> Frame | None:
        """The node's next frame (None if it closed, or sent nothing for ``seconds``)."""
        with trio.move_on_after(seconds):
            while True:
                for frame in self._decoder.frames():
                    return frame
                try:
                    chunk = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return None
                if not chunk:
                    return None
                self.received += chunk
                self._decoder.receive_data(bytes(chunk))
        return None

    async def authenticate(self, hello: bytes = b"") -> Hello | None:
        """Its side of the handshake (the dialer's unless ``listener``), then ``hello`` sent; the
        node's HELLO if it accepted the proof."""
        handshake = Handshake(self.kind, self.secret, dialer=not self.listener, nonce=os.urandom(32))
        await self.send(encode(handshake.challenge()))
        challenge = await self.next_frame()
        if not isinstance(challenge, Challenge):
            return None
        try:
            proof = handshake.on_challenge(challenge)
            if proof is not None:
                await self.send(encode(proof))
            answer = await self.next_frame()
            if not isinstance(answer, Proof):
                return None
            proof = handshake.on_proof(answer)
        except LinkError:  # (the node's kind, version or proof is not what this one expects)
            return None
        if proof is not None:
            await self.send(encode(proof))
        self._decoder.open()
        await self.send(hello)
        theirs = await self.next_frame()
        return theirs if isinstance(theirs, Hello) else None

    async def drain(self, seconds: float = 2.0) -> bytes:
        """Read until the node closes (or ``seconds`` pass); everything received so far."""
        with trio.move_on_after(seconds):
            while True:
                try:
                    chunk = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not chunk:
                    break
                self.received += chunk
        return self.received

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def frames_in(data: bytes) -> list[Frame]:
    """The frames in bytes a node sent (the limits of an open link; a LinkError if malformed)."""
    decoder = FrameDecoder(1 << 26)
    decoder.open()
    decoder.receive_data(data)
    try:
        return list(decoder.frames())
    except LinkError:
        return []


def route_hello(node_id: str, cluster: str = "test", **extra: Any) -> bytes:
    """A route HELLO from a made-up node (any field overridden by ``extra``)."""
    fields: dict[str, Any] = {
        "id": node_id, "name": node_id, "cluster": cluster, "url": "nats://127.0.0.1:1",
        "pool_size": 3, "slot": 0, "connection": "c0",
    }  # fmt: skip
    return encode(Hello(RouteHello(**(fields | extra))))


def gateway_hello(gateway: str, **extra: Any) -> bytes:
    """A gateway HELLO from a made-up node of cluster ``gateway``."""
    fields: dict[str, Any] = {
        "id": "I" * 56, "name": "impostor", "gateway": gateway, "url": "nats://127.0.0.1:1",
        "urls": ("nats://127.0.0.1:1",), "gateways": {},
    }  # fmt: skip
    return encode(Hello(GatewayHello(**(fields | extra))))


def peers(count: int, prefix: str = "fake", first_port: int = 1) -> tuple[PeerInfo, ...]:
    """Made-up peers at addresses where no node listens (low ports of 127.0.0.1, each its own)."""
    return tuple(
        PeerInfo(f"{prefix}{i:04d}", f"{prefix}{i}", f"nats://127.0.0.1:{first_port + i}")
        for i in range(count)
    )
