"""The ideal network: communication is free. Sends arrive at once; a collective is only a
barrier of its group (its ranks leave together once the last has arrived). The predictor
runs it beside the real network to split a step into compute, bubble and exposed
communication."""

from __future__ import annotations

from geosim.sim.network import CountingNetwork
from geosim.sim.schedule import Barrier, Collective


NAME = "ideal"


class IdealNetwork(CountingNetwork):
    # a symmetry may move a group onto another: its barrier awaits the group's ranks that run
    groups_may_move = True

    def send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        self.count(src, nbytes)
        return now

    def collective_ops(self, coll: Collective, rank: int) -> tuple:
        # keyed by the group too: DiLoCo's replicas run their outer all-reduces under one tag, and a
        # barrier keyed by the tag alone would let ranks of different replicas release each other
        return (Barrier(coll.tag + (coll.group,), len(coll.group), coll.group),)

    def symmetric_under(self, image) -> bool:
        """No state to map: a send costs nothing and a barrier's release is its last arrival, whatever
        order simultaneous events go in. The programs' own check (geosim.sim.symmetry) is the proof."""
        return True

    def reduce_to(self, symmetry) -> None:
        """Nothing to reduce: the engine's barriers await the group's representatives."""
        return None


BACKEND = IdealNetwork
