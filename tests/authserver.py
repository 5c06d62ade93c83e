"""A folder served on 127.0.0.1 to a client with basic auth only: `python authserver.py PORT DIR`, the user
and password in AUTH_USER and AUTH_PASSWORD (not in argv). Each request is logged with its User-Agent."""

from __future__ import annotations

import base64
import functools
import os
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

EXPECTED = "Basic " + base64.b64encode(f"{os.environ['AUTH_USER']}:{os.environ['AUTH_PASSWORD']}".encode()).decode()


class Handler(SimpleHTTPRequestHandler):
    def send_head(self):  # both GET and HEAD ask here first
        if self.headers.get("Authorization") != EXPECTED:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="wheels"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()

    def log_message(self, fmt, *args):
        sys.stdout.write(f"{fmt % args} {self.headers.get('User-Agent', '')}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    port, root = int(sys.argv[1]), sys.argv[2]
    ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=root)).serve_forever()
