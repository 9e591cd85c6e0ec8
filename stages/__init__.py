"""One module per stage. Stages never import zmq: they get frames and return results."""
