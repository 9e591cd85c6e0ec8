"""Waits between tries that double up to a cap: the one rule every reconnect and restart follows
(a dead stage worker, a live source, a live output, a broker output, an inference server that does
not answer). Each caller keeps its own numbers; only the rule is shared.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

MAX_DOUBLINGS = 32
"""Past this many doublings the wait is the cap anyway; the bound keeps `2 ** n` a small number."""


@dataclass
class Backoff:
    """Waits of `first_s`, then twice as long each time up to `longest_s`, each shortened by a random
    fraction of at most `jitter` (0: exact). `max_attempts` failures in a row give up (None: never).

    Use it either way: `delay(attempt)` for a caller that counts its own failures, or `next()` and
    `reset()` (after a success) for one that lets it count."""

    first_s: float
    longest_s: float
    _: KW_ONLY
    jitter: float = 0.0
    max_attempts: int | None = None
    failures: int = field(default=0, init=False, compare=False)
    """Failures counted by `next()` since the last `reset()`."""

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failure number `attempt` (1, 2, ...)."""
        doublings = min(max(attempt, 1) - 1, MAX_DOUBLINGS)
        full = min(self.longest_s, self.first_s * 2**doublings)
        return float(full * (1.0 - self.jitter * rand())) if self.jitter else float(full)

    def gives_up(self, attempt: int) -> bool:
        """Whether failure number `attempt` is the last one allowed."""
        return self.max_attempts is not None and attempt >= self.max_attempts

    def next(self, rand: Callable[[], float] = random.random) -> float:
        """Count one more failure; the wait after it."""
        self.failures += 1
        return self.delay(self.failures, rand)

    def reset(self) -> None:
        """A success: the next failure waits `first_s` again."""
        self.failures = 0
