#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver that accepts and discards: the collector of the tracing
benchmark (BENCHMARKS.md, "The cost of tracing").

It answers every `POST /v1/traces` with 200 and an empty `ExportTraceServiceResponse` (an
empty protobuf message is zero bytes), so the service's exporter does all of its work
(encoding, sending) and nothing is dropped for want of a collector. It counts the bytes it
received and prints them when stopped, so a run shows that spans did arrive.

    taskset -c 1 python3 scripts/otlp_sink.py --port 4318 &
    python3 scripts/bench.py --interleave 11 --no-redis \
        --variant 'trace-0.01=--tracing --tracing-sampling-rate 0.01' ...
"""

import argparse
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

received = {"requests": 0, "bytes": 0}
lock = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the name http.server calls)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length > 0 else b""
        with lock:
            received["requests"] += 1
            received["bytes"] += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Sink)

    def stop(*_):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    print(f"otlp_sink: {received['requests']} exports, {received['bytes']} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
