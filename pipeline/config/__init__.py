"""The job configuration: pydantic models loaded from YAML, with `--set` overrides.

Every model forbids unknown keys and is frozen; every field is described where it is declared, so
`validate` and the README can be written from these files alone. Task parameters (`model:` keys
beside `path` and `task`) and composite parameters belong to the task and composite classes in
`stages/`: they are kept here as extra keys and checked there, since this package knows no model.

- pipeline.config.sources: `sources:` items; pipeline.config.engine: `model:` and `engine:`;
  pipeline.config.outputs: `composite:` and `outputs:`; pipeline.config.cascade: `secondary:` and
  `tracking:`; pipeline.config.job: the whole `Config` with `stages:`, `transport:` and `http:`;
  pipeline.config.loading: YAML, `--set`, errors.
"""

from pipeline.config.audio import AudioConfig, MissingAudioConfig
from pipeline.config.cascade import SecondaryConfig, TrackingConfig
from pipeline.config.engine import Backend, CalibrationConfig, EngineConfig, ModelConfig
from pipeline.config.job import Config, HttpConfig, StageConfig, StagesConfig, TransportConfig
from pipeline.config.loading import (
    apply_override,
    describe_validation_error,
    load_config,
    load_raw,
    resolve_inputs,
    resolve_path,
    validate_config,
)
from pipeline.config.outputs import CompositeConfig, JsonlOutput, Output, VideoFileOutput, ZmqOutput
from pipeline.config.sources import SOURCE_ID, CameraConfig, Policy, ReconnectConfig, SourceConfig
from pipeline.config.steps import StepConfig
from pipeline.names import output_name

__all__ = [
    "SOURCE_ID", "AudioConfig", "Backend", "CalibrationConfig", "CameraConfig", "CompositeConfig", "Config",
    "EngineConfig", "HttpConfig", "JsonlOutput", "MissingAudioConfig", "ModelConfig", "Output", "Policy",
    "ReconnectConfig", "SecondaryConfig", "SourceConfig", "StageConfig", "StagesConfig", "StepConfig", "TrackingConfig",
    "TransportConfig", "VideoFileOutput", "ZmqOutput", "apply_override", "describe_validation_error", "load_config",
    "load_raw", "output_name", "resolve_inputs", "resolve_path", "validate_config",
]
