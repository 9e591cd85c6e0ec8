"""Config items chosen by their `kind` from a registry (`outputs:`, `sources:`): the discriminated
union comes from the registry, so a plug-in's keys are validated as a built-in's are.

Each entry of the registry's group is a class whose `Config` is a pydantic model with a `kind`
literal. Only the kinds a config uses are imported (a plug-in that is installed but unused costs
nothing); `variants()` imports them all, for "did you mean", `--set` and the docs' reference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ValidatorFunctionWrapHandler, WrapValidator

from framewire.pipeline.errors import ConfigError
from framewire.registry import Registry


def config_model(registry: Registry[Any], kind: str, key: str = "kind") -> type[BaseModel]:
    """The config model of entry `kind` (its class's `Config`); ConfigError naming `key` otherwise."""
    cls = registry.get(kind, key)
    model = getattr(cls, "Config", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigError(f"{key}: {registry.noun} {kind!r} ({getattr(cls, '__qualname__', cls)}) has no "
                          f"Config model (a pydantic model with a kind literal)")  # fmt: skip
    return model


def variants(registry: Registry[Any]) -> tuple[type[BaseModel], ...]:
    """Every entry's config model, once each (entries that fail to import are left out: their own
    use says why)."""
    found: list[type[BaseModel]] = []
    for name in registry.names():
        try:
            model = config_model(registry, name)
        except ConfigError:
            continue
        if model not in found:
            found.append(model)
    return tuple(found)


def by_kind(registry: Registry[Any], default: Callable[[Mapping[str, Any]], str | None] | None = None) -> WrapValidator:
    """Validate a mapping with the model of the entry its `kind` names (`default` gives the kind of
    a mapping that has none); errors keep their key paths (`outputs.1.path`)."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, BaseModel):
            return value  # already validated (a model_copy, or built in code)
        if not isinstance(value, Mapping):
            return handler(value)  # the base model's own error: a mapping was expected
        kind = value.get("kind")
        if kind is None and default is not None:
            kind = default(value)
        if kind is None:
            raise ValueError(f"kind: required key is missing (one of {', '.join(registry.names())})")
        if not isinstance(kind, str):
            raise ValueError(f"kind: {kind!r} is not the name of a {registry.noun} (one of {', '.join(registry.names())})")
        if kind not in registry:
            raise ValueError(f"kind: {registry.unknown(kind)}")
        try:
            model = config_model(registry, kind)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return model.model_validate(value)

    validate.registry = registry  # type: ignore[attr-defined]  # read back by registry_of
    return WrapValidator(validate)


def registry_of(annotation: Any) -> Registry[Any] | None:
    """The registry an `Annotated[..., by_kind(R)]` field takes its models from, else None: what
    the docs' configuration reference and its test walk to list every kind's keys."""
    if get_origin(annotation) is Annotated:
        for meta in get_args(annotation)[1:]:
            found = getattr(getattr(meta, "func", None), "registry", None)
            if isinstance(found, Registry):
                return found
    return None
