"""From a validated config to the processes of a job: the one place that wires stages together.

`plan.stage_specs` lists the job's stages once, in frame order, as `StageSpec`s; each feature has
its own composer that knows its config keys and its stages, and nothing else:

- `audio`: the steps before the model (audio features, voice activity, a region) and their audio;
- `model`: the primary model's task and engine, and the preprocess, infer and postprocess stages;
- `analytics`: tracking, and the lines and zones it counts;
- `cascade`: the secondary models on crops of the detections;
- `outputs`: the composite stage and every output;
- `frames`: what a source's slot in the frame pool holds (I420 or BGR, the model input, the output);
- `sources`: how a decode worker builds and feeds each source, at start and added at run time;
- `http`: the control API, the console and its previews.

Everything here runs in the supervisor process and must stay cheap: the factories it hands out are
called inside each spawned worker, where the sessions, encoders and sockets are created.
"""
