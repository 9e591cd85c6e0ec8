"""Composites: where they change pixels, how matte blending ends at its extremes, config errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, StageContext
from framewire.registry import COMPOSITES
from framewire.stages.composite import Composite, CompositeStage, resolve_composite
from framewire.stages.tasks.base import Result

pytestmark = pytest.mark.timeout(60)

FACE = {"box": [100.0, 60.0, 80.0, 100.0], "score": 0.97, "class_id": 0, "label": "face", "landmarks": [[130.0, 100.0]] * 5}


def _found(*items: dict[str, Any]) -> Result:
    return Result(data={"detections": list(items)})


def _noise(height: int = 272, width: int = 640, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _changed(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    return (before != after).any(axis=2)


def _alpha(value: int, shape: tuple[int, int] = (320, 320)) -> Result:
    return Result(data={"matte": {}}, arrays={"alpha": np.full(shape, value, dtype=np.uint8)})


@pytest.mark.parametrize("kind", ["blur", "pixelate"])
def test_face_composites_on_an_i420_frame_change_each_plane_inside_the_box_only(kind: str) -> None:
    # A job that keeps its frames as YUV (framewire.media.yuv): the box in Y, at half size in U and V.
    bgr = _noise()
    frame = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    before = frame.copy()
    composite = resolve_composite(kind, {"expand": 0.25})
    assert composite.takes_yuv
    composite.apply(frame, _found(FACE))
    for plane, old, (x0, y0, x1, y1) in zip(
        yuv.planes(frame), yuv.planes(before), [(80, 35, 200, 185), (40, 17, 100, 93), (40, 17, 100, 93)], strict=True
    ):
        inside = np.zeros(plane.shape, dtype=bool)
        inside[y0:y1, x0:x1] = True
        changed = plane != old
        assert not changed[~inside].any()
        assert changed[inside].mean() > 0.8


def test_only_blur_and_pixelate_draw_on_i420() -> None:
    assert {k for k in COMPOSITES.names() if resolve_composite(k, {}).takes_yuv} == {"blur", "pixelate"}


def test_registry_has_every_kind() -> None:
    assert COMPOSITES.names() == (
        "analytics", "background_blur", "background_replace", "blur", "boxes", "paste", "pixelate", "speaking"
    )
    for kind in COMPOSITES.names():
        composite = resolve_composite(kind, {})
        assert isinstance(composite, Composite) and composite.kind == kind
        assert all(f.description for f in type(composite.params).model_fields.values())


@pytest.mark.parametrize("kind", ["blur", "pixelate"])
def test_face_composites_change_pixels_only_inside_the_expanded_box(kind: str) -> None:
    frame = _noise()
    before = frame.copy()
    resolve_composite(kind, {"expand": 0.25}).apply(frame, _found(FACE))

    inside = np.zeros(frame.shape[:2], dtype=bool)
    inside[35:185, 80:200] = True  # box 100..180 x 60..160 grown by 25 %: 80..200 x 35..185
    changed = _changed(before, frame)
    assert not changed[~inside].any()
    assert changed[inside].mean() > 0.9


@pytest.mark.parametrize("kind", ["blur", "pixelate"])
def test_face_composites_clip_boxes_at_the_frame_edge(kind: str) -> None:
    frame = _noise()
    before = frame.copy()
    face = {"box": [600.0, -20.0, 80.0, 60.0], "score": 0.9}
    resolve_composite(kind, {"expand": 0.0}).apply(frame, _found(face))
    changed = _changed(before, frame)
    assert changed[:40, 600:].mean() > 0.9
    changed[:40, 600:] = False
    assert not changed.any()


def test_pixelate_makes_flat_blocks() -> None:
    frame = _noise()
    face = {"box": [0.0, 0.0, 64.0, 64.0], "score": 0.9}
    resolve_composite("pixelate", {"expand": 0.0, "blocks": 4}).apply(frame, _found(face))
    block = frame[16:32, 32:48].reshape(-1, 3)
    assert (block == block[0]).all()


@pytest.mark.parametrize("kind", ["blur", "pixelate", "boxes"])
def test_detection_composites_ignore_results_without_detections(kind: str) -> None:
    frame = _noise()
    before = frame.copy()
    resolve_composite(kind, {}).apply(frame, Result(data={"matte": {"mean": 0.5}}))
    resolve_composite(kind, {}).apply(frame, _found())
    np.testing.assert_array_equal(frame, before)


def test_boxes_draws_the_outline_in_its_colour_and_leaves_the_rest() -> None:
    frame = np.zeros((272, 640, 3), dtype=np.uint8)
    composite = resolve_composite("boxes", {"color": [255, 0, 0], "thickness": 3, "score": False, "label": False})
    composite.apply(frame, _found(FACE))
    assert frame[110, 100].tolist() == [255, 0, 0]  # left edge of the box
    assert frame[160, 140].tolist() == [255, 0, 0]  # bottom edge
    assert frame[100, 130].tolist() == [255, 0, 0]  # landmark
    assert not frame[80:140, 110:125].any()  # inside, away from edges and landmarks
    changed = frame.any(axis=2)
    assert not changed[:55].any() and not changed[:, 190:].any()


@pytest.mark.parametrize("kind", ["blur", "pixelate", "boxes"])
def test_detection_composites_filter_by_label_or_class_id(kind: str) -> None:
    person = {"box": [300.0, 60.0, 80.0, 100.0], "score": 0.8, "class_id": 3, "label": "person"}
    for classes, touched in ((["face"], (100, 180)), ([3], (300, 380)), (["face", "person"], None)):
        frame = _noise()
        before = frame.copy()
        resolve_composite(kind, {"classes": classes}).apply(frame, _found(FACE, person))
        columns = _changed(before, frame).any(axis=0)
        face_side, person_side = columns[90:190].any(), columns[290:390].any()
        if touched is None:
            assert face_side and person_side
        else:
            assert (face_side, person_side) == (touched[0] == 100, touched[0] == 300)


def test_detection_composites_read_version_1_faces() -> None:
    frame = _noise()
    before = frame.copy()
    legacy = {"box": [100.0, 60.0, 80.0, 100.0], "score": 0.9}
    resolve_composite("blur", {"classes": ["face"]}).apply(frame, Result(data={"faces": [legacy]}))
    assert _changed(before, frame)[60:160, 100:180].mean() > 0.9


def test_boxes_colours_per_label_and_per_class() -> None:
    car = {"box": [300.0, 60.0, 80.0, 100.0], "score": 0.8, "class_id": 2, "label": "car"}
    frame = np.zeros((272, 640, 3), dtype=np.uint8)
    params = {"colors": {"car": [0, 0, 255]}, "color": [255, 0, 0], "score": False, "label": False}
    resolve_composite("boxes", params).apply(frame, _found(FACE, car))
    assert frame[110, 100].tolist() == [255, 0, 0] and frame[110, 300].tolist() == [0, 0, 255]
    frame[...] = 0
    params = {"class_colors": True, "score": False, "label": False, "landmarks": False}
    resolve_composite("boxes", params).apply(frame, _found(FACE, car))
    face_color, car_color = frame[110, 100].tolist(), frame[110, 300].tolist()
    assert face_color != car_color and face_color != [0, 0, 0] and car_color != [0, 0, 0]
    frame[...] = 0
    resolve_composite("boxes", params).apply(frame, _found(car))
    assert frame[110, 300].tolist() == car_color  # the same class gets the same colour every time


def test_boxes_caption_shows_label_track_score_and_attributes() -> None:
    from framewire.stages.composite import Boxes

    plate = {"box": [300.0, 60.0, 80.0, 40.0], "score": 0.81, "class_id": 0, "label": "text", "track_id": 7,
             "attributes": {"text": {"text": "EXIT", "score": 0.99}, "kind": {"label": "sign", "score": 0.7}}}
    boxes = resolve_composite("boxes", {})
    assert isinstance(boxes, Boxes)
    assert boxes._caption(plate) == "text #7 0.81 EXIT sign"
    quiet = resolve_composite("boxes", {"label": False, "track_id": False, "score": False, "attributes": False})
    assert isinstance(quiet, Boxes) and quiet._caption(plate) == ""


def test_apply_touches_only_the_frame_it_is_given() -> None:
    parent = _noise()
    before = parent.copy()
    view = parent[50:150, 200:400]
    face = {"box": [0.0, 0.0, 100.0, 100.0], "score": 0.9}
    assert resolve_composite("blur", {}).apply(view, _found(face)) is None
    changed = _changed(before, parent)
    assert changed[50:150, 200:400].any()
    changed[50:150, 200:400] = False
    assert not changed.any()


def test_background_replace_with_full_alpha_leaves_the_frame_unchanged() -> None:
    frame = _noise()
    before = frame.copy()
    resolve_composite("background_replace", {}).apply(frame, _alpha(255))
    np.testing.assert_array_equal(frame, before)


def test_background_replace_with_zero_alpha_gives_the_colour() -> None:
    frame = _noise()
    resolve_composite("background_replace", {"color": [10, 20, 30]}).apply(frame, _alpha(0))
    assert (frame == np.array([10, 20, 30], dtype=np.uint8)).all()


def test_background_replace_blends_by_alpha() -> None:
    frame = np.full((100, 120, 3), 200, dtype=np.uint8)
    resolve_composite("background_replace", {"color": [0, 0, 0]}).apply(frame, _alpha(51))
    assert (np.abs(frame.astype(int) - 40) <= 1).all()  # 200 * 0.2


def test_background_replace_with_an_image(tmp_path: Path) -> None:
    image = np.zeros((20, 40, 3), dtype=np.uint8)
    image[:, 20:] = (0, 0, 255)
    path = tmp_path / "bg.png"
    assert cv2.imwrite(str(path), image)
    composite = resolve_composite("background_replace", {"image": str(path)})

    frame = _noise(100, 200)
    composite.apply(frame, _alpha(0))
    assert (frame[:, :90] == 0).all()
    assert (frame[:, 110:] == (0, 0, 255)).all()


def test_background_replace_image_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"composite\.3\.image: .*no_such\.png"):
        resolve_composite("background_replace", {"image": str(tmp_path / "no_such.png")}, 3)
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_bytes(b"not a png")
    with pytest.raises(ConfigError, match="cannot read image"):
        resolve_composite("background_replace", {"image": str(not_an_image)})


def test_background_blur_at_the_alpha_extremes() -> None:
    composite = resolve_composite("background_blur", {"strength": 0.05})
    frame = _noise()
    before = frame.copy()
    composite.apply(frame, _alpha(255))
    np.testing.assert_array_equal(frame, before)

    composite.apply(frame, _alpha(0))
    assert frame.std() < before.std() / 4  # noise is smoothed everywhere


@pytest.mark.parametrize("kind", ["background_replace", "background_blur"])
def test_matte_composites_fail_without_alpha(kind: str) -> None:
    with pytest.raises(ConfigError, match=f"composite '{kind}' needs a matte"):
        resolve_composite(kind, {}).apply(_noise(), _found(FACE))


def test_unknown_kind_names_the_index() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_composite("sparkle", {}, 2)
    assert str(info.value).startswith("composite.2.kind: unknown composite 'sparkle'")
    assert "blur" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "params", "fragments"),
    [
        ("blur", {"expand": -1}, ["composite.1.expand", "-1"]),
        ("boxes", {"color": [0, 300, 0]}, ["composite.1.color.1", "300"]),
        ("pixelate", {"blocks": 0}, ["composite.1.blocks", "0"]),
        ("blur", {"radius": 3}, ["composite.1.radius: unknown key"]),
        ("blur", {"strenght": 3}, ["composite.1.strenght: unknown key (did you mean strength?)"]),
        ("blur", {"kind": "pixelate"}, ["composite.1.kind", "'pixelate'"]),
    ],
)
def test_param_errors_name_the_key_path(kind: str, params: dict, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_composite(kind, params, 1)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_config_entry_may_carry_its_kind() -> None:
    composite = resolve_composite("pixelate", {"kind": "pixelate", "blocks": 4}, 0)
    assert composite.params.blocks == 4  # type: ignore[attr-defined]


class _FakePool:
    """The two frame-pool calls a stage makes, over plain arrays."""

    def __init__(self, **regions: np.ndarray) -> None:
        self.regions = regions

    def view(self, slot: int, name: str) -> np.ndarray:
        return self.regions[name]

    def has(self, name: str) -> bool:
        return name in self.regions


def _frame(pool: _FakePool, result: dict | None, tensors: dict | None = None) -> Frame:
    fake: Any = pool
    return Frame("cam", 7, 0, 0.0, 640, 272, slot=0, pool=fake, result=result, tensors=tensors or {})


def test_stage_draws_into_output_and_keeps_the_decoded_image() -> None:
    image = _noise()
    original = image.copy()
    output = np.zeros_like(image)
    stage = CompositeStage([resolve_composite("pixelate", {}), resolve_composite("boxes", {}, 1)])
    stage.start(StageContext("composite", 0))

    frame = _frame(_FakePool(image=image, output=output), {"detections": [FACE]})
    assert list(stage.process(frame)) == [frame]

    np.testing.assert_array_equal(image, original)
    changed = _changed(original, output)
    assert changed[35:185, 80:200].any()
    changed[30:190, 75:205] = False  # the expanded box plus the outline's antialiasing
    assert not changed.any()
    assert list(stage.flush("cam")) == []
    stage.stop()


@pytest.mark.parametrize(
    ("composites", "result"),
    [
        ([("blur", {})], {"detections": []}),
        ([("pixelate", {}), ("boxes", {})], {}),
        ([("blur", {"classes": ["plate"]}), ("boxes", {"classes": [3]})], {"detections": [FACE]}),
    ],
)
def test_a_frame_nothing_draws_on_is_shown_as_decoded_without_a_copy(
    composites: list[tuple[str, dict[str, Any]]], result: dict[str, Any]
) -> None:
    """No detection a composite acts on: the frame is not copied to `output`, and every reader of
    the composited frame (the outputs, the hub's frame tap) shows `image` instead."""
    from framewire.pipeline.frame import shown_region
    from framewire.stages.outputs.record import composited_image

    image, output = _noise(), np.zeros((272, 640, 3), np.uint8)
    original = image.copy()
    stage = CompositeStage([resolve_composite(kind, params, i) for i, (kind, params) in enumerate(composites)])
    frame = _frame(_FakePool(image=image, output=output), result)
    (done,) = stage.process(frame)
    assert not output.any()  # left alone: no copy
    np.testing.assert_array_equal(image, original)
    assert composited_image(done) is image
    header = done.to_header()  # the hub reads it from the header it is handed
    assert shown_region(header.get("meta")) == "image"


def test_a_frame_one_composite_draws_on_is_copied_and_drawn_by_all() -> None:
    """One composite acting on the frame is enough: the frame is copied and every composite draws,
    and the readers show `output`."""
    from framewire.pipeline.frame import shown_region
    from framewire.stages.outputs.record import composited_image

    image, output = _noise(), np.zeros((272, 640, 3), np.uint8)
    stage = CompositeStage([resolve_composite("blur", {"classes": ["plate"]}), resolve_composite("boxes", {}, 1)])
    (done,) = stage.process(_frame(_FakePool(image=image, output=output), {"detections": [FACE]}))
    changed = _changed(image, output)
    assert changed[55:165, 95:185].any() and not changed[:, 300:].any()  # the outline, and the rest copied
    assert composited_image(done) is output
    header = done.to_header()
    assert shown_region(header.get("meta")) == "output"


def test_a_composite_of_unknown_kind_draws_on_every_frame() -> None:
    """A composite that does not say (a plugin's, a matte's) is taken to draw on every frame."""
    assert resolve_composite("background_replace", {"color": [1, 2, 3]}).draws(Result(data={}))


def test_stage_passes_the_matte_to_matte_composites() -> None:
    image = _noise()
    output = np.empty_like(image)
    stage = CompositeStage([resolve_composite("background_replace", {"color": [1, 2, 3]})])
    alpha = np.zeros((320, 320), np.uint8)
    list(stage.process(_frame(_FakePool(image=image, output=output), {"matte": {}}, {"alpha": alpha})))
    assert (output == np.array([1, 2, 3], np.uint8)).all()
