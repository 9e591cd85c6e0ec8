"""The `webhook` output: records and events POSTed as JSON arrays to an HTTP endpoint (stdlib only).

The sender thread gathers a batch (`batch_records` messages, or what came within `batch_ms` of the
first) and POSTs it as one JSON array. A 5xx answer, a 429, a timeout or a refused connection is
tried again after a delay that doubles from `backoff_s` up to `backoff_max_s`, `retries` times;
another 4xx is not (the request itself is wrong): the batch counts as failed and the log says why.
While it retries, the queue in front of it holds what comes (stages.outputs.delivery). A redirect is
not followed (it counts as a 4xx); the usual HTTP(S)_PROXY and NO_PROXY variables are honoured.
"""

from __future__ import annotations

import logging
import socket
import urllib.error
import urllib.request

from framewire.config.sinks import WebhookOutput
from framewire.pipeline.backoff import Backoff
from framewire.stages.outputs.delivery import BrokerSink, Message

log = logging.getLogger(__name__)


class WebhookSink(BrokerSink):
    """POSTs every record (or only the events) of every source to a URL, in JSON batches."""

    Config = WebhookOutput

    def __init__(self, config: WebhookOutput) -> None:
        super().__init__(config)
        self.config: WebhookOutput = config
        self.batch_size = config.batch_records
        self.batch_wait_s = config.batch_ms / 1000.0
        self._headers = {"Content-Type": "application/json", "User-Agent": "framewire"}
        self._headers.update({name: value.get_secret_value() for name, value in config.headers.items()})
        self._opener = urllib.request.build_opener(_NoRedirect())
        self._failing = False

    def _open(self) -> None:
        return None  # a connection per request: nothing to open

    def _send(self, batch: list[Message]) -> None:
        c = self.config
        body = b"[" + b",".join(m.payload for m in batch) + b"]"
        self.counts.add("sent", len(batch))
        backoff = Backoff(c.backoff_s, c.backoff_max_s)
        problem = ""
        for attempt in range(c.retries + 1):
            if attempt:
                self.counts.add("retries")
                if self.interrupt.wait(backoff.next()):
                    break
            status, problem = self._post(body)
            if status is not None and 200 <= status < 300:
                self.counts.add("delivered", len(batch))
                if self._failing:
                    self._failing = False
                    self.counts.add("reconnects")
                    log.warning("%s: %s answers again", self.name, c.url)
                return
            if status is not None and status < 500 and status != 429:
                break  # the request is at fault: trying again gives the same answer
            if not self._failing:
                log.warning("%s: %s: %s; trying again", self.name, c.url, problem)
            self._failing = True
        self.counts.add("failed", len(batch))
        log.error(
            "%s: %d message(s) not delivered to %s: %s", self.name, len(batch), c.url, problem or "stopped"
        )

    def _post(self, body: bytes) -> tuple[int | None, str]:
        """The answer's status (None when there was none) and, when it is not 2xx, why in words."""
        request = urllib.request.Request(self.config.url, data=body, headers=self._headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.config.timeout_s) as answer:
                answer.read()
                return int(answer.status), ""
        except urllib.error.HTTPError as err:
            err.close()
            return int(err.code), f"HTTP {err.code} {err.reason}"
        except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as err:
            reason = getattr(err, "reason", err)
            return None, f"no answer ({reason})"
        except OSError as err:
            return None, f"no answer ({err})"

    def _close(self) -> None:
        return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is an answer, not a detour: urllib would follow a 301/302 with a GET and no body, and
    the batch would count as delivered to a page that never saw it."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None
