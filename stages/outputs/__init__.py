"""Output sinks: video files, JSON lines. Each one takes frames or records and flushes on close."""
