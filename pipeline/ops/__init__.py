"""The operator's side: HTTP (metrics, health, the control API), the commands it queues, logs and telemetry."""
