"""How frames and messages travel: the internal wire format, tensors, the shared-memory frame pool and
audio ring, CurveZMQ, the public zmq output and the tcp:// link for remote workers."""
