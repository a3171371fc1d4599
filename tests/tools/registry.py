#!/usr/bin/python3
"""registry.py - a small Confluent-compatible Schema Registry for the tests (standard library only).

    registry.py [--host H] [--port P] [--port-file F] [--state FILE] [--log FILE]
                [--user U --password P] [--hide-ids 3,5] [--delay-ms N] [--fail-5xx]
                [--proxy-404-ms N]
    registry.py register --url URL --subject S --schema-file F [--schema-type T]
                [--reference NAME=SUBJECT:VERSION]... [--user U --password P]

Server: the REST paths and JSON bodies of Confluent's registry, enough for producers and for
idemd (which reads GET /schemas/ids/{id}); every answer is application/vnd.schemaregistry.v1+json.

  POST /subjects/{s}/versions   {"schema": TEXT, "schemaType"?: T, "references"?: [...]}
                                -> {"id": N}. The same schema (type, JSON text up to whitespace
                                and key order, references) gets the same id under any subject;
                                ids start at 1. Re-registering it under a subject that has it
                                adds no version. Invalid JSON for AVRO/JSON: 422, code 42201.
  POST /subjects/{s}            look up a schema under s -> {"subject","version","id","schema"}
  GET  /schemas/ids/{id}        -> {"schema": TEXT} (+ "schemaType" unless AVRO, + "references"
                                if any); 404 {"error_code": 40403, "message": "Schema 7 not found"}
  GET  /schemas/ids/{id}/schema -> the schema text itself
  GET  /schemas/ids/{id}/versions -> [{"subject": s, "version": v}, ...]
  GET  /subjects                -> ["s1", "s2"] (sorted)
  GET  /subjects/{s}/versions   -> [1, 2]; 404 code 40401 for an unknown subject
  GET  /subjects/{s}/versions/{v}  (v: N, "latest" or -1) -> {"subject","version","id","schema"}
                                (+ "schemaType" unless AVRO); 404 code 40402 for no such version
  GET  /                        -> {}
The text returned is the text first registered, byte for byte.

Options:
  --port P          listen on 127.0.0.1:P (default 0: the kernel picks one; it is printed on
                    stdout as "port=P" once listening)
  --host H          listen address (default 127.0.0.1)
  --port-file F     write the port to F (atomically) once listening
  --state FILE      JSON file holding the registered schemas: loaded at start if it exists,
                    rewritten (atomically) after every new registration, so a server stopped
                    and started again with the same FILE serves the same ids
  --log FILE        append one line per request: METHOD PATH STATUS (path without the query)
  --user U --password P  require HTTP basic auth on every request; 401 code 401 otherwise
  --hide-ids LIST   answer 404 (code 40403) on /schemas/ids/{id}... for these ids (comma list)
  --delay-ms N      wait N ms before answering every /schemas/ids/... request (whatever the
                    answer, --fail-5xx's included; not --proxy-404-ms's, which a proxy gives)
  --fail-5xx        answer 503 (code 50003) to every /schemas/ids/... request
  --proxy-404-ms N  for the first N ms after the server starts listening, answer every
                    /schemas/ids/... request as a proxy with no registry behind it would: 404,
                    Content-Type text/html, body
                    "<html><body><h1>404 Not Found</h1></body></html>" (no JSON, no error_code;
                    before authentication); afterwards answer normally. A client must take this
                    as "not available now", not as "schema not found".
SIGTERM and SIGINT stop the server with status 0.

register: POST the schema in F (its text, surrounding whitespace removed) under subject S to the
registry at URL, as a producer does, and print the id. Exits 1 (message on stderr) on any
failure.
"""

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
PROXY_404_BODY = b"<html><body><h1>404 Not Found</h1></body></html>"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class RegistryError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def not_found():
    return RegistryError(404, 404, "HTTP 404 Not Found")


class Store:
    """The registered schemas: ids, subjects and versions; persisted to a state file."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.schemas = {}  # id -> {"schema", "schemaType", "references"}
        self.by_key = {}  # identity key -> id
        self.subjects = {}  # subject -> [id of version 1, id of version 2, ...]
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
            for s in state.get("schemas", []):
                entry = {
                    "schema": s["schema"],
                    "schemaType": s.get("schemaType", "AVRO"),
                    "references": s.get("references", []),
                }
                self.schemas[int(s["id"])] = entry
                self.by_key[self.key(entry)] = int(s["id"])
            self.subjects = {k: [int(i) for i in v] for k, v in state.get("subjects", {}).items()}

    @staticmethod
    def key(entry):
        text = entry["schema"]
        if entry["schemaType"] in ("AVRO", "JSON"):
            try:
                text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
            except ValueError:
                pass
        refs = json.dumps(entry["references"], sort_keys=True)
        return (entry["schemaType"], text, refs)

    def save(self):
        if not self.path:
            return
        state = {
            "schemas": [dict(id=i, **self.schemas[i]) for i in sorted(self.schemas)],
            "subjects": self.subjects,
        }
        tmp = f"{self.path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)

    @staticmethod
    def parse_body(body):
        try:
            req = json.loads(body or b"{}")
        except ValueError as e:
            raise RegistryError(400, 400, f"Unrecognized request body: {e}")
        if not isinstance(req, dict):
            raise RegistryError(400, 400, "Unrecognized request body: not an object")
        text = req.get("schema")
        stype = req.get("schemaType") or "AVRO"
        refs = req.get("references") or []
        if not isinstance(text, str) or text == "":
            raise RegistryError(422, 42201, "Empty schema")
        if stype not in SCHEMA_TYPES:
            raise RegistryError(422, 42201, f"Invalid schema type {stype}")
        if stype in ("AVRO", "JSON"):
            try:
                json.loads(text)
            except ValueError as e:
                raise RegistryError(422, 42201, f"Invalid schema {text!r}: {e}")
        return {"schema": text, "schemaType": stype, "references": refs}

    def register(self, subject, body):
        entry = self.parse_body(body)
        with self.lock:
            k = self.key(entry)
            sid = self.by_key.get(k)
            changed = False
            if sid is None:
                sid = max(self.schemas, default=0) + 1
                self.schemas[sid] = entry
                self.by_key[k] = sid
                changed = True
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
                changed = True
            if changed:
                self.save()
        return {"id": sid}

    def lookup(self, subject, body):
        entry = self.parse_body(body)
        with self.lock:
            versions = self.subjects.get(subject)
            if versions is None:
                raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
            sid = self.by_key.get(self.key(entry))
            if sid is None or sid not in versions:
                raise RegistryError(404, 40403, "Schema not found")
            return self.version_body(subject, versions.index(sid) + 1, sid)

    def version_body(self, subject, version, sid):
        entry = self.schemas[sid]
        out = {"subject": subject, "version": version, "id": sid, "schema": entry["schema"]}
        if entry["schemaType"] != "AVRO":
            out["schemaType"] = entry["schemaType"]
        if entry["references"]:
            out["references"] = entry["references"]
        return out

    def get(self, sid):
        with self.lock:
            entry = self.schemas.get(sid)
        if entry is None:
            raise RegistryError(404, 40403, f"Schema {sid} not found")
        return entry

    def subject_versions(self, subject):
        with self.lock:
            versions = self.subjects.get(subject)
            if versions is None:
                raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
            return list(versions)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "idem-test-registry/1.0"

    # ---- plumbing ----

    def log_message(self, fmt, *args):  # no per-request noise on stderr: see --log
        pass

    def send_body(self, status, body, content_type=CONTENT_TYPE, extra_headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.server.log_request_line(self.command, self.path.split("?", 1)[0], status)

    def send_error_body(self, err, extra_headers=()):
        self.send_body(err.status, {"error_code": err.code, "message": err.message},
                       extra_headers=extra_headers)

    def authorized(self):
        cfg = self.server.cfg
        if cfg.user is None:
            return True
        want = base64.b64encode(f"{cfg.user}:{cfg.password}".encode()).decode()
        return self.headers.get("Authorization", "") == f"Basic {want}"

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def proxy_404(self, path):
        """--proxy-404-ms: a proxy's own 404 page, during the first N ms."""
        cfg = self.server.cfg
        if cfg.proxy_404_ms <= 0 or not path.startswith("/schemas/ids/"):
            return False
        if (time.monotonic() - self.server.started) * 1000.0 >= cfg.proxy_404_ms:
            return False
        self.send_body(404, PROXY_404_BODY, content_type="text/html")
        return True

    def dispatch(self):
        body = self.read_body() if self.command == "POST" else b""
        if self.proxy_404(self.path.split("?", 1)[0]):
            return
        if not self.authorized():
            self.send_error_body(RegistryError(401, 401, "Unauthorized"),
                                 [("WWW-Authenticate", 'Basic realm="SchemaRegistry"')])
            return
        path = self.path.split("?", 1)[0]
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        try:
            if parts[:2] == ["schemas", "ids"]:
                status, out, ctype = self.route_ids(parts[2:])
            else:
                status, out, ctype = self.route(parts, body)
        except RegistryError as e:
            self.send_error_body(e)
            return
        self.send_body(status, out, ctype)

    do_GET = dispatch
    do_POST = dispatch
    do_PUT = dispatch
    do_DELETE = dispatch
    do_HEAD = dispatch

    # ---- routes ----

    def route_ids(self, rest):
        cfg = self.server.cfg
        if self.command not in ("GET", "HEAD") or len(rest) not in (1, 2):
            raise not_found()
        if cfg.delay_ms > 0:
            time.sleep(cfg.delay_ms / 1000.0)
        if cfg.fail_5xx:
            raise RegistryError(503, 50003, "Error while forwarding the request to the primary (test registry: --fail-5xx)")
        try:
            sid = int(rest[0])
        except ValueError:
            raise not_found()
        if sid in cfg.hide_ids:
            raise RegistryError(404, 40403, f"Schema {sid} not found")
        entry = self.server.store.get(sid)
        if len(rest) == 1:
            out = {"schema": entry["schema"]}
            if entry["schemaType"] != "AVRO":
                out["schemaType"] = entry["schemaType"]
            if entry["references"]:
                out["references"] = entry["references"]
            return 200, out, CONTENT_TYPE
        if rest[1] == "schema":
            return 200, entry["schema"].encode("utf-8"), CONTENT_TYPE
        if rest[1] == "versions":
            store = self.server.store
            with store.lock:
                out = [{"subject": s, "version": v.index(sid) + 1}
                       for s, v in sorted(store.subjects.items()) if sid in v]
            return 200, out, CONTENT_TYPE
        raise not_found()

    def route(self, parts, body):
        store = self.server.store
        get = self.command in ("GET", "HEAD")
        if parts == [] and get:
            return 200, {}, CONTENT_TYPE
        if parts == ["subjects"] and get:
            with store.lock:
                return 200, sorted(store.subjects), CONTENT_TYPE
        if len(parts) == 2 and parts[0] == "subjects" and self.command == "POST":
            return 200, store.lookup(parts[1], body), CONTENT_TYPE
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            if self.command == "POST":
                return 200, store.register(parts[1], body), CONTENT_TYPE
            if get:
                versions = store.subject_versions(parts[1])
                return 200, list(range(1, len(versions) + 1)), CONTENT_TYPE
        if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions" and get:
            versions = store.subject_versions(parts[1])
            v = parts[3]
            if v in ("latest", "-1"):
                n = len(versions)
            else:
                try:
                    n = int(v)
                except ValueError:
                    n = 0
                if n < 1:
                    raise RegistryError(422, 42202, "The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"" % v)
            if n > len(versions):
                raise RegistryError(404, 40402, f"Version {v} not found.")
            return 200, store.version_body(parts[1], n, versions[n - 1]), CONTENT_TYPE
        raise not_found()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, cfg, store):
        super().__init__(addr, Handler)
        self.cfg = cfg
        self.store = store
        self.log_lock = threading.Lock()
        self.log_file = open(cfg.log, "a", encoding="utf-8") if cfg.log else None
        self.started = time.monotonic()  # reset when listening starts (--proxy-404-ms)

    def log_request_line(self, method, path, status):
        if self.log_file is None:
            return
        with self.log_lock:
            self.log_file.write(f"{method} {path} {status}\n")
            self.log_file.flush()


def write_atomic(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def serve(argv):
    p = argparse.ArgumentParser(prog="registry.py", description="a small Confluent-compatible Schema Registry for tests")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--state")
    p.add_argument("--log")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--hide-ids", default="")
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--fail-5xx", action="store_true")
    p.add_argument("--proxy-404-ms", type=int, default=0)
    cfg = p.parse_args(argv)
    if (cfg.user is None) != (cfg.password is None):
        p.error("--user and --password go together")
    try:
        cfg.hide_ids = {int(x) for x in cfg.hide_ids.split(",") if x.strip()}
    except ValueError:
        p.error(f"invalid --hide-ids '{cfg.hide_ids}': expected a comma-separated list of ids")
    store = Store(cfg.state)
    server = Server((cfg.host, cfg.port), cfg, store)
    port = server.server_address[1]

    def stop(signum, frame):
        # shutdown() waits for serve_forever() to return: call it from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.started = time.monotonic()
    if cfg.port_file:
        write_atomic(cfg.port_file, f"{port}\n")
    print(f"port={port}", flush=True)
    print(f"registry.py: listening on http://{cfg.host}:{port} ({len(store.schemas)} schema(s) from the state file)",
          file=sys.stderr, flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


def register(argv):
    p = argparse.ArgumentParser(prog="registry.py register", description="register a schema, print its id")
    p.add_argument("--url", required=True)
    p.add_argument("--subject", required=True)
    p.add_argument("--schema-file", required=True)
    p.add_argument("--schema-type", default=None, help="AVRO (default), JSON or PROTOBUF")
    p.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                   help="a schema reference (for PROTOBUF: an import NAME registered under "
                        "SUBJECT, version VERSION); repeatable")
    p.add_argument("--user")
    p.add_argument("--password")
    a = p.parse_args(argv)
    with open(a.schema_file, encoding="utf-8") as f:
        text = f.read().strip()
    req_body = {"schema": text}
    if a.schema_type:
        req_body["schemaType"] = a.schema_type
    if a.reference:
        refs = []
        for r in a.reference:
            name, _, rest = r.partition("=")
            subject, _, version = rest.rpartition(":")
            if not name or not subject or not version.isdigit():
                print(f"registry.py register: --reference {r!r}: expected NAME=SUBJECT:VERSION", file=sys.stderr)
                return 1
            refs.append({"name": name, "subject": subject, "version": int(version)})
        req_body["references"] = refs
    url = a.url.rstrip("/") + "/subjects/" + urllib.parse.quote(a.subject, safe="") + "/versions"
    req = urllib.request.Request(url, data=json.dumps(req_body).encode("utf-8"), method="POST",
                                 headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
    if a.user is not None:
        token = base64.b64encode(f"{a.user}:{a.password or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            out = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        print(f"registry.py register: {url}: HTTP {e.code}: {e.read().decode('utf-8', 'replace')}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"registry.py register: {url}: {e}", file=sys.stderr)
        return 1
    print(out["id"])
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "register":
        return register(sys.argv[2:])
    return serve(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
