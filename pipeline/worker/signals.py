"""Imported by the fork server alone (pipeline.forkserver preloads it): the server, and every worker
it forks, ignore SIGTERM and SIGINT.

A service manager (systemd's default KillMode=control-group), `timeout`, `kill -TERM -PGID` and
Ctrl-C signal every process of the group at once. A worker that died of it would cut its frames and
files short (an output's MP4 left without its index), and a fork server that died of it would make
every worker it started look dead (multiprocessing then reports exit code 255). So only the
supervisor acts on these signals: it stops the sources, lets the workers finish what is in flight,
and sends them STOP. The fork server still ends with the supervisor (its pipe closes), and a worker
still ends when the supervisor is gone (pipeline.hub_link.SupervisorWatch).
"""

from __future__ import annotations

import signal

IGNORED = (signal.SIGTERM, signal.SIGINT)

for _sig in IGNORED:
    signal.signal(_sig, signal.SIG_IGN)
