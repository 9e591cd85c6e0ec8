"""The job configuration: pydantic models loaded from YAML, with `--set` overrides.

Every model forbids unknown keys and is frozen; every field is described where it is declared, so
`validate` and the configuration reference in docs/ are written from these files alone. Task
parameters (`model:` keys beside `path` and `task`) and composite parameters belong to the task and composite classes in
`stages/`: they are kept here as extra keys and checked there, since this package knows no model.

- pipeline.config.sources: `sources:` items; pipeline.config.engine: `model:` and `engine:`;
  pipeline.config.outputs: `composite:` and `outputs:`; pipeline.config.cascade: `secondary:` and
  `tracking:`; pipeline.config.job: the whole `Config` with `stages:`, `transport:` and `http:`;
  pipeline.config.loading: YAML, `--set`, errors.
"""

from framewire.config.audio import AudioConfig, MissingAudioConfig
from framewire.config.cascade import SecondaryConfig, TrackingConfig
from framewire.config.engine import Backend, CalibrationConfig, EngineConfig, ModelConfig
from framewire.config.job import Config, HttpConfig, StageConfig, StagesConfig, TransportConfig, output_name
from framewire.config.loading import (
    apply_override,
    describe_validation_error,
    load_config,
    load_raw,
    resolve_inputs,
    resolve_path,
    validate_config,
)
from framewire.config.outputs import CompositeConfig, JsonlOutput, Output, OutputConfig, VideoFileOutput, ZmqOutput
from framewire.config.sources import SOURCE_ID, CameraConfig, Policy, ReconnectConfig, Source, SourceBase, SourceConfig
from framewire.config.steps import StepConfig
from framewire.config.tracing import TracingConfig

__all__ = [
    "SOURCE_ID", "AudioConfig", "Backend", "CalibrationConfig", "CameraConfig", "CompositeConfig", "Config",
    "EngineConfig", "HttpConfig", "JsonlOutput", "MissingAudioConfig", "ModelConfig", "Output", "OutputConfig", "Policy",
    "ReconnectConfig", "SecondaryConfig", "Source", "SourceBase", "SourceConfig", "StageConfig", "StagesConfig", "StepConfig", "TracingConfig", "TrackingConfig",
    "TransportConfig", "VideoFileOutput", "ZmqOutput", "apply_override", "describe_validation_error", "load_config",
    "load_raw", "output_name", "resolve_inputs", "resolve_path", "validate_config",
]
