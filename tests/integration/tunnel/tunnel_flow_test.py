# SPDX-License-Identifier: Apache-2.0
"""Per-connection flow control (docs/tunnel.md, "Flow control"): a consumer that pauses keeps
its tunnel and nobody else waits. Between sluice peers the window extension carries the pause
back to the sending socket; with a peer without it (an upstream-like peer: a sluice binary
started with --window-extension=false speaks upstream's protocol only, as no upstream binary
is installable here) a paused consumer lets go of the shared stream after the grace, keeps
buffering up to --max-connection-buffer and is cut only after --stall-timeout.

Each pause lasts PAUSE seconds of wall time: the scenario itself (a consumer that stops reading
for longer than the old 2 s stall cut), spent doing the second tunnel's requests, which must
complete meanwhile."""

import hashlib
import socket
import threading
import time
import unittest

import tunnel_harness as h
from tunnel_harness import pb

PAUSE = 3.0  # seconds: past the old 2 s stall cut (ReadGate::kStallGrace)
MIB = 1 << 20
OFF = "--window-extension=false"  # an upstream-like peer


class Sink:
    """A TCP backend that reads what it is sent and stops reading after `pause_after` bytes
    until resume(); at EOF `done` is set and `total` and `digest` say what it got."""

    def __init__(self, pause_after):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.pause_after = pause_after
        self.paused = threading.Event()
        self.resumed = threading.Event()
        self.done = threading.Event()
        self.total = 0
        self.digest = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        digest = hashlib.sha256()
        while True:
            if self.total >= self.pause_after and not self.resumed.is_set():
                self.paused.set()
                self.resumed.wait()
            b = conn.recv(65536)
            if not b:
                break
            digest.update(b)
            self.total += len(b)
        self.digest = digest.hexdigest()
        conn.close()
        self.done.set()

    def resume(self):
        self.resumed.set()

    def close(self):
        self.resumed.set()
        self.sock.close()


class FlowTest(h.TestCase):
    def setUp(self):
        super().setUp()
        self.backend = h.Backend()
        self.addCleanup(self.backend.stop)

    def up(self, mode="grpc", server_extra=(), agent_extra=()):
        s = self.env.server(mode=mode, extra=list(server_extra))
        a = self.env.agent(s, extra=list(agent_extra))
        h.wait_until(s.ready, what="server ready")
        h.wait_until(a.ready, what="agent ready")
        return s, a

    def target(self, port=None):
        return "127.0.0.1:%d" % (port or self.backend.port)

    def others_meanwhile(self, s, mode="grpc", cut=None):
        """The second tunnel's requests while the first is paused: at least PAUSE seconds of
        1 MiB GETs (and, with `cut`, until cut() holds), each of which must complete."""
        start = time.time()
        done = 0
        while time.time() - start < PAUSE or (cut is not None and not cut()):
            self.assertLess(time.time() - start, 60, "the paused connection was never cut")
            if mode == "grpc":
                t = h.Tunnel(s.channel())
                r = t.dial(self.target(), random=1000 + done)
                self.assertEqual(r.error, "")
                body = h.http_request(t, r.connectID, "/bytes/%d" % MIB)
                t.cancel()
            else:
                body = connect_get(s.uds, self.backend.port, MIB)
            self.assertTrue(body.endswith(h.expected_bytes(MIB)), "second tunnel's body")
            done += 1
        return done

    def no_closes(self, s, a):
        for name in ("sluice_tunnel_server_overflow_closes_total",
                     "sluice_tunnel_server_stall_closes_total"):
            self.assertEqual(s.metric(name), 0, name)
        for name in ("sluice_tunnel_agent_overflow_closes_total",
                     "sluice_tunnel_agent_stall_closes_total"):
            self.assertEqual(a.metric(name), 0, name)

    def paused_grpc_download(self, s, n):
        """Reads 1 MiB of an n-byte download, pauses while others work, then reads the rest:
        all of it arrives. Returns the server's queued bytes seen during the pause."""
        t = h.Tunnel(s.channel())
        r = t.dial(self.target(), random=7)
        t.data(r.connectID, b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % n)
        got = bytearray()
        while len(got) < MIB:
            p = t.recv(want=pb.DATA)
            got += p.data.data
        with t.rcv_cv:  # the reader thread stops here: the stream is not read any more
            self.assertGreater(self.others_meanwhile(s), 0)
            queued = s.metric("sluice_tunnel_server_queued_bytes")
        rest, end = t.read_until_close(timeout=60)
        got += rest
        t.cancel()
        self.assertIsNotNone(end, "the paused tunnel was cut")
        self.assertEqual(end.type, pb.CLOSE_RSP)
        body = bytes(got).split(b"\r\n\r\n", 1)[1]
        self.assertEqual(len(body), n)
        self.assertEqual(hashlib.sha256(body).hexdigest(), h.sha256(h.expected_bytes(n)))
        return queued

    # sluice x sluice: windowed both ways.

    def test_paused_grpc_reader_keeps_its_tunnel_beyond_the_buffer(self):
        s, a = self.up()
        # 64 MiB: far more than --max-connection-buffer (16 MiB) waits behind the pause, in
        # the backend's socket (the agent stopped reading it), not in the server.
        queued = self.paused_grpc_download(s, 64 * MIB)
        self.assertLess(queued, 8 * MIB)  # the window (4 MiB), not the 16 MiB bound
        self.no_closes(s, a)

    def test_paused_http_connect_reader_keeps_its_tunnel_beyond_the_buffer(self):
        s, a = self.up(mode="http-connect")
        n = 64 * MIB
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(30)
        c.connect(s.uds)
        c.sendall(b"CONNECT %s HTTP/1.1\r\n\r\n" % self.target().encode() +
                  b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % n)
        got = bytearray()
        while len(got) < MIB:
            got += c.recv(65536)
        self.assertGreater(self.others_meanwhile(s, mode="http-connect"), 0)
        self.assertLess(s.metric("sluice_tunnel_server_queued_bytes"), 8 * MIB)
        while True:
            b = c.recv(1 << 18)
            if not b:
                break
            got += b
        c.close()
        body = bytes(got).split(b"\r\n\r\n", 2)[2]
        self.assertEqual(len(body), n)
        self.assertEqual(hashlib.sha256(body).hexdigest(), h.sha256(h.expected_bytes(n)))
        self.no_closes(s, a)

    def paused_upload(self, s, n):
        """Sends n bytes to a backend that stops reading after 1 MiB while others work; then
        it reads on and gets all of it."""
        sink = Sink(pause_after=MIB)
        self.addCleanup(sink.close)
        t = h.Tunnel(s.channel())
        r = t.dial(self.target(sink.port), random=9)
        payload = h.expected_bytes(n)
        for off in range(0, n, 256 << 10):
            t.data(r.connectID, payload[off:off + (256 << 10)])
        self.assertTrue(sink.paused.wait(30))
        self.assertGreater(self.others_meanwhile(s), 0)
        sink.resume()
        t.close_req(r.connectID)
        self.assertTrue(sink.done.wait(60), "the sink never saw the end")
        t.cancel()
        self.assertEqual(sink.total, n)
        self.assertEqual(sink.digest, h.sha256(payload))

    def test_paused_backend_keeps_its_upload_tunnel_beyond_the_buffer(self):
        s, a = self.up()
        self.paused_upload(s, 64 * MIB)
        self.no_closes(s, a)

    # Mixed pairs: one side without the extension. Below the buffer bound the paused consumer
    # keeps its tunnel and the others move after at most the grace. 14 MiB: more than the
    # consumer's own buffers take (gRPC's flow-control window, socket buffers: a few MiB), so
    # the receiver queues past its watermark (4 MiB) and holds the stream, but less than
    # --max-connection-buffer (16 MiB).

    def test_agent_without_window_paused_reader_below_the_buffer_is_kept(self):
        s, a = self.up(agent_extra=[OFF])
        self.paused_grpc_download(s, 14 * MIB)
        self.no_closes(s, a)

    def test_server_without_window_paused_reader_below_the_buffer_is_kept(self):
        s, a = self.up(server_extra=[OFF])
        self.paused_grpc_download(s, 14 * MIB)
        self.no_closes(s, a)

    def test_server_without_window_paused_backend_below_the_buffer_is_kept(self):
        s, a = self.up(server_extra=[OFF])
        self.paused_upload(s, 14 * MIB)
        self.no_closes(s, a)

    def test_agent_without_window_stalled_reader_is_cut_at_the_stall_timeout(self):
        s, a = self.up(server_extra=["--stall-timeout=3s"], agent_extra=[OFF])
        t = h.Tunnel(s.channel())
        r = t.dial(self.target(), random=7)
        t.data(r.connectID,
               b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % (14 * MIB))
        t.recv(want=pb.DATA)
        with t.rcv_cv:
            self.assertGreater(self.others_meanwhile(s, cut=lambda: s.metric(
                "sluice_tunnel_server_stall_closes_total") == 1), 0)
        t.read_until_close(timeout=30)
        self.assertEqual(t.error.code().name, "RESOURCE_EXHAUSTED")
        t.cancel()
        self.assertEqual(s.metric("sluice_tunnel_server_overflow_closes_total"), 0)
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_established_connections")
                     == 0, what="the cut tunnel closed at the agent")


def connect_get(uds, port, n):
    """GET /bytes/n through the HTTP CONNECT frontend on `uds`; the body."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    c.connect(uds)
    c.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port +
              b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % n)
    out = bytearray()
    while True:
        b = c.recv(1 << 18)
        if not b:
            break
        out += b
    c.close()
    return bytes(out).split(b"\r\n\r\n", 2)[2]


if __name__ == "__main__":
    unittest.main(verbosity=2)
