"""What ``turnaudit broker status`` reports: each node's process and whether it serves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    running: bool
    pid: int | None
    serving: bool
    bootstrap_servers: str

    def describe(self) -> str:
        if self.running and self.serving:
            return f"running (pid {self.pid}), serving on {self.bootstrap_servers}"
        if self.running:
            return f"process {self.pid} alive but not serving on {self.bootstrap_servers}"
        return "stopped"


@dataclass(frozen=True)
class BrokerStatus:
    running: bool  # every node
    pid: int | None  # node 1's
    serving: bool  # every node
    bootstrap_servers: str
    nodes: tuple[NodeStatus, ...] = ()
    security: str = "plaintext"

    def describe(self) -> str:
        secured = " (SASL_SSL)" if self.security == "sasl_ssl" else ""
        if len(self.nodes) <= 1:
            if self.running and self.serving:
                return f"running (pid {self.pid}), serving on {self.bootstrap_servers}{secured}"
            if self.running:
                return f"process {self.pid} alive but not serving on {self.bootstrap_servers}"
            return "stopped"
        if not any(n.running for n in self.nodes):
            return f"stopped ({len(self.nodes)} nodes)"
        up = sum(n.serving for n in self.nodes)
        parts = "; ".join(f"node {n.node_id} {n.describe()}" for n in self.nodes)
        return f"{up} of {len(self.nodes)} nodes serving{secured}: {parts}"
