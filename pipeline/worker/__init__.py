"""What runs in a worker process: the stage loop, the decode loop, the fork server, the link to the hub."""
