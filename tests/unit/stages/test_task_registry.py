"""The task registry: built-in names, users' entry points, and parameter errors as ConfigError."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from framewire.pipeline.errors import ConfigError
from framewire.stages.tasks import TASKS, get_task_class, resolve_task
from framewire.stages.tasks.face_detection import FaceDetection
from framewire.stages.tasks.matting import Matting

pytestmark = pytest.mark.timeout(60)

USER_MODULE = "framewire_test_user_tasks"


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module holding a user's task and a class that is not one."""
    (tmp_path / f"{USER_MODULE}.py").write_text(
        textwrap.dedent(
            """
            from pydantic import Field

            from framewire.stages.tasks.base import Result, Task, TaskParams


            class EchoParams(TaskParams):
                gain: float = Field(1.0, description="A number.")


            class Echo(Task):
                name = "echo"
                Params = EchoParams

                input_name = "x"

                def check_model(self, inputs, outputs):
                    pass

                def input_spec(self, frame_width, frame_height):
                    raise NotImplementedError

                def preprocess(self, frame, out):
                    return {}

                def postprocess(self, outputs, meta, frame_width, frame_height):
                    return Result(data={})


            class NotATask:
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, USER_MODULE, raising=False)
    yield USER_MODULE
    sys.modules.pop(USER_MODULE, None)


def test_builtin_names() -> None:
    assert list(TASKS.names()) == [
        "classification", "detection", "face_detection", "generator", "matting", "text_detection", "text_recognition"
    ]
    assert get_task_class("face_detection") is FaceDetection
    assert get_task_class("matting") is Matting
    assert FaceDetection.name == "face_detection" and Matting.name == "matting"


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(ConfigError) as info:
        get_task_class("yolo")
    message = str(info.value)
    assert message.startswith("model.task: unknown task 'yolo'")
    assert "face_detection" in message and "matting" in message
    assert info.value.exit_code == 2


def test_user_entry_point_is_imported(user_module: str) -> None:
    cls = get_task_class(f"{user_module}:Echo")
    assert cls.__name__ == "Echo"
    task = resolve_task(f"{user_module}:Echo", {"gain": 2})
    assert isinstance(task, cls)
    assert task.params.gain == 2.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("{m}:NotATask", "'{m}:NotATask' is not a concrete subclass"),
        ("{m}:Missing", "module '{m}' has no 'Missing'"),
        ("framewire_no_such_module:Task", "cannot import module 'framewire_no_such_module'"),
        ("{m}:", "is not an entry point written package.module:Class"),
        ("framewire.stages.tasks.base:Task", "'framewire.stages.tasks.base:Task' is not a concrete subclass"),
    ],
)
def test_bad_entry_points_are_config_errors(user_module: str, entry: str, fragment: str) -> None:
    entry, fragment = entry.format(m=user_module), fragment.format(m=user_module)
    with pytest.raises(ConfigError) as info:
        get_task_class(entry)
    message = str(info.value)
    assert message.startswith("model.task: ")
    assert fragment in message
    assert "\n" not in message


def test_param_error_names_the_key_and_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_task("face_detection", {"score_threshold": 1.5})
    message = str(info.value)
    assert "model.score_threshold" in message and "1.5" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("task", "params", "fragments"),
    [
        ("face_detection", {"input_size": [641, 288]}, ["model.input_size", "[641, 288]", "32"]),
        ("face_detection", {"input_size": "big"}, ["model.input_size", "'big'"]),
        ("face_detection", {"top_k": "many"}, ["model.top_k", "'many'"]),
        ("face_detection", {"colour": "red"}, ["model.colour: unknown key"]),
        ("face_detection", {"score_treshold": 0.5}, ["model.score_treshold: unknown key (did you mean score_threshold?)"]),
        ("matting", {"input_size": 16}, ["model.input_size", "16"]),
    ],
)
def test_param_errors(task: str, params: dict[str, object], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_task(task, params)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_valid_params_reach_the_task() -> None:
    task = resolve_task("face_detection", {"score_threshold": 0.6, "input_size": [320, 256]})
    assert task.params.score_threshold == 0.6  # type: ignore[attr-defined]
    assert task.params.input_size == (320, 256)  # type: ignore[attr-defined]
