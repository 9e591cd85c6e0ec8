"""The one error hierarchy of framewire.

Every error that reaches a user is one of these; its message names the thing at fault (a config key,
a source, a file) so that one line is enough to act on.
"""

from __future__ import annotations


class FramewireError(Exception):
    """Base of every error framewire raises on purpose."""

    exit_code = 1


class ConfigError(FramewireError, ValueError):
    """A config file, a `--set` override or a model that does not fit its task: exit code 2."""

    exit_code = 2


class UsageError(FramewireError):
    """Bad command-line usage: exit code 2."""

    exit_code = 2


class EngineError(FramewireError):
    """An inference backend could not be loaded or failed to run."""


class BackendUnavailable(EngineError):
    """An inference server does not answer (down, restarting, too slow): the infer stage tries the
    batch again with backoff instead of failing its frames."""


class SourceError(FramewireError, ConnectionError):
    """A source could not be opened or read (missing file, not a video, corrupt or truncated)."""


class JobFailed(FramewireError):
    """The job cannot go on (a worker that cannot start, an output that died, a stage that keeps
    dying, a stop before the frames in flight were done): the supervisor ends it with this."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class JobTimeout(FramewireError, TimeoutError):
    """`Job.wait(timeout)` returned before the job ended: it is still running."""


def one_line(exc: BaseException) -> str:
    """An exception as one line: framewire's own errors as they are, others prefixed by their type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if isinstance(exc, FramewireError) else f"{type(exc).__name__}: {text}"
