"""The command line's own helpers (the commands themselves are run as a user would in tests/e2e)."""

from __future__ import annotations

import pytest

from framewire.cli import classes_line


def test_validate_names_the_classes_and_cuts_a_long_list() -> None:
    assert classes_line(("face",)) == "classes (1): 0=face"
    coco = tuple(f"c{i}" for i in range(80))
    line = classes_line(coco)
    assert line.startswith("classes (80): 0=c0, 1=c1, ") and line.endswith(", 19=c19, ... (60 more)")
    assert classes_line(coco[:20]).endswith("19=c19")


def test_run_starts_the_fork_server_before_it_loads_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' imports run beside the CLI's own (the config, the plan's check) on the second
    core: `run` starts the fork server first. A config that then fails costs nothing more than that."""
    import framewire.cli as cli
    from framewire.app.preload import PRELOAD
    from framewire.pipeline import logs
    from framewire.pipeline.errors import ConfigError
    from framewire.pipeline.worker import forkserver

    calls: list[object] = []
    monkeypatch.setattr(forkserver, "start_early", lambda preload: calls.append(("fork server", tuple(preload))))

    def load_job(args: object, extra: object = ()) -> object:
        calls.append("config")
        raise ConfigError("bad.yaml: sources: field required")

    monkeypatch.setattr(cli, "load_job", load_job)
    monkeypatch.setattr(logs, "configure", lambda *args: None)  # the test run's logging stays as it is
    assert cli.main(["run", "-c", "bad.yaml", "--no-progress"]) == 2
    assert calls == [("fork server", PRELOAD), "config"]
