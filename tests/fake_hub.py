"""A local stand-in for the few Hugging Face Hub endpoints that publishing a model uses.

Protocol: plain HTTP/1.1 on 127.0.0.1 (an ephemeral port), JSON REST routes shaped like the Hub's. It never
advertises Xet (no ``X-Xet-*`` headers; the LFS batch API answers with the ``basic`` transfer), so the real
huggingface_hub client talks to it as follows:

- ``POST /api/repos/create``: repo creation (409 when it exists); ``GET /api/models/<repo>[/revision/<rev>]``: repo
  info; ``POST /api/models/<repo>/branch/<branch>``: branch creation;
- ``POST /api/validate-yaml``: the README metadata check (400 with ``errors`` when the front matter is not a mapping);
- ``POST /api/models/<repo>/preupload/<rev>``: upload modes; files whose name ends with one of ``lfs_suffixes`` are
  ``"lfs"``, the rest ``"regular"`` (sent base64 inside the commit);
- ``POST /<repo>.git/info/lfs/objects/batch`` + ``PUT /lfs-upload/<oid>`` (no auth, like a presigned URL) +
  ``POST /<repo>.git/info/lfs/objects/verify``: the LFS basic transfer; the PUT body must hash to its oid;
- ``POST /api/models/<repo>/commit/<rev>``: the NDJSON commit (``header``, ``file``, ``lfsFile``, ``deletedFile``),
  applied all at once or not at all;
- ``HEAD``/``GET /<repo>/resolve/<rev>/<path>``: downloads (``<rev>`` a branch or a commit oid), with
  ``X-Repo-Commit`` and ``ETag`` like the Hub.

With ``token`` set, every route but the LFS PUT wants ``Authorization: Bearer <token>`` and answers 401 otherwise.
``fail_commits = True`` makes commits answer 500. Everything received is kept in memory for the test to inspect.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml

_REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"


@dataclass
class Commit:
    """One commit the fake Hub accepted."""

    repo_id: str
    branch: str
    oid: str
    summary: str
    description: str
    files: dict[str, bytes]  # the branch's full tree after the commit


@dataclass
class Repo:
    private: bool
    branches: dict[str, tuple[str, dict[str, bytes]]] = field(default_factory=lambda: {"main": ("0" * 40, {})})


class FakeHub:
    """In-memory Hub on ``127.0.0.1``; use as a context manager (the server stops on exit)."""

    def __init__(self, token: str | None = None, lfs_suffixes: tuple[str, ...] = (".safetensors",)) -> None:
        self.token = token
        self.lfs_suffixes = lfs_suffixes
        self.fail_commits = False
        self.repos: dict[str, Repo] = {}
        self.commits: list[Commit] = []
        self.lfs_objects: dict[str, bytes] = {}
        self.validated_yaml: list[str] = []
        self.requests: list[tuple[str, str, int]] = []  # method, path, status
        self.request_headers: list[dict[str, str]] = []  # lower-case names
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def __enter__(self) -> FakeHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None, "start the FakeHub with `with FakeHub() as hub:`"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- what the tests look at ------------------------------------------------------------------------------------
    def files(self, repo_id: str, branch: str = "main") -> dict[str, bytes]:
        return dict(self.repos[repo_id].branches[branch][1])

    def write_snapshot(self, repo_id: str, out_dir: Path, branch: str = "main") -> Path:
        """Write the files of ``repo_id@branch`` as they arrived, to load them back from disk."""
        for path, content in self.files(repo_id, branch).items():
            target = out_dir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return out_dir

    # -- routes: each returns (status, json body or bytes, extra headers) ------------------------------------------
    def _create_repo(self, body: dict) -> tuple:
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        if repo_id in self.repos:
            return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}, {}
        self.repos[repo_id] = Repo(private=body.get("visibility") == "private")
        return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}, {}

    def _repo_info(self, repo_id: str, revision: str) -> tuple:
        if repo_id not in self.repos:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        tree = self._tree_at(repo_id, revision)
        if tree is None:
            return 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"}
        oid, files = tree
        siblings = [{"rfilename": path} for path in sorted(files)]
        return 200, {"id": repo_id, "sha": oid, "private": self.repos[repo_id].private, "siblings": siblings}, {}

    def _create_branch(self, repo_id: str, branch: str) -> tuple:
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if branch in repo.branches:
            return 409, {"error": "Reference already exists"}, {}
        repo.branches[branch] = repo.branches["main"]
        return 200, {}, {}

    def _validate_yaml(self, body: dict) -> tuple:
        content = body.get("content", "")
        self.validated_yaml.append(content)
        match = re.match(r"^---\n(.*?)\n---\n", content, re.DOTALL)
        try:
            metadata = yaml.safe_load(match.group(1)) if match else None
        except yaml.YAMLError as err:
            return 400, {"errors": [{"message": f"YAML error: {err}"}], "warnings": []}, {}
        if not isinstance(metadata, dict):
            return 400, {"errors": [{"message": "metadata must be a YAML mapping in a --- block"}], "warnings": []}, {}
        return 200, {"errors": [], "warnings": []}, {}

    def _preupload(self, repo_id: str, body: dict) -> tuple:
        if repo_id not in self.repos:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        modes = [
            {
                "path": f["path"],
                "uploadMode": "lfs" if f["path"].endswith(self.lfs_suffixes) else "regular",
                "shouldIgnore": False,
                "oid": None,
            }
            for f in body["files"]
        ]
        return 200, {"files": modes}, {}

    def _lfs_batch(self, repo_id: str, body: dict) -> tuple:
        if repo_id not in self.repos:
            return 404, {"message": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        objects = [
            {
                "oid": obj["oid"],
                "size": obj["size"],
                "authenticated": True,
                "actions": {
                    "upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{self.url}/{repo_id}.git/info/lfs/objects/verify"},
                },
            }
            for obj in body["objects"]
        ]
        return 200, {"transfer": "basic", "objects": objects}, {}

    def _lfs_put(self, oid: str, content: bytes) -> tuple:
        if hashlib.sha256(content).hexdigest() != oid:
            return 400, {"error": "content does not match its oid"}, {}
        self.lfs_objects[oid] = content
        return 200, b"", {}

    def _lfs_verify(self, body: dict) -> tuple:
        content = self.lfs_objects.get(body["oid"])
        if content is None or len(content) != body["size"]:
            return 404, {"message": "object not uploaded"}, {}
        return 200, {}, {}

    def _commit(self, repo_id: str, branch: str, body: bytes) -> tuple:
        if self.fail_commits:
            return 500, {"error": "Internal Error - We're working hard to fix this as soon as possible!"}, {}
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if branch not in repo.branches:
            return 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"}
        tree = dict(repo.branches[branch][1])
        header = None
        for line in body.decode().splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
            elif key == "file":
                if value.get("encoding") != "base64":
                    return 400, {"error": f"unsupported encoding {value.get('encoding')!r}"}, {}
                tree[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                content = self.lfs_objects.get(value["oid"])
                if content is None:
                    return 422, {"error": f"LFS object {value['oid']} of {value['path']} was never uploaded"}, {}
                tree[value["path"]] = content
            elif key == "deletedFile":
                tree.pop(value["path"], None)
            else:
                return 400, {"error": f"unsupported commit operation {key!r}"}, {}
        if header is None or not header.get("summary"):
            return 400, {"error": "the commit has no header with a summary"}, {}
        oid = hashlib.sha1(f"{len(self.commits)}:{header['summary']}:{sorted(tree)}".encode()).hexdigest()
        repo.branches[branch] = (oid, tree)
        self.commits.append(Commit(repo_id, branch, oid, header["summary"], header.get("description", ""), tree))
        return 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}, {}

    def _tree_at(self, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
        """(commit oid, files) of a branch name or of a commit oid (clients pin downloads to the commit)."""
        repo = self.repos[repo_id]
        if revision in repo.branches:
            return repo.branches[revision]
        commit = next((c for c in self.commits if c.repo_id == repo_id and c.oid == revision), None)
        return (commit.oid, commit.files) if commit else None

    def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> tuple:
        if repo_id not in self.repos:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        tree = self._tree_at(repo_id, revision)
        if tree is None:
            return 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"}
        oid, files = tree
        if path not in files:
            return 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": oid}
        content = files[path]
        headers = {"X-Repo-Commit": oid, "ETag": f'"{hashlib.sha256(content).hexdigest()}"'}
        return 200, (b"" if head else content), {**headers, "Content-Length-Override": str(len(content))}

    def route(self, method: str, path: str, body: bytes) -> tuple:
        """Dispatch one request; the handler has already checked authentication."""

        def as_json() -> dict:
            return json.loads(body or b"{}")

        routes = [
            ("POST", r"/api/repos/create", lambda m: self._create_repo(as_json())),
            (
                "GET",
                rf"/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?",
                lambda m: self._repo_info(m["repo"], unquote(m["rev"] or "main")),
            ),
            (
                "POST",
                rf"/api/models/{_REPO}/branch/(?P<branch>[^/]+)",
                lambda m: self._create_branch(m["repo"], unquote(m["branch"])),
            ),
            ("POST", r"/api/validate-yaml", lambda m: self._validate_yaml(as_json())),
            ("POST", rf"/api/models/{_REPO}/preupload/(?P<rev>[^/]+)", lambda m: self._preupload(m["repo"], as_json())),
            (
                "POST",
                rf"/api/models/{_REPO}/commit/(?P<rev>[^/]+)",
                lambda m: self._commit(m["repo"], unquote(m["rev"]), body),
            ),
            ("POST", rf"/{_REPO}\.git/info/lfs/objects/batch", lambda m: self._lfs_batch(m["repo"], as_json())),
            ("POST", rf"/{_REPO}\.git/info/lfs/objects/verify", lambda m: self._lfs_verify(as_json())),
            ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", lambda m: self._lfs_put(m["oid"], body)),
            (
                "GET",
                rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)",
                lambda m: self._resolve(m["repo"], unquote(m["rev"]), unquote(m["path"]), head=False),
            ),
            (
                "HEAD",
                rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)",
                lambda m: self._resolve(m["repo"], unquote(m["rev"]), unquote(m["path"]), head=True),
            ),
        ]
        for verb, pattern, handler in routes:
            match = re.fullmatch(pattern, path)
            if verb == method and match:
                with self._lock:
                    return handler(match)
        return 404, {"error": f"no route for {method} {path}"}, {}


def _make_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # a response's headers and body go out without waiting on an ACK (40 ms each)
        timeout = 10  # an idle keep-alive connection ends after this many seconds

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    chunk = self.rfile.read(size)
                    self.rfile.readline()  # CRLF after each chunk
                    if size == 0:
                        break
                    chunks.append(chunk)
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _handle(self) -> None:
            method, path = self.command, urlsplit(self.path).path
            body = self._read_body() if method in ("POST", "PUT") else b""
            hub.request_headers.append({name.lower(): value for name, value in self.headers.items()})
            expected = f"Bearer {hub.token}"
            if hub.token is not None and method != "PUT" and self.headers.get("Authorization") != expected:
                status, payload, headers = 401, {"error": "Invalid credentials in Authorization header"}, {}
            else:
                status, payload, headers = hub.route(method, path, body)
            hub.requests.append((method, path, status))
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            length = headers.pop("Content-Length-Override", str(len(data)))
            self.send_response(status)
            kind = "application/octet-stream" if isinstance(payload, bytes) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", length)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_HEAD = _handle

    return Handler
