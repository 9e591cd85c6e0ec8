"""Routing without processes (pipeline.routing): the order of frames per source, their way through
the stages, end of stream, dispatch by credits, requeue after a death, and sources that stick to one
worker of a stage that keeps per-source state."""

from __future__ import annotations

from typing import Any

import pytest

from framewire.pipeline.hub.header import FrameHeader, FrameKey
from framewire.pipeline.hub.routing import EndOfStream, FrameState, Router

pytestmark = pytest.mark.timeout(30)


class Worker:
    """A peer as routing sees it, recording what it was sent."""

    def __init__(self, name: str, credits: int = 2) -> None:
        self.name = name
        self.credits = credits
        self.inflight: dict[FrameKey, float] = {}
        self.ready = True
        self.finished = False
        self.got: list[Any] = []
        self.reachable = True

    @property
    def available(self) -> bool:
        return self.ready and not self.finished

    @property
    def starting(self) -> bool:
        return not self.ready and not self.finished

    def inflight_keys(self) -> list[FrameKey]:
        return sorted(self.inflight, key=lambda k: k.seq)

    def answer(self, key: FrameKey) -> None:
        del self.inflight[key]
        self.credits += 1

    def __repr__(self) -> str:
        return self.name


class Hub:
    """A router and its workers, with the hub's part of the loop done by hand."""

    def __init__(self, stages: tuple[str, ...] = ("pre", "infer"), outputs: tuple[str, ...] = ("out",),
                 ordered: tuple[str, ...] = (), workers: dict[str, list[Worker]] | None = None,
                 sheds: tuple[str, ...] = ("infer",)) -> None:
        """`sheds`: the stage whose spec says it sheds (the model's), up to which live frames are bounded."""
        self.done: list[FrameKey] = []
        self.router = Router(
            stages, outputs, ordered=ordered, sheds=sheds, on_done=lambda key, state: self.done.append(key)
        )
        self.workers = workers or {name: [Worker(f"{name}0")] for name in stages + outputs}

    def dispatch(self) -> None:
        self.router.dispatch(lambda stage: self.workers.get(stage, []), self._work, self._end, 0.0)
        check_ready_counts(self.router)

    @staticmethod
    def _work(worker: Worker, key: FrameKey, state: FrameState) -> bool:
        if not worker.reachable:
            return False
        worker.got.append(key)
        return True

    @staticmethod
    def _end(worker: Worker, source: str) -> None:
        worker.got.append(EndOfStream(source))

    def admit(self, source: str, seqs: range | list[int]) -> None:
        for seq in seqs:
            self.router.admit(FrameHeader(FrameKey(source, seq), seq, seq, None, 0), {"slot": seq}, {})

    def finish(self, worker: Worker, stage: str, key: FrameKey) -> None:
        """The worker answers RESULT for `key` at `stage`."""
        worker.answer(key)
        assert self.router.done(key, stage, {"slot": key.seq, "by": worker.name}, {})

    def write(self, worker: Worker, key: FrameKey) -> None:
        worker.answer(key)
        self.router.written(key)


def check_ready_counts(router: Router) -> None:
    """The counts `trim` checks each turn, kept as frames move, are what a scan finds."""
    bounds = router._bounds
    found = {source: 0 for source in bounds.ready}
    for state in router.frames.values():
        if bounds.is_ready(state):
            found[state.head.key.source] += 1
    assert bounds.ready == found and bounds.ready_total == sum(found.values())


def run_through(hub: Hub, stage: str, order: list[int] | None = None, source: str = "cam") -> None:
    """Dispatch, then let the stage's only worker answer what it got (in `order` of seq if given)."""
    hub.dispatch()
    worker = hub.workers[stage][0]
    keys = [k for k in worker.got if isinstance(k, FrameKey) and k in worker.inflight]
    if order is not None:
        keys = sorted(keys, key=lambda k: order.index(k.seq))
    for key in keys:
        hub.finish(worker, stage, key)


def test_frames_reach_the_outputs_in_seq_order_whatever_order_the_stages_finish_them() -> None:
    hub = Hub(workers={"pre": [Worker("pre0", 8)], "infer": [Worker("infer0", 8)], "out": [Worker("out0", 8)]})
    hub.router.open("cam")
    hub.admit("cam", range(4))
    run_through(hub, "pre", order=[3, 1, 0, 2])
    run_through(hub, "infer", order=[2, 3, 0, 1])
    hub.dispatch()
    assert hub.workers["out"][0].got == [FrameKey("cam", i) for i in range(4)]


def test_end_of_stream_follows_the_last_frame_and_any_source_id_works() -> None:
    # "eos" was once a frame key's spelling of end of stream: a source called that got no frames.
    hub = Hub(stages=("infer",), workers={"infer": [Worker("infer0", 8)], "out": [Worker("out0", 8)]})
    hub.router.open("eos")
    hub.admit("eos", range(3))
    assert hub.router.end("eos", 3) == 3
    run_through(hub, "infer", source="eos")
    hub.dispatch()
    out = hub.workers["out"][0]
    assert out.got == [FrameKey("eos", 0), FrameKey("eos", 1), FrameKey("eos", 2), EndOfStream("eos")]
    for key in out.got[:3]:
        hub.write(out, key)
    assert hub.done == [FrameKey("eos", i) for i in range(3)] and not hub.router.frames
    assert hub.router.ended("eos")


def test_an_end_counts_only_the_frames_that_arrived() -> None:
    hub = Hub()
    hub.router.open("cam")
    hub.admit("cam", range(2))
    assert hub.router.end("cam", 5) == 2
    assert hub.router.ending("cam") and not hub.router.ended("cam")


def test_a_stale_frame_is_stepped_over_and_a_failed_one_goes_on_unprocessed() -> None:
    hub = Hub(stages=("pre", "infer"), workers={"pre": [Worker("pre0", 8)], "infer": [Worker("infer0", 8)],
                                                  "out": [Worker("out0", 8)]})
    hub.router.open("cam")
    hub.admit("cam", range(3))
    hub.dispatch()
    pre = hub.workers["pre"][0]
    pre.answer(FrameKey("cam", 0))
    state = hub.router.drop(FrameKey("cam", 0))  # stale at pre
    assert state is not None and state.slot == 0
    pre.answer(FrameKey("cam", 1))
    assert hub.router.fail(FrameKey("cam", 1), "pre", "bad pixels")
    hub.finish(pre, "pre", FrameKey("cam", 2))
    run_through(hub, "infer")
    hub.dispatch()
    assert hub.workers["out"][0].got == [FrameKey("cam", 1), FrameKey("cam", 2)]
    assert hub.router.frames[FrameKey("cam", 1)].header["error"] == "pre: bad pixels"


def test_a_late_or_duplicate_answer_changes_nothing() -> None:
    hub = Hub()
    hub.router.open("cam")
    hub.admit("cam", [0])
    key = FrameKey("cam", 0)
    assert hub.router.at(key, "pre") is not None and hub.router.at(key, "infer") is None
    assert not hub.router.done(key, "infer", {}, {})
    assert not hub.router.fail(key, "infer", "late")
    assert hub.router.at(key, "pre") is not None


def test_work_goes_to_the_least_busy_worker_with_credits_and_waits_without_one() -> None:
    a, b = Worker("a", 2), Worker("b", 1)
    hub = Hub(stages=("infer",), workers={"infer": [a, b], "out": []})
    hub.router.open("cam")
    hub.admit("cam", range(5))
    hub.dispatch()
    assert a.got == [FrameKey("cam", 0), FrameKey("cam", 2)] and b.got == [FrameKey("cam", 1)]
    assert hub.router.depth("infer") == 2 and a.credits == 0 and b.credits == 0
    b.reachable = False  # not connected yet: the frame stays first in the queue
    b.answer(FrameKey("cam", 1))
    hub.dispatch()
    assert list(hub.router.queues["infer"]) == [FrameKey("cam", 3), FrameKey("cam", 4)]


def test_an_end_of_stream_waits_for_an_output_worker() -> None:
    hub = Hub(stages=(), workers={"out": []})
    hub.router.open("cam")
    hub.router.end("cam", 0)
    hub.dispatch()
    assert list(hub.router.queues["out"]) == [EndOfStream("cam")]
    late = Worker("out0")
    hub.workers["out"] = [late]
    hub.dispatch()
    assert late.got == [EndOfStream("cam")]


def test_the_frames_of_a_dead_worker_go_back_first_in_order() -> None:
    a, b = Worker("a", 3), Worker("b", 3)
    hub = Hub(stages=("infer",), workers={"infer": [a], "out": []})
    hub.router.open("cam")
    hub.admit("cam", range(5))
    hub.dispatch()
    assert set(a.inflight) == {FrameKey("cam", i) for i in range(3)}
    lost = hub.router.requeue("infer", a)
    assert sorted(lost) == [FrameKey("cam", i) for i in range(3)]
    assert list(hub.router.queues["infer"]) == [FrameKey("cam", i) for i in range(5)]
    hub.workers["infer"] = [b]
    hub.dispatch()
    assert b.got == [FrameKey("cam", i) for i in range(3)]


# --- ordered stages (Stage.ordered) ---------------------------------------------------------------


def ordered_hub(workers: int = 2, credits: int = 8) -> Hub:
    return Hub(
        stages=("infer", "track"),
        ordered=("track",),
        workers={
            "infer": [Worker("infer0", 64)],
            "track": [Worker(f"track{i}", credits) for i in range(workers)],
            "out": [Worker("out0", 64)],
        },
    )


def test_each_source_sticks_to_one_worker_and_gets_its_frames_in_seq_order() -> None:
    hub = ordered_hub()
    for source in ("a", "b"):
        hub.router.open(source)
        hub.admit(source, range(4))
    hub.dispatch()
    infer = hub.workers["infer"][0]
    for key in sorted(infer.got, key=lambda k: (-k.seq, k.source)):  # infer finishes them backwards
        hub.finish(infer, "infer", key)
    hub.dispatch()
    t0, t1 = hub.workers["track"]
    by_source = {src: [w for w in (t0, t1) if any(k.source == src for k in w.got)] for src in ("a", "b")}
    assert all(len(ws) == 1 for ws in by_source.values()) and by_source["a"] != by_source["b"]
    for source, (worker,) in by_source.items():
        assert [k.seq for k in worker.got if k.source == source] == [0, 1, 2, 3]


def test_an_ordered_stage_waits_for_the_next_seq_and_steps_over_frames_that_never_come() -> None:
    hub = ordered_hub(workers=1)
    hub.router.open("cam")
    hub.admit("cam", range(4))
    hub.dispatch()
    infer = hub.workers["infer"][0]
    hub.finish(infer, "infer", FrameKey("cam", 2))
    hub.dispatch()
    track = hub.workers["track"][0]
    assert track.got == []  # 0 and 1 are not there yet
    infer.answer(FrameKey("cam", 0))
    hub.router.fail(FrameKey("cam", 0), "infer", "broken")  # never reaches track
    infer.answer(FrameKey("cam", 1))
    hub.router.drop(FrameKey("cam", 1))  # stale: never reaches track either
    hub.dispatch()
    assert track.got == [FrameKey("cam", 2)]
    hub.finish(infer, "infer", FrameKey("cam", 3))
    hub.router.end("cam", 4)
    hub.dispatch()
    assert track.got == [FrameKey("cam", 2), FrameKey("cam", 3), EndOfStream("cam")]  # it lets go of the source


def test_an_ordered_source_waits_for_its_own_worker_to_have_room() -> None:
    hub = ordered_hub(workers=2, credits=1)
    hub.router.open("cam")
    hub.admit("cam", range(3))
    run_through(hub, "infer")
    hub.dispatch()
    t0, t1 = hub.workers["track"]
    assert t0.got == [FrameKey("cam", 0)] and t1.got == []  # t1 is idle, but the source is t0's
    hub.finish(t0, "track", FrameKey("cam", 0))
    hub.dispatch()
    assert t0.got == [FrameKey("cam", 0), FrameKey("cam", 1)] and t1.got == []


def test_when_its_worker_dies_a_source_moves_on_in_order_and_the_move_is_counted() -> None:
    hub = ordered_hub(workers=2)
    hub.router.open("cam")
    hub.admit("cam", range(4))
    run_through(hub, "infer")
    hub.dispatch()
    t0, t1 = hub.workers["track"]
    first = t0 if t0.got else t1
    other = t1 if first is t0 else t0
    hub.finish(first, "track", FrameKey("cam", 0))
    lost = hub.router.requeue("track", first)
    assert sorted(lost) == [FrameKey("cam", i) for i in (1, 2, 3)]
    first.finished = True
    hub.dispatch()
    assert other.got == [FrameKey("cam", i) for i in (1, 2, 3)]
    assert hub.router.moved == {"track": 1}
    hub.router.end("cam", 4)
    hub.dispatch()
    assert other.got[-1] == EndOfStream("cam")


def test_sources_wait_for_every_worker_of_an_ordered_stage_before_they_stick_to_one() -> None:
    # Pinned at their first frame, sources would all go to the worker that was up first.
    hub = ordered_hub(workers=3)
    late = hub.workers["track"][2]
    late.ready = False
    for source in ("a", "b", "c"):
        hub.router.open(source)
        hub.admit(source, range(2))
    run_through(hub, "infer")
    hub.dispatch()
    assert all(not w.got for w in hub.workers["track"])  # nobody pinned while one still starts
    late.ready = True
    hub.dispatch()
    assert sorted(len({k.source for k in w.got}) for w in hub.workers["track"]) == [1, 1, 1]


def test_a_resumed_source_goes_on_from_its_first_seq() -> None:
    """A resumed file's first frame is seq 40 (its outputs hold 0..39): order and end start there."""
    hub = Hub(stages=("infer",))
    hub.router.open("a")
    hub.router.start_at("a", 40)
    hub.admit("a", range(40, 43))
    (infer,), (out,) = hub.workers["infer"], hub.workers["out"]
    for _ in range(3):
        hub.dispatch()
        for key in list(infer.inflight):
            hub.finish(infer, "infer", key)
    assert hub.router.end("a", 43) == 3  # frames of this run
    for _ in range(3):
        hub.dispatch()
        for key in list(out.inflight):
            hub.write(out, key)
    hub.dispatch()
    assert [k.seq for k in out.got if isinstance(k, FrameKey)] == [40, 41, 42]
    assert out.got[-1] == EndOfStream("a") and hub.router.ended("a")


# --- a live source's frames waiting for the first stage (Router.bound / trim) ---------------------


def _live_hub(most: int, *, keep_newest: bool = True, ordered: tuple[str, ...] = ()) -> Hub:
    hub = Hub(ordered=ordered)
    hub.router.open("cam")
    hub.router.bound("cam", most, keep_newest=keep_newest)
    return hub


def test_frames_beyond_the_bound_drop_the_oldest_waiting_and_the_order_steps_over_them() -> None:
    hub = _live_hub(2)
    pre = hub.workers["pre"][0]
    hub.admit("cam", range(6))
    hub.dispatch()  # the worker takes two (its credits); four wait
    dropped = hub.router.trim()
    assert [s.head.key.seq for s in dropped] == [2, 3]  # the oldest waiting, not those the worker holds
    assert pre.got == [FrameKey("cam", 0), FrameKey("cam", 1)]
    for _ in range(4):  # every worker answers what it holds, until the frames are through
        for stage in ("pre", "infer"):
            worker = hub.workers[stage][0]
            for key in list(worker.inflight_keys()):
                hub.finish(worker, stage, key)
        out = hub.workers["out"][0]
        for key in list(out.inflight_keys()):
            hub.write(out, key)
        hub.dispatch()
    assert pre.got == [FrameKey("cam", s) for s in (0, 1, 4, 5)]  # the freshest two went on
    assert out.got == [FrameKey("cam", s) for s in (0, 1, 4, 5)]  # in order, the dropped stepped over


def test_drop_newest_keeps_what_waits_and_drops_what_came_last() -> None:
    hub = _live_hub(1, keep_newest=False)
    hub.admit("cam", range(5))
    hub.dispatch()
    assert [s.head.key.seq for s in hub.router.trim()] == [4, 3]
    assert hub.router.depth("pre") == 3  # the dropped keys are stepped over when they come up
    hub.finish(hub.workers["pre"][0], "pre", FrameKey("cam", 0))
    hub.dispatch()
    assert hub.workers["pre"][0].got[-1] == FrameKey("cam", 2)


def test_no_frame_is_dropped_while_a_worker_could_take_it() -> None:
    # trim runs after dispatch: a burst the workers can take at once loses nothing.
    hub = _live_hub(1)
    hub.workers["pre"][0].credits = 8
    hub.admit("cam", range(6))
    hub.dispatch()
    assert hub.router.trim() == []
    assert len(hub.workers["pre"][0].got) == 6


def test_frames_given_back_by_a_dead_worker_wait_like_the_others_and_the_freshest_stays() -> None:
    hub = _live_hub(1)
    pre = hub.workers["pre"][0]
    hub.admit("cam", range(2))
    hub.dispatch()
    pre.finished = True
    back = hub.router.requeue("pre", pre)
    assert sorted(k.seq for k in back) == [0, 1]
    hub.admit("cam", [2])
    hub.dispatch()  # no worker is up: all three wait
    assert [s.head.key.seq for s in hub.router.trim()] == [0, 1]
    spare = Worker("pre1")
    hub.workers["pre"] = [spare]
    hub.dispatch()
    assert spare.got == [FrameKey("cam", 2)]


def test_unbounded_sources_and_later_stages_are_never_trimmed() -> None:
    hub = Hub()
    hub.router.open("file")
    hub.admit("file", range(10))
    hub.dispatch()
    assert hub.router.trim() == []
    assert hub.router.depth("pre") == 8


def test_a_bound_on_an_ordered_first_stage_skips_the_dropped_seqs() -> None:
    hub = _live_hub(1, ordered=("pre",))
    pre = hub.workers["pre"][0]
    pre.credits = 1
    hub.admit("cam", range(4))
    hub.dispatch()
    assert [s.head.key.seq for s in hub.router.trim()] == [1, 2]
    hub.finish(pre, "pre", FrameKey("cam", 0))
    hub.dispatch()
    assert pre.got == [FrameKey("cam", 0), FrameKey("cam", 3)]


def test_frames_that_passed_a_stage_before_the_model_still_wait_for_it_and_count() -> None:
    hub = _live_hub(1)
    pre, infer = hub.workers["pre"][0], hub.workers["infer"][0]
    pre.credits, infer.credits = 8, 1
    hub.admit("cam", range(4))
    hub.dispatch()
    assert hub.router.trim() == []  # all four held by the preprocess worker: none waits
    for seq in range(4):
        hub.finish(pre, "pre", FrameKey("cam", seq))
    hub.dispatch()  # infer takes 0; 1, 2 and 3 wait for it
    assert [s.head.key.seq for s in hub.router.trim()] == [1, 2]
    hub.finish(infer, "infer", FrameKey("cam", 0))
    hub.dispatch()
    assert infer.got == [FrameKey("cam", 0), FrameKey("cam", 3)]
    assert hub.router.trim() == []  # past the model, frames wait for the outputs unbounded


def test_the_bounds_of_live_sources_add_up_and_the_streams_share_the_drops() -> None:
    hub = _live_hub(2)
    hub.router.open("cam2")
    hub.router.bound("cam2", 2, keep_newest=True)
    hub.workers["pre"][0].credits = 0  # nothing is taken: every frame admitted waits
    hub.admit("cam", range(4))  # a decoder that fell behind hands over a burst
    hub.dispatch()
    assert hub.router.trim() == []  # four waiting, room for four: the burst is kept
    hub.admit("cam2", range(3))
    hub.dispatch()
    # Seven wait, room for four. Neither lost a frame yet: cam, two over its share, loses its
    # oldest; then cam2, which has lost none; then cam again, the one further over.
    dropped = [(s.head.key.source, s.head.key.seq) for s in hub.router.trim()]
    assert dropped == [("cam", 0), ("cam2", 0), ("cam", 1)]


def test_the_stream_that_arrives_while_the_workers_are_busy_does_not_take_every_drop() -> None:
    # Cameras at a steady rate: a worker frees up just before cam0's and cam1's frames come, never
    # before cam2's. Taking each drop from the longest queue, cam2 would lose every frame dropped.
    hub = Hub(stages=("infer",), workers={"infer": [Worker("infer0", 0)], "out": [Worker("out0", 99)]})
    sources = ("cam0", "cam1", "cam2")
    for name in sources:
        hub.router.open(name)
        hub.router.bound(name, 2, keep_newest=True)
    for seq in range(2):
        for name in sources:
            hub.admit(name, [seq])
    worker, lost = hub.workers["infer"][0], dict.fromkeys(sources, 0)
    for seq in range(2, 62):
        for name in sources:
            if name != "cam2":
                for key in worker.inflight_keys():
                    hub.finish(worker, "infer", key)
                worker.credits = 1
            hub.admit(name, [seq])
            hub.dispatch()
            for state in hub.router.trim():
                lost[state.head.key.source] += 1
    assert sum(lost.values()) == 60  # three frames come a turn, two go to the worker: one too many
    assert lost == {"cam0": 20, "cam1": 20, "cam2": 20}  # longest queue first: cam2 lost all 60


def test_a_source_below_its_bound_loses_nothing_and_drops_are_remembered_lately() -> None:
    from framewire.pipeline.hub.header import FrameKey as Key
    from framewire.pipeline.hub.shedding import LOST_MEMORY, Shedder, Waiting

    shedder = Shedder()
    shedder.lost = {"a": 0, "b": LOST_MEMORY - 1}
    busy = Waiting("b", 2, True, [Key("b", s) for s in range(4)])
    quiet = Waiting("a", 2, True, [Key("a", 0)])  # below its bound: never a choice
    assert shedder.choose([quiet, busy]) == [Key("b", 0)]  # one over what the bounds add up to
    assert shedder.lost == {"a": 0, "b": LOST_MEMORY // 2}  # the counts halve as they grow
    shedder.forget("b")
    assert shedder.lost == {"a": 0}


def test_among_equals_the_source_whose_last_drop_is_longest_ago_drops() -> None:
    from framewire.pipeline.hub.header import FrameKey as Key
    from framewire.pipeline.hub.shedding import Shedder, Waiting

    shedder = Shedder()
    shedder.lost = {"a": 3, "b": 3, "c": 3}  # the counts just halved: every source equal
    shedder.last = {"a": 5, "b": 9, "c": 7}
    waiting = [Waiting(name, 1, True, [Key(name, s) for s in range(3)]) for name in ("a", "b", "c")]
    assert [key.source for key in shedder.choose(waiting)] == ["a", "c", "b", "a", "c", "b"]


def test_the_ready_counts_follow_fails_stale_drops_requeues_and_closes() -> None:
    hub = _live_hub(1)
    pre, infer = hub.workers["pre"][0], hub.workers["infer"][0]
    hub.admit("cam", range(5))
    hub.dispatch()  # pre holds 0 and 1; 2, 3 and 4 wait
    assert hub.router._bounds.ready == {"cam": 3}
    assert hub.router.fail(FrameKey("cam", 0), "pre", "boom")  # held, then past the stages
    hub.finish(pre, "pre", FrameKey("cam", 1))  # on to infer's queue: still ready
    check_ready_counts(hub.router)
    hub.dispatch()
    assert hub.router.drop(FrameKey("cam", 1)) is not None  # stale at infer, held there
    hub.router.drop(FrameKey("cam", 4))  # waiting: no longer counted
    check_ready_counts(hub.router)
    infer.finished = True
    hub.router.requeue("infer", infer)
    check_ready_counts(hub.router)
    hub.router.close("cam")
    assert hub.router._bounds.ready == {} and hub.router._bounds.ready_total == 0


def test_a_stream_that_joins_late_starts_level_and_does_not_take_every_drop() -> None:
    from framewire.pipeline.hub.header import FrameKey as Key
    from framewire.pipeline.hub.shedding import Shedder, Waiting

    shedder = Shedder()
    shedder.lost = {"a": 40, "b": 31}  # two streams that have been losing frames for a while
    shedder.join("c")
    assert shedder.lost["c"] == 31
    shedder.join("a")  # joining again (bound anew) keeps what it lost
    assert shedder.lost["a"] == 40
    waiting = [Waiting(name, 1, True, [Key(name, s) for s in range(6)]) for name in ("a", "b", "c")]
    # c shares b's drops, not all of them; a, which lost the most, drops last.
    assert [key.source for key in shedder.choose(waiting)] == ["b", "c"] * 6 + ["a"] * 3
