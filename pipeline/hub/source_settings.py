"""Each source's settings changed at run time, on the hub: kept, and sent to the workers (CONFIGURE).

The hub sends a source's whole settings to every ready worker of the middle stages when they change
(`set`), and all of them to a worker when it says READY (`to_worker`): one started late, or
restarted after a death, gets them before its first frame, since the hub grants no frame to a
stage before its READY and a worker reads its socket in order. Stages that do not use them ignore
them (`Stage.configure`). The settings are plain JSON, validated before they come here
(pipeline.ops.settings); the runtime knows no key of them.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from framewire.pipeline.hub.peers import Roster, StageWorker
from framewire.pipeline.wire import messages as msg


class SourceSettings:
    """The current settings of each source that has any, and who gets them."""

    def __init__(self, roster: Roster, stages: Collection[str], initial: Mapping[str, Mapping[str, Any]]) -> None:
        self.roster = roster
        self.stages = tuple(stages)
        """The middle stages: the outputs draw and write what the frames carry, and need none."""
        self.current: dict[str, dict[str, Any]] = {sid: copy.deepcopy(dict(s)) for sid, s in initial.items()}

    def of(self, source_id: str) -> dict[str, Any]:
        """The source's settings (a copy); empty when it has none."""
        return copy.deepcopy(self.current.get(source_id, {}))

    def set(self, source_id: str, settings: Mapping[str, Any]) -> int:
        """The source's settings are now `settings` (empty: the job's own again): sent to every ready
        worker of the stages; how many got them."""
        if settings:
            self.current[source_id] = copy.deepcopy(dict(settings))
        else:
            self.current.pop(source_id, None)
        header = _message(source_id, settings)
        sent = 0
        for stage in self.stages:
            for peer in self.roster.of(stage):
                if peer.ready:
                    sent += bool(peer.send(header))
        return sent

    def to_worker(self, peer: StageWorker) -> None:
        """A worker said READY: every source's settings, before any frame of theirs."""
        if peer.stage not in self.stages:
            return
        for source_id, settings in self.current.items():
            peer.send(_message(source_id, settings))


def _message(source_id: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": msg.CONFIGURE, "source": source_id, "settings": dict(settings)}
