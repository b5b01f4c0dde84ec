"""A small Hugging Face Hub server on 127.0.0.1 for the round-trip tests (standard library, and
PyYAML, which `huggingface_hub` and `datasets` depend on anyway, to read card front matter).

    python tests/hub_server.py --root DIR --port 0          # prints its URL, serves until killed
    python tests/hub_server.py --root DIR --fault commit-500  # answers 500 to every commit
    python tests/hub_server.py --root DIR --fault die-on-upload  # exits at the first LFS upload

It answers the routes the real `huggingface_hub` client (with `HF_HUB_DISABLE_XET=1`, plain
LFS), `transformers` and `datasets` call, and is honest where a fake would lie: the sha256 of
every LFS upload is checked against its pointer, a commit naming a blob that was never
uploaded is refused, `parentCommit` is checked when given, every commit is kept (revisions
resolve), the branches are listed as the Hub lists refs, the private flag is kept, README
front matter is parsed in `validate-yaml`, and an unknown route is a 404 that names it. Errors carry `X-Error-Code` (`RepoNotFound`,
`RevisionNotFound`, `EntryNotFound`) so the client raises its own typed exceptions.

State lives under `--root`: `blobs/<sha256>` (file contents) and `repos.json` (repos, commits,
refs), written atomically after each commit, so a restarted server sees exactly the commits
that completed. Every request is appended to `requests.log` ("METHOD PATH").
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
LFS_SUFFIXES = (".safetensors", ".parquet", ".bin", ".pt", ".npz", ".npy", ".png", ".arrow")
LFS_MIN_SIZE = 10 * 1024 * 1024
REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"
REV = r"(?P<rev>[^/]+)"


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def git_blob_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def is_lfs(path: str, size: int) -> bool:
    return path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE


def front_matter(text: str) -> dict:
    """The YAML between the leading `---` lines of a card ({} without any); `HubError` if invalid."""
    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.S)
    if not match:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as error:
        raise HubError(400, f"invalid YAML in README.md front matter: {error}") from error
    if data is not None and not isinstance(data, dict):
        raise HubError(400, "README.md front matter must be a YAML mapping")
    return data or {}


class Store:
    """Repos, commits and blobs under `root` (module docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.blobs = root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        state = root / "repos.json"
        self.repos = json.loads(state.read_text()) if state.is_file() else {}

    def save(self) -> None:
        partial = self.root / "repos.json.partial"
        partial.write_text(json.dumps(self.repos, indent=1))
        os.replace(partial, self.root / "repos.json")

    def key(self, repo_type: str, repo_id: str) -> str:
        return f"{repo_type}:{repo_id}"

    def repo(self, repo_type: str, repo_id: str) -> dict:
        repo = self.repos.get(self.key(repo_type, repo_id))
        if repo is None:
            raise HubError(404, f"{repo_type} repository {repo_id} not found", "RepoNotFound")
        return repo

    def commit(self, repo: dict, revision: str) -> dict:
        revision = unquote(revision)
        oid = repo["refs"].get(revision, revision)
        if oid not in repo["commits"]:
            raise HubError(404, f"revision {revision} not found", "RevisionNotFound")
        return repo["commits"][oid]

    def has_blob(self, sha256: str) -> bool:
        return (self.blobs / sha256).is_file()

    def put_blob(self, content: bytes) -> str:
        sha256 = hashlib.sha256(content).hexdigest()
        path = self.blobs / sha256
        if not path.is_file():
            partial = path.with_suffix(".partial")
            partial.write_bytes(content)
            os.replace(partial, path)
        return sha256

    def file_entry(self, path: str, entry: dict) -> dict:
        info = {"type": "file", "oid": entry["git_oid"], "size": entry["size"], "path": path}
        if entry["lfs"]:
            info["lfs"] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": 134}
        return info

    def listing(self, files: dict, folder: str, recursive: bool) -> list[dict]:
        """Tree entries under `folder` ("" for the root), as the Hub lists them."""
        prefix = folder.strip("/") + "/" if folder.strip("/") else ""
        entries, folders = [], set()
        for path in sorted(files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :].split("/")
            for depth in range(1, len(rest)):
                if depth == 1 or recursive:
                    folders.add(prefix + "/".join(rest[:depth]))
            if len(rest) == 1 or recursive:
                entries.append(self.file_entry(path, files[path]))
        directories = [
            {"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p}
            for p in sorted(folders)
        ]
        if prefix and not entries and not directories:
            raise HubError(404, f"{folder} not found", "EntryNotFound")
        return directories + entries


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store: Store
    fault: str | None = None

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    # ---- plumbing --------------------------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://{self.headers.get('Host')}"

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def json_body(self) -> dict:
        try:
            return json.loads(self.body() or b"{}")
        except json.JSONDecodeError as error:
            raise HubError(400, f"request body is not JSON: {error}") from error

    def send(self, status: int, payload=None, headers: dict | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        if raw is None:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def dispatch(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        with open(self.store.root / "requests.log", "a") as log:
            log.write(f"{self.command} {url.path}\n")
        try:
            for method, pattern, handler in ROUTES:
                match = re.fullmatch(pattern, path)
                if match and (method == self.command or (method, self.command) == ("GET", "HEAD")):
                    return handler(self, query=query, **match.groupdict())
            raise HubError(404, f"no route for {self.command} {url.path} on this test Hub server")
        except HubError as error:
            headers = {"X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            self.send(error.status, {"error": error.message}, headers)

    do_GET = do_HEAD = do_POST = do_PUT = dispatch

    def repo_args(self, kind: str, repo: str) -> tuple[str, str]:
        return TYPES[kind], repo

    # ---- repos ----------------------------------------------------------------------------------
    def create_repo(self, query) -> None:
        payload = self.json_body()
        repo_type = payload.get("type") or "model"
        name, organization = payload.get("name"), payload.get("organization")
        if not name or not organization:
            raise HubError(400, "create needs a name and an organization (ORG/NAME)")
        repo_id = f"{organization}/{name}"
        url = f"{self.base}/{PREFIXES[repo_type]}{repo_id}"
        with self.store.lock:
            key = self.store.key(repo_type, repo_id)
            if key in self.store.repos:
                return self.send(409, {"error": "You already created this repo", "url": url})
            private = payload.get("visibility", "public") == "private" or bool(payload.get("private"))
            empty = {"oid": hashlib.sha1(f"init {key}".encode()).hexdigest(), "parent": None}
            empty.update({"message": "initial commit", "files": {}, "date": time.time()})
            self.store.repos[key] = {
                "private": private,
                "commits": {empty["oid"]: empty},
                "refs": {"main": empty["oid"]},
            }
            self.store.save()
        self.send(200, {"url": url, "name": repo_id})

    def repo_info(self, query, kind, repo, rev="main") -> None:
        repo_type, repo_id = self.repo_args(kind, repo)
        record = self.store.repo(repo_type, repo_id)
        commit = self.store.commit(record, rev)
        siblings = [{"rfilename": path, "size": e["size"]} for path, e in sorted(commit["files"].items())]
        card = commit["files"].get("README.md")
        card_data = front_matter((self.store.blobs / card["sha256"]).read_text()) if card else {}
        lastModified = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit["date"]))
        self.send(
            200,
            {
                "id": repo_id,
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "sha": commit["oid"],
                "private": record["private"],
                "siblings": siblings,
                "cardData": card_data,
                "tags": [],
                "lastModified": lastModified,
                "disabled": False,
                "gated": False,
            },
        )

    def refs(self, query, kind, repo) -> None:
        """The repo's branches, as the Hub lists them (this server keeps no tags or converts;
        pull requests only when `include_prs` asks for them, and it has none)."""
        repo_type, repo_id = self.repo_args(kind, repo)
        record = self.store.repo(repo_type, repo_id)
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid}
            for name, oid in sorted(record["refs"].items())
        ]
        answer = {"branches": branches, "converts": [], "tags": []}
        if query.get("include_prs"):
            answer["pullRequests"] = []
        self.send(200, answer)

    def tree(self, query, kind, repo, rev, path="") -> None:
        repo_type, repo_id = self.repo_args(kind, repo)
        commit = self.store.commit(self.store.repo(repo_type, repo_id), rev)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        self.send(200, self.store.listing(commit["files"], path or "", recursive))

    def paths_info(self, query, kind, repo, rev) -> None:
        repo_type, repo_id = self.repo_args(kind, repo)
        commit = self.store.commit(self.store.repo(repo_type, repo_id), rev)
        form = parse_qs(self.body().decode())
        out = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in commit["files"]:
                out.append(self.store.file_entry(path, commit["files"][path]))
            elif any(p.startswith(path + "/") for p in commit["files"]) or path == "":
                out.append(
                    {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "path": path}
                )
        self.send(200, out)

    # ---- uploads --------------------------------------------------------------------------------
    def preupload(self, query, kind, repo, rev) -> None:
        repo_type, repo_id = self.repo_args(kind, repo)
        files = self.store.commit(self.store.repo(repo_type, repo_id), rev)["files"]
        answer = []
        for item in self.json_body().get("files", []):
            lfs = is_lfs(item["path"], int(item.get("size", 0)))
            existing = files.get(item["path"])
            oid = None if existing is None else existing["sha256"] if lfs else existing["git_oid"]
            answer.append(
                {
                    "path": item["path"],
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": False,
                    "oid": oid,
                }
            )
        self.send(200, {"files": answer, "commitOid": files and None})

    def lfs_batch(self, query, prefix, repo) -> None:
        repo_type = {"": "model", "datasets/": "dataset", "spaces/": "space"}[prefix or ""]
        self.store.repo(repo_type, repo)
        payload = self.json_body()
        if payload.get("operation") != "upload":
            raise HubError(400, "only the upload operation is served")
        objects = []
        for item in payload.get("objects", []):
            answer = {"oid": item["oid"], "size": item["size"]}
            if not self.store.has_blob(item["oid"]):
                href = f"{self.base}/lfs-upload/{item['oid']}?size={item['size']}"
                answer["actions"] = {"upload": {"href": href, "header": {}}}
            objects.append(answer)
        self.send(200, {"transfer": "basic", "objects": objects})

    def lfs_upload(self, query, oid) -> None:
        if self.fault == "die-on-upload":
            os._exit(3)  # a server that dies mid-upload: nothing of this upload is kept
        content = self.body()
        size = int(query.get("size", ["-1"])[0])
        if hashlib.sha256(content).hexdigest() != oid or len(content) != size:
            raise HubError(
                400, f"the uploaded content does not match its pointer (sha256 {oid}, size {size})"
            )
        self.store.put_blob(content)
        self.send(200, {})

    def commit(self, query, kind, repo, rev) -> None:
        if self.fault == "commit-500":
            raise HubError(500, "internal error (a fault the test asked for)")
        repo_type, repo_id = self.repo_args(kind, repo)
        lines = [json.loads(line) for line in self.body().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "a commit starts with its header line")
        header = lines[0]["value"]
        with self.store.lock:
            record = self.store.repo(repo_type, repo_id)
            branch = unquote(rev)
            if branch not in record["refs"]:
                raise HubError(404, f"branch {branch} not found", "RevisionNotFound")
            head = record["refs"][branch]
            if header.get("parentCommit") not in (None, head):
                raise HubError(
                    412, f"parentCommit {header['parentCommit']} is not the head of {branch} ({head})"
                )
            files = dict(record["commits"][head]["files"])
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                path = value.get("path", "")
                if key == "file":
                    content = base64.b64decode(value["content"])
                    files[path] = {
                        "sha256": self.store.put_blob(content),
                        "git_oid": git_blob_oid(content),
                        "size": len(content),
                        "lfs": False,
                    }
                elif key == "lfsFile":
                    if not self.store.has_blob(value["oid"]):
                        raise HubError(400, f"{path}: LFS object {value['oid']} was never uploaded")
                    size = (self.store.blobs / value["oid"]).stat().st_size
                    if value.get("size") not in (None, size):
                        raise HubError(
                            400, f"{path}: size {value['size']} does not match the uploaded {size}"
                        )
                    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{value['oid']}\nsize {size}\n"
                    files[path] = {
                        "sha256": value["oid"],
                        "git_oid": git_blob_oid(pointer.encode()),
                        "size": size,
                        "lfs": True,
                    }
                elif key in ("deletedFile", "deletedFolder"):
                    gone = [p for p in files if p == path or p.startswith(path.rstrip("/") + "/")]
                    if not gone:
                        raise HubError(404, f"{path} does not exist", "EntryNotFound")
                    for p in gone:
                        del files[p]
                else:
                    raise HubError(400, f"unknown commit line {key!r}")
            state = json.dumps([head, header.get("summary"), sorted(files.items())], sort_keys=True)
            oid = hashlib.sha1(f"{state}{time.time_ns()}".encode()).hexdigest()
            record["commits"][oid] = {
                "oid": oid,
                "parent": head,
                "message": header.get("summary", ""),
                "files": files,
                "date": time.time(),
            }
            record["refs"][branch] = oid
            self.store.save()
        url = f"{self.base}/{PREFIXES[repo_type]}{repo_id}/commit/{oid}"
        self.send(200, {"commitUrl": url, "commitOid": oid, "pullRequestUrl": None, "success": True})

    def create_branch(self, query, kind, repo, rev) -> None:
        """A branch at `startingPoint` (a branch or a commit; default: main's head); 409 where it
        exists, as the Hub answers."""
        repo_type, repo_id = self.repo_args(kind, repo)
        starting = json.loads(self.body() or b"{}").get("startingPoint") or "main"
        with self.store.lock:
            record = self.store.repo(repo_type, repo_id)
            branch = unquote(rev)
            if branch in record["refs"]:
                raise HubError(409, f"branch {branch} already exists")
            record["refs"][branch] = self.store.commit(record, starting)["oid"]
            self.store.save()
        self.send(200, {})

    def validate_yaml(self, query) -> None:
        payload = self.json_body()
        try:
            front_matter(payload.get("content", ""))
        except HubError as error:
            return self.send(400, {"errors": [{"message": error.message}]})
        self.send(200, {"warnings": []})

    # ---- downloads ------------------------------------------------------------------------------
    def resolve(self, query, prefix, repo, rev, path) -> None:
        repo_type = {"": "model", "datasets/": "dataset", "spaces/": "space"}[prefix or ""]
        commit = self.store.commit(self.store.repo(repo_type, repo), rev)
        entry = commit["files"].get(path)
        if entry is None:
            raise HubError(404, f"{path} not found in {repo}@{rev}", "EntryNotFound")
        content = (self.store.blobs / entry["sha256"]).read_bytes()
        etag = f'"{entry["sha256"] if entry["lfs"] else entry["git_oid"]}"'
        headers = {"X-Repo-Commit": commit["oid"], "ETag": etag, "Accept-Ranges": "bytes"}
        if entry["lfs"]:
            headers.update({"X-Linked-Etag": etag, "X-Linked-Size": entry["size"]})
        status, body = 200, content
        ranged = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if ranged and content:
            start = int(ranged.group(1)) if ranged.group(1) else len(content) - int(ranged.group(2))
            end = int(ranged.group(2)) if ranged.group(1) and ranged.group(2) else len(content) - 1
            end = min(end, len(content) - 1)
            body, status = content[start : end + 1], 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(content)}"
        headers["Content-Length"] = len(body)
        self.send(status, raw=body, headers=headers)


API = r"/api/(?P<kind>models|datasets|spaces)/" + REPO
ROUTES = [
    ("POST", r"/api/repos/create", Handler.create_repo),
    ("POST", r"/api/validate-yaml", Handler.validate_yaml),
    ("GET", API, Handler.repo_info),
    ("GET", API + "/revision/" + REV, Handler.repo_info),
    ("GET", API + "/refs", Handler.refs),
    ("GET", API + "/tree/" + REV + r"(?:/(?P<path>.+))?", Handler.tree),
    ("POST", API + "/paths-info/" + REV, Handler.paths_info),
    ("POST", API + "/preupload/" + REV, Handler.preupload),
    ("POST", API + "/commit/" + REV, Handler.commit),
    ("POST", API + "/branch/" + REV, Handler.create_branch),
    ("POST", r"/(?P<prefix>datasets/|spaces/)?" + REPO + r"\.git/info/lfs/objects/batch", Handler.lfs_batch),
    ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", Handler.lfs_upload),
    (
        "GET",
        r"/(?P<prefix>datasets/|spaces/)?" + REPO + "/resolve/" + REV + r"/(?P<path>.+)",
        Handler.resolve,
    ),
]


def serve(root: Path, port: int = 0, fault: str | None = None) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"store": Store(root), "fault": fault})
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", required=True, help="folder for the repos and blobs (kept across restarts)")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--fault", choices=["commit-500", "die-on-upload"], help="misbehave on purpose")
    args = parser.parse_args()
    server = serve(Path(args.root), args.port, args.fault)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
