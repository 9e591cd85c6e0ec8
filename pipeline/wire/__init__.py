"""How frames and messages travel: the internal wire format, tensors, the shared-memory frame pool and
audio ring, CurveZMQ and the public zmq output."""
