#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A test Kubernetes API server for the kube source's tests (python3 standard library only).

It serves list and watch of services, endpointslices and nodes as the Kubernetes API concepts
documentation describes them, not as sluice happens to use them:
  - list: consistent snapshot with limit/continue pagination (continue tokens expire with
    compaction: 410 Expired), metadata.resourceVersion, items without kind/apiVersion;
  - watch=1&resourceVersion=RV: newline-delimited JSON events over chunked encoding, only
    events after RV; an RV older than the compaction point is 410 Gone, either as the HTTP
    status or (the watch cache's way) as an in-stream ERROR event; timeoutSeconds ends the
    stream cleanly; BOOKMARK events only with allowWatchBookmarks=true;
  - labelSelector (key, !key, key=value, key!=value) and fieldSelector (metadata.name=,
    metadata.namespace=), with the selector transitions of a watch (an update that stops
    matching is a DELETED event, one that starts matching an ADDED event);
  - bearer token authentication (401 with a Status body) and, over TLS, client certificates;
  - TokenReview creation (POST /apis/authentication.k8s.io/v1/tokenreviews): a token is
    authenticated when it is registered (op "sa_tokens") and one of its audiences is among the
    review's spec.audiences (default: the API server's own, https://kubernetes.default.svc);
    status.audiences is that intersection, as the TokenReview API documents; a token registered
    with "extra" returns it as status.user.extra (the node claim of bound tokens);
  - coordination.k8s.io/v1 Leases in a namespace (/apis/coordination.k8s.io/v1/namespaces/NS/
    leases[/NAME]): list and watch as above, get, create (409 AlreadyExists), update (409
    Conflict on a stale metadata.resourceVersion) and delete (409 Conflict when DeleteOptions'
    preconditions.resourceVersion is stale), each an event for watches.

A test drives it through a plain HTTP control port: POST /control with a JSON body {"op": ...}
(see Control.handle), GET /control/requests for the request log (one line per API request:
"<unix time> <status> <method> <path?query> <authorization>"). Op "outage" stops the API
listener (refused connections, open ones dropped) until it is called again with false; GET
/version answers as the real one does.

Usage: fake_apiserver.py --ports-file PATH [--tls-dir DIR [--client-ca]]
With --tls-dir, a test CA, server and client certificates are generated there with openssl
(ca.crt, server.crt/key for 127.0.0.1, client.crt/key, other-ca.crt: a CA nobody used).
"""

import argparse
import base64
import copy
import http.server
import json
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

KINDS = {
    "services": ("/api/v1/services", "Service", "v1"),
    "endpointslices": ("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice",
                       "discovery.k8s.io/v1"),
    "nodes": ("/api/v1/nodes", "Node", "v1"),
    "leases": ("/apis/coordination.k8s.io/v1/leases", "Lease", "coordination.k8s.io/v1"),
}
# Namespaced Lease paths: the collection (list, watch, create) and one object (get, update,
# delete), as Konnectivity's lease controller and counter use them.
LEASES_NS = "/apis/coordination.k8s.io/v1/namespaces/"
PATHS = {path: name for name, (path, _, _) in KINDS.items()}


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def parse_label_selector(text):
    """Returns a predicate over a labels dict."""
    reqs = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if part.startswith("!"):
            reqs.append(lambda l, k=part[1:]: k not in l)
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append(lambda l, k=k, v=v: l.get(k) != v)
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            reqs.append(lambda l, k=k, v=v: l.get(k) == v)
        else:
            reqs.append(lambda l, k=part: k in l)
    return lambda labels: all(r(labels or {}) for r in reqs)


def parse_field_selector(text):
    reqs = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        k, v = part.split("=", 1)
        reqs.append((k.lstrip("="), v.lstrip("=")))

    def match(obj):
        meta = obj.get("metadata", {})
        for k, v in reqs:
            if k == "metadata.name" and meta.get("name") != v:
                return False
            if k == "metadata.namespace" and meta.get("namespace") != v:
                return False
        return True
    return match


class State:
    """Objects, their event history and the test's knobs. Guarded by `cond`."""

    def __init__(self):
        self.cond = threading.Condition()
        self.rv = 100
        self.compacted = 0  # watches from an RV below this are 410
        self.objects = {name: {} for name in KINDS}  # resource -> (ns, name) -> object
        self.history = []  # (rv, resource, type, new_obj, old_obj) or (rv, resource, "RAW", line)
        self.snapshots = {}  # continue id -> (rv, [items])
        self.next_snapshot = 1
        self.tokens = []  # accepted bearer tokens; empty: no authentication
        self.sa_tokens = {}  # TokenReview: token -> {"username", "audiences"}
        self.gone_mode = "stream"  # how a watch from a compacted RV fails: "stream" or "http"
        self.held = False  # streams send nothing while held (events stay in the history)
        self.faults = []  # pending injected failures, first match wins
        self.generation = 0  # bumped by close_watches and bookmark
        self.close_mode = {}  # generation -> (resource or None, mode)
        self.bookmarks = {}  # generation -> resource or None
        self.log = []

    def bump(self):
        self.rv += 1
        return self.rv


STATE = State()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"

    def log_message(self, fmt, *args):  # quiet
        pass

    # --- plumbing -----------------------------------------------------------------------
    def send_json(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def record(self, code):
        with STATE.cond:
            STATE.log.append("%.3f %d %s %s %s" % (time.time(), code, self.command, self.path,
                                                   self.headers.get("Authorization", "-")))

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # --- requests -----------------------------------------------------------------------
    def do_GET(self):
        if self.server.control:
            return self.control_get()
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/version":  # public, as the real one (system:public-info-viewer)
            self.record(200)
            return self.send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        lease = self.lease_path(url.path)
        if lease is not None and lease[1]:
            return self.lease_object("GET", *lease)
        if lease is not None:  # the namespace's collection: list or watch in one namespace
            query["fieldSelector"] = ",".join(
                filter(None, [query.get("fieldSelector"), "metadata.namespace=" + lease[0]]))
            url = url._replace(path=KINDS["leases"][0])
        resource = PATHS.get(url.path)
        if resource is None:
            self.record(404)
            return self.send_json(404, status_body(404, "NotFound", "no such path " + url.path))
        watch = query.get("watch") in ("1", "true")
        with STATE.cond:
            fault = self.take_fault(resource, "watch" if watch else "list")
            tokens = list(STATE.tokens)
        if fault is not None and self.apply_fault(fault):
            return
        if not self.authorized(tokens):
            return
        if watch:
            return self.watch(resource, query, fault)
        return self.list(resource, query)

    def authorized(self, tokens):
        """False (after a 401) when bearer tokens are required and this request has none."""
        auth = self.headers.get("Authorization", "")
        if tokens and (not auth.startswith("Bearer ") or auth[7:] not in tokens):
            self.record(401)
            self.send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            return False
        return True

    def create_token_review(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length > 0 else b""
        with STATE.cond:
            fault = self.take_fault("tokenreviews", "create")
            tokens = list(STATE.tokens)
            sa_tokens = copy.deepcopy(STATE.sa_tokens)
        if fault is not None and self.apply_fault(fault):
            return
        if not self.authorized(tokens):
            return
        try:
            review = json.loads(raw)
            if review.get("kind") != "TokenReview" or \
                    review.get("apiVersion") != "authentication.k8s.io/v1":
                raise ValueError("kind/apiVersion")
            token = review["spec"]["token"]
            wanted = review["spec"].get("audiences") or ["https://kubernetes.default.svc"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.record(400)
            return self.send_json(400, status_body(400, "BadRequest", "bad TokenReview: %r" % e))
        known = sa_tokens.get(token)
        common = [a for a in wanted if known and a in known["audiences"]]
        if known is None:
            status = {"authenticated": False, "user": {}, "error": "invalid bearer token"}
        elif not common:
            status = {"authenticated": False, "user": {},
                      "error": "token audiences %s is invalid for the target audiences %s" %
                               (known["audiences"], wanted)}
        else:
            status = {"authenticated": True, "audiences": common,
                      "user": {"username": known["username"], "uid": "uid-" + token[:8],
                               "groups": ["system:serviceaccounts", "system:authenticated"]}}
            if known.get("extra"):  # e.g. the node claim of a bound token (Kubernetes >= 1.30)
                status["user"]["extra"] = known["extra"]
        review["status"] = status
        review.setdefault("metadata", {})["creationTimestamp"] = None
        self.record(201)
        self.send_json(201, review)

    @staticmethod
    def lease_path(path):
        """(namespace, name or "") of a namespaced Lease path, else None."""
        if not path.startswith(LEASES_NS):
            return None
        parts = path[len(LEASES_NS):].split("/")
        if len(parts) == 2 and parts[1] == "leases":
            return parts[0], ""
        if len(parts) == 3 and parts[1] == "leases" and parts[2]:
            return parts[0], parts[2]
        return None

    def do_PUT(self):  # noqa: N802 - http.server API
        lease = self.lease_path(urllib.parse.urlsplit(self.path).path)
        if self.server.control or lease is None or not lease[1]:
            self.record(405)
            return self.send_json(405, status_body(405, "MethodNotAllowed", "not here"))
        return self.lease_object("PUT", *lease)

    def do_DELETE(self):  # noqa: N802 - http.server API
        lease = self.lease_path(urllib.parse.urlsplit(self.path).path)
        if self.server.control or lease is None or not lease[1]:
            self.record(405)
            return self.send_json(405, status_body(405, "MethodNotAllowed", "not here"))
        return self.lease_object("DELETE", *lease)

    def lease_object(self, method, ns, name):
        """GET, POST (create in the collection), PUT and DELETE of one Lease."""
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length > 0 else b""
        verb = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}[method]
        with STATE.cond:
            fault = self.take_fault("leases", verb)
            tokens = list(STATE.tokens)
        if fault is not None and self.apply_fault(fault):
            return
        if not self.authorized(tokens):
            return
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self.record(400)
            return self.send_json(400, status_body(400, "BadRequest", "not JSON"))
        if method == "POST":
            name = body.get("metadata", {}).get("name", "")
        key = (ns, name)
        with STATE.cond:
            objects = STATE.objects["leases"]
            old = objects.get(key)
            if method == "GET":
                code, reply = (200, old) if old else (404, None)
            elif method == "POST":
                if old is not None:
                    code, reply = 409, status_body(409, "AlreadyExists",
                                                   'leases "%s" already exists' % name)
                else:
                    code, reply = 201, self.store_lease(key, body, None)
            elif old is None:
                code, reply = 404, None
            elif method == "PUT":
                rv = body.get("metadata", {}).get("resourceVersion")
                if rv and rv != old["metadata"]["resourceVersion"]:
                    code, reply = 409, status_body(409, "Conflict", "the object has been "
                                                   "modified; please apply your changes to the "
                                                   "latest version and try again")
                else:
                    code, reply = 200, self.store_lease(key, body, old)
            else:  # DELETE
                rv = (body.get("preconditions") or {}).get("resourceVersion")
                if rv and rv != old["metadata"]["resourceVersion"]:
                    code, reply = 409, status_body(409, "Conflict", "Precondition failed: "
                                                   "ResourceVersion in precondition: %s, "
                                                   "ResourceVersion in object meta: %s"
                                                   % (rv, old["metadata"]["resourceVersion"]))
                else:
                    del objects[key]
                    gone = copy.deepcopy(old)
                    gone["metadata"]["resourceVersion"] = str(STATE.bump())
                    STATE.history.append((STATE.rv, "leases", "DELETED", gone, old))
                    code, reply = 200, status_body(200, "", "")
                    reply["status"] = "Success"
            STATE.cond.notify_all()
        if code == 404:
            reply = status_body(404, "NotFound", 'leases "%s" not found' % name)
        self.record(code)
        self.send_json(code, reply)

    @staticmethod
    def store_lease(key, body, old):
        """Stores `body` as the Lease at `key` (called with STATE.cond held); returns it."""
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = "Lease", "coordination.k8s.io/v1"
        meta = obj.setdefault("metadata", {})
        meta["namespace"], meta["name"] = key
        meta["resourceVersion"] = str(STATE.bump())
        meta["uid"] = old["metadata"]["uid"] if old else "uid-lease-%s-%s" % key
        STATE.objects["leases"][key] = obj
        STATE.history.append((STATE.rv, "leases", "MODIFIED" if old else "ADDED", obj, old))
        return obj

    def take_fault(self, resource, verb):
        for i, f in enumerate(STATE.faults):
            if f.get("resource", resource) == resource and f.get("verb", verb) == verb:
                if f.get("skip", 0) > 0:  # let this many matching requests through first
                    f["skip"] -= 1
                    return None
                f["count"] = f.get("count", 1) - 1
                if f["count"] <= 0:
                    del STATE.faults[i]
                return f
        return None

    def apply_fault(self, fault):
        """Answers with the fault; False when the fault shapes the watch instead (hang)."""
        action = fault.get("action", "status")
        if action == "reset":
            self.record(0)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if action == "status":
            code = fault["status"]
            headers = {}
            if "retry_after" in fault:
                headers["Retry-After"] = str(fault["retry_after"])
            self.record(code)
            self.send_json(code, status_body(code, fault.get("reason", "Injected"),
                                              fault.get("message", "injected failure")), headers)
            return True
        return False

    def list(self, resource, query):
        _, kind, api_version = KINDS[resource]
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        limit = int(query.get("limit", "0") or 0)
        with STATE.cond:
            if query.get("continue"):
                try:
                    token = json.loads(base64.b64decode(query["continue"]))
                    rv, items = STATE.snapshots[token["id"]]
                    offset = token["offset"]
                except (ValueError, KeyError):
                    self.record(400)
                    return self.send_json(400, status_body(400, "BadRequest", "bad continue"))
                if rv < STATE.compacted:
                    self.record(410)
                    return self.send_json(410, status_body(
                        410, "Expired", "The provided continue parameter is too old to display "
                        "a consistent list result."))
            else:
                rv = STATE.rv
                items = [copy.deepcopy(o) for _, o in sorted(STATE.objects[resource].items())
                         if labels(o["metadata"].get("labels")) and fields(o)]
                for o in items:
                    o.pop("kind", None)
                    o.pop("apiVersion", None)
                offset = 0
            page = items[offset:offset + limit] if limit > 0 else items[offset:]
            meta = {"resourceVersion": str(rv)}
            rest = len(items) - offset - len(page)
            if rest > 0:
                sid = STATE.next_snapshot
                STATE.next_snapshot += 1
                STATE.snapshots[sid] = (rv, items)
                meta["continue"] = base64.b64encode(json.dumps(
                    {"id": sid, "offset": offset + len(page)}).encode()).decode()
                meta["remainingItemCount"] = rest
        self.record(200)
        self.send_json(200, {"kind": kind + "List", "apiVersion": api_version,
                             "metadata": meta, "items": page})

    def watch(self, resource, query, fault):
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        bookmarks = query.get("allowWatchBookmarks") == "true"
        timeout = float(query.get("timeoutSeconds", "1800"))
        hang = fault is not None and fault.get("action") == "hang"
        try:
            pos = int(query.get("resourceVersion", "0") or 0)
        except ValueError:
            self.record(400)
            return self.send_json(400, status_body(400, "BadRequest", "bad resourceVersion"))
        with STATE.cond:
            gone = pos < STATE.compacted
            generation = STATE.generation
            if gone and STATE.gone_mode == "http":
                self.record(410)
                return self.send_json(410, status_body(
                    410, "Expired", "too old resource version: %d (%d)" % (pos, STATE.compacted)))
        self.record(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if gone:
            return self.end_with_gone(pos)
        deadline = time.time() + timeout
        try:
            self.stream(resource, labels, fields, bookmarks, deadline, hang, pos, generation)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def end_with_gone(self, pos):
        event = {"type": "ERROR", "object": status_body(
            410, "Expired", "too old resource version: %d (%d)" % (pos, STATE.compacted))}
        self.chunk(json.dumps(event).encode() + b"\n")
        self.chunk(b"")

    def stream(self, resource, labels, fields, bookmarks, deadline, hang, pos, generation):
        hang_until = time.time() + 60  # a hung stream never outlives a test
        while True:
            out = []
            with STATE.cond:
                while True:
                    # close_watches and bookmark requests made after this watch started.
                    want_bookmark = False
                    for g in range(generation + 1, STATE.generation + 1):
                        generation = g
                        close = STATE.close_mode.get(g)
                        if close and close[0] in (None, resource):
                            return self.close_stream(close[1], pos, resource, labels, fields)
                        if STATE.bookmarks.get(g, "-") in (None, resource):
                            want_bookmark = bookmarks and not hang
                    if not STATE.held and not hang:
                        if pos < STATE.compacted:
                            return self.end_with_gone(pos)
                        for entry in STATE.history:
                            if entry[0] > pos and entry[1] == resource:
                                event = self.filter_event(entry, labels, fields)
                                if event is not None:
                                    out.append(event)
                        # Every event up to the newest RV is delivered, so a bookmark may
                        # carry it (a held stream drops its bookmark instead).
                        pos = max(pos, STATE.rv)
                        if want_bookmark:
                            out.append({"type": "BOOKMARK", "object": {
                                "kind": KINDS[resource][1], "apiVersion": KINDS[resource][2],
                                "metadata": {"resourceVersion": str(STATE.rv)}}})
                    if out:
                        break
                    now = time.time()
                    if (not hang and now >= deadline) or (hang and now >= hang_until):
                        self.chunk(b"")  # timeoutSeconds: a clean end
                        return
                    STATE.cond.wait(0.5 if hang else min(deadline - now, 0.5))
            for event in out:
                self.chunk(event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n")

    @staticmethod
    def filter_event(entry, labels, fields):
        if entry[2] == "RAW":
            return entry[3]
        _, _, etype, new, old = entry

        def match(o):
            return o is not None and labels(o["metadata"].get("labels")) and fields(o)
        now, was = match(new), match(old)
        if etype == "DELETED":
            return {"type": "DELETED", "object": new} if now else None
        if now and was:
            return {"type": "MODIFIED", "object": new}
        if now:
            return {"type": "ADDED", "object": new}
        if was:
            return {"type": "DELETED", "object": new}
        return None

    def close_stream(self, mode, pos, resource, labels, fields):
        if mode == "midline":
            # The chunk header promises the whole next event line (or a made-up one), half of
            # it follows, then the connection drops: the client holds a partial line and a
            # partial chunk, neither of which may be applied.
            line = b'{"type":"ADDED","object":{"metadata":{"name":"never-completed"}}}\n'
            for entry in STATE.history:
                if entry[0] > pos and entry[1] == resource:
                    event = self.filter_event(entry, labels, fields)
                    if event is not None:
                        line = event if isinstance(event, bytes) else \
                            json.dumps(event).encode() + b"\n"
                        break
            self.wfile.write(b"%x\r\n%s" % (len(line), line[:len(line) // 2]))
            self.wfile.flush()
            mode = "abrupt"
        if mode == "abrupt":
            # No terminating chunk: the client sees the connection drop mid-stream.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif mode == "expire":
            self.end_with_gone(pos)
        else:
            self.chunk(b"")

    # --- control ------------------------------------------------------------------------
    def control_get(self):
        if self.path == "/control/requests":
            with STATE.cond:
                data = ("\n".join(STATE.log) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_json(404, {})

    def do_POST(self):
        if not self.server.control:
            if urllib.parse.urlsplit(self.path).path == \
                    "/apis/authentication.k8s.io/v1/tokenreviews":
                return self.create_token_review()
            lease = self.lease_path(urllib.parse.urlsplit(self.path).path)
            if lease is not None and not lease[1]:
                return self.lease_object("POST", *lease)
            self.record(405)
            return self.send_json(405, status_body(405, "MethodNotAllowed", "read-only"))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if body.get("op") == "outage":  # not under STATE.cond: stopping waits for the server
            outage(bool(body["value"]))
            return self.send_json(200, {})
        try:
            with STATE.cond:
                result = control(body)
                STATE.cond.notify_all()
            self.send_json(200, result or {})
        except (KeyError, ValueError, TypeError) as e:
            self.send_json(400, {"error": repr(e)})


def control(c):
    """One control operation; called with STATE.cond held."""
    op = c["op"]
    s = STATE
    if op == "put":  # {"resource", "object"}: create or update, as an ADDED/MODIFIED event
        resource = c["resource"]
        obj = copy.deepcopy(c["object"])
        _, kind, api_version = KINDS[resource]
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api_version)
        meta = obj.setdefault("metadata", {})
        if resource != "nodes":
            meta.setdefault("namespace", "default")
        key = (meta.get("namespace", ""), meta["name"])
        old = s.objects[resource].get(key)
        meta["resourceVersion"] = str(s.bump())
        meta.setdefault("uid", "uid-%s-%s" % key)
        s.objects[resource][key] = obj
        s.history.append((s.rv, resource, "MODIFIED" if old else "ADDED", obj, old))
        return {"resourceVersion": meta["resourceVersion"]}
    if op == "delete":  # {"resource", "namespace", "name"}
        resource = c["resource"]
        key = (c.get("namespace", "default" if resource != "nodes" else ""), c["name"])
        old = s.objects[resource].pop(key)
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(s.bump())
        s.history.append((s.rv, resource, "DELETED", gone, old))
        return {"resourceVersion": str(s.rv)}
    if op == "raw":  # {"resource", "line"} or {"resource", "bytes": N}: an arbitrary event line
        line = c["line"].encode() if "line" in c else (
            b'{"type":"ADDED","object":{"metadata":{"name":"' + b"x" * c["bytes"] + b'"}}}')
        s.history.append((s.bump(), c["resource"], "RAW", line + b"\n"))
        return {}
    if op == "compact":  # forget the history: older RVs and continue tokens become 410
        s.compacted = s.rv
        s.history = [e for e in s.history if e[0] > s.compacted]
        return {"compacted": str(s.compacted)}
    if op == "hold":  # {"value": bool}: streams pause / resume
        s.held = bool(c["value"])
        return {}
    if op == "close_watches":  # {"mode": clean|abrupt|midline|expire, "resource": optional}
        s.generation += 1
        s.close_mode[s.generation] = (c.get("resource"), c.get("mode", "clean"))
        return {}
    if op == "bookmark":  # {"resource": optional}: a BOOKMARK at the current RV
        s.bookmarks[s.generation + 1] = c.get("resource")
        s.generation += 1
        return {"resourceVersion": str(s.rv)}
    if op == "bump":  # move the RV on without an event in these resources
        return {"resourceVersion": str(s.bump())}
    if op == "auth":  # {"tokens": [...]}: accepted bearer tokens; [] disables authentication
        s.tokens = list(c["tokens"])
        return {}
    if op == "sa_tokens":  # {"tokens": {token: {"username", "audiences", "extra"?}}}: TokenReview
        s.sa_tokens = dict(c["tokens"])
        return {}
    if op == "gone_mode":  # {"value": "http"|"stream"}
        s.gone_mode = c["value"]
        return {}
    if op == "fault":  # {"verb": list|watch, "resource", "skip", "count", "status",
        #               "retry_after", "action": status|reset|hang}: matching requests fail
        s.faults.append(dict(c))
        return {}
    if op == "objects":  # {"resource"}: every stored object of the resource, as stored
        return {"items": [o for _, o in sorted(s.objects[c["resource"]].items())]}
    if op == "clear_log":
        s.log = []
        return {}
    raise ValueError("unknown op " + op)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, control_port, ssl_ctx=None):
        super().__init__(addr, Handler)
        self.control = control_port
        self.ssl_ctx = ssl_ctx
        self.conns = set()  # open connections, for an outage to drop
        self.conns_lock = threading.Lock()
        self.down = False  # an outage began: a connection accepted just before it is dropped too

    def finish_request(self, request, client_address):
        with self.conns_lock:
            if self.down:
                return  # closed by the caller (shutdown_request)
            self.conns.add(request)
        try:
            self.serve_connection(request, client_address)
        finally:
            with self.conns_lock:
                self.conns.discard(request)

    def drop_connections(self):
        with self.conns_lock:
            self.down = True
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def serve_connection(self, request, client_address):
        # The TLS handshake runs on the connection's thread, not the accept loop's.
        if self.ssl_ctx is not None:
            try:
                request = self.ssl_ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                with STATE.cond:
                    STATE.log.append("%.3f 0 TLS handshake failed: %s" % (time.time(), e))
                return
        self.RequestHandlerClass(request, client_address, self)

    def handle_error(self, request, client_address):
        pass  # a client that went away


# The API server's listener, which an outage stops and a restart opens again on the same port.
API = {"server": None, "addr": None, "ssl_ctx": None}
API_LOCK = threading.Lock()


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()


def outage(down):
    """op "outage" {"value": true}: the API port closes (connections are refused) and every open
    connection drops, as when kube-apiserver stops; {"value": false} listens again."""
    with API_LOCK:
        if down and API["server"] is not None:
            server, API["server"] = API["server"], None
            server.shutdown()
            server.server_close()
            server.drop_connections()
        elif not down and API["server"] is None:
            API["server"] = Server(API["addr"], False, API["ssl_ctx"])
            serve(API["server"])
    with STATE.cond:
        STATE.log.append("%.3f 0 OUTAGE %s -" % (time.time(), "start" if down else "end"))


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all ECDSA P-256."""
    if os.path.exists(os.path.join(d, "client.crt")):
        return
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *ec, "-keyout", f"{d}/{ca}.key", "-out", f"{d}/{ca}.crt",
                "-days", "2", "-subj", f"/CN=sluice-test-{ca}")
    for name, subj, ext in (
            ("server", "/CN=127.0.0.1",
             "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
            ("client", "/O=system:nodes/CN=system:node:test",
             "extendedKeyUsage=clientAuth\n")):
        openssl("req", *ec, "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr",
                "-subj", subj)
        with open(f"{d}/{name}.ext", "w") as f:
            f.write(ext)
        openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.crt", "-CAkey",
                f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/{name}.crt", "-days", "2",
                "-extfile", f"{d}/{name}.ext")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ports-file", required=True)
    p.add_argument("--tls-dir")
    p.add_argument("--client-ca", action="store_true", help="require client certificates")
    p.add_argument("--bind", default="127.0.0.1")
    a = p.parse_args()
    ctx = None
    if a.tls_dir:
        make_certs(a.tls_dir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(f"{a.tls_dir}/server.crt", f"{a.tls_dir}/server.key")
        if a.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(f"{a.tls_dir}/ca.crt")
    api = Server((a.bind, 0), False, ctx)
    ctl = Server((a.bind, 0), True)
    API.update(server=api, addr=api.server_address, ssl_ctx=ctx)
    for s in (api, ctl):
        serve(s)
    tmp = a.ports_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"api": api.server_address[1], "control": ctl.server_address[1]}, f)
    os.rename(tmp, a.ports_file)
    # The test kills us at its end; if it dies first (a crash, a closed pipe), so do we.
    parent = os.getppid()
    try:
        while os.getppid() == parent:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
