"""How a job runs: the supervisor starts the hub, its workers and the operator's side, handles signals,
drains and reports."""
