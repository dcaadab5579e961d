"""The /metrics HTTP server: prometheus_client's WSGI app, told when a scrape was served.

prometheus_client's `start_http_server` gives no word of a scrape; the command
needs one to know that the runs' final values were read before it exits
(`MetricsHub.finish`). This is the same app on the standard library's threaded
WSGI server, its response wrapped: `on_begin()` is called as a request comes in,
before the registry is read, and `on_served(token)` with what it returned once
the body has been handed to the socket, so the caller knows which scrapes
began after a moment of its choosing.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the command open


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # the base class names it `format`
        pass  # no access log on stderr


def _served_app(app, on_begin: Callable[[], object], on_served: Callable[[object], None]):
    """`app`, calling `on_begin` first and `on_served(its token)` after a successful
    response's last chunk was written."""

    def wrapped(environ, start_response) -> Iterable[bytes]:
        token = on_begin()
        status: list[str] = []

        def start(code: str, headers, exc_info=None):
            status.append(code)
            return start_response(code, headers, exc_info)

        body = app(environ, start)

        def chunks():
            yield from body
            # The server asks for the next chunk only once this one is written.
            if status and status[0].startswith("200") and environ.get("PATH_INFO") != "/favicon.ico":
                on_served(token)

        return chunks()

    return wrapped


def start_server(host: str, port: int, registry: CollectorRegistry,
                 on_begin: Callable[[], object], on_served: Callable[[object], None]
                 ) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` on host:port in a daemon thread; raises OSError when the address
    cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(_Server):
        address_family = family

    httpd = make_server(host, port, _served_app(make_wsgi_app(registry), on_begin, on_served),
                        Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, thread
