"""BackendWait: the same batch again, with backoff, while the server does not answer; the hub told
once when it goes and once when it is back; a worker whose supervisor is gone gives up."""

from __future__ import annotations

from typing import Any

import pytest

from framewire.pipeline.errors import BackendUnavailable, EngineError
from framewire.pipeline.frame import StageContext
from framewire.stages.backend_wait import BackendWait

pytestmark = pytest.mark.timeout(30)


class _Flaky:
    """Fails `down` times, then answers; counts the calls."""

    def __init__(self, down: int, error: type[Exception] = BackendUnavailable) -> None:
        self.down, self.calls, self.error = down, 0, error

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error("Triton at h:1 does not answer")
        return "outputs"


def _wait(gone: bool = False) -> tuple[BackendWait, list[dict[str, Any]], list[float]]:
    statuses: list[dict[str, Any]] = []
    ctx = StageContext("infer", 1, status=statuses.append, gone=lambda: gone)
    wait = BackendWait(ctx, max_wait_s=0.4)
    slept: list[float] = []
    wait.sleep = slept.append
    return wait, statuses, slept


def test_the_same_call_again_with_backoff_until_it_answers() -> None:
    wait, statuses, slept = _wait()
    attempt = _Flaky(down=5)
    assert wait.call(attempt) == "outputs"
    assert attempt.calls == 6
    assert slept == [0.1, 0.2, 0.4, 0.4, 0.4]
    assert statuses == [{"available": False, "reason": "Triton at h:1 does not answer"}, {"available": True}]
    assert wait.call(_Flaky(down=0)) == "outputs" and len(statuses) == 2  # nothing new to say


def test_other_errors_are_not_waited_for_and_a_gone_supervisor_ends_the_wait() -> None:
    wait, statuses, _ = _wait()
    with pytest.raises(EngineError):
        wait.call(_Flaky(down=1, error=EngineError))
    assert statuses == []
    orphan, _, slept = _wait(gone=True)
    with pytest.raises(BackendUnavailable):
        orphan.call(_Flaky(down=100))
    assert slept == []
