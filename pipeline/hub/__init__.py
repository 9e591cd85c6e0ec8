"""What runs a job: the hub's loop, where each frame goes next, the workers as the hub sees them."""
