"""Many users, one server, tried as an attacker would (docs/multi-user.md, docs/threat-model.md).

The server runs as root (as CI does); alice, bob and carol (an admin through a group) are Unix users made for
this session and deleted after it. Each user's command is the real CLI (``colocate.cli.main``) in a child forked
from this process and switched to that user's uid, gid and groups: the kernel then names them to the server
(peer credentials), and the child needs no interpreter or files of its own (CI's checkout and venv may be
closed to other users)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from serve_helpers import ServeProcess, kill_groups, wait_until, write_cluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                 reason="needs root and useradd to create the users alice, bob and carol (CI runs as root)")]


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, str]]:
    tag = secrets.token_hex(3)
    names = {who: f"cl{who[:3]}{tag}" for who in ("alice", "bob", "carol")}
    group = f"clops{tag}"
    made: list[str] = []
    try:
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        for who, name in names.items():
            extra = ["-G", group] if who == "carol" else []
            subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", *extra, name], check=True,
                           capture_output=True)
            made.append(name)
        yield {**names, "group": group}
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


def warm(*argv: str) -> None:
    """Run a command here, as root, so that every module it imports lazily (its error path's too) is loaded before
    a child switches user: the children need no file of CI's checkout or interpreter (under /root, or a 0700
    temporary directory)."""
    from colocate import cli

    saved = sys.argv
    sys.argv = ["colocate", *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main()
    except SystemExit:
        pass
    finally:
        sys.argv = saved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_user(user: str | None, *argv: str, cwd: Path | None = None) -> tuple[int, str]:
    """``colocate ARGV`` as ``user`` (None: root) in a forked child: (exit status, stdout and stderr)."""
    from colocate import cli

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            if user is not None:
                entry = pwd.getpwnam(user)
                os.setgroups(os.getgrouplist(user, entry.pw_gid))
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
            os.environ["HOME"] = "/nonexistent"
            os.environ.pop("COLOCATE_TOKEN", None)
            if cwd is not None:
                os.chdir(cwd)
            sys.stdout, sys.stderr = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True), \
                io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
            sys.argv = ["colocate", *argv]
            try:
                cli.main()
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
        except BaseException as err:  # noqa: BLE001 - reported through the pipe
            os.write(2, f"child failed: {type(err).__name__}: {err}\n".encode())
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def site(users: dict[str, str]) -> Iterator[dict[str, Any]]:
    """A root server on a state directory under a world-traversable temporary directory, with --api-port, running
    each job as its owner (``--users multi``: a root server's default runs root's jobs only)."""
    base = Path(tempfile.mkdtemp(prefix="colocate-users-"))
    base.chmod(0o755)
    state, port = base / "state", free_port()
    cluster = write_cluster(base / "cluster.yaml", {"v100": 1})
    server = ServeProcess(state, cluster, "--backend", "local", "--round-s", "1", "--api-port", str(port),
                          "--admin", f"@{users['group']}", "--private-data", "--users", "multi",
                          log=base / "serve.log").start()
    try:
        wait_until(lambda: (base / "state.sock").exists() and as_user(None, "jobs", "--state", str(state),
                                                                        "--json")[0] == 0, 60, "the server's socket")
        import encodings.idna  # noqa: E401, F401
        site = {"state": state, "base": base, "port": port, "server": server, **users}
        for argv in (("jobs", "--json"), ("jobs",), ("cancel", "none"), ("logs", "none"), ("token", "list"),
                     ("submit", str(job_file(site, "root-warm"))), ("submit", str(base / "missing.yaml"))):
            warm(*argv, "--state", str(state))
        yield site
    finally:
        server.stop()
        kill_groups(state)
        shutil.rmtree(base, ignore_errors=True)


def job_file(site: dict[str, Any], name: str) -> Path:
    path = site["base"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "command": "sleep 600", "steps": 10, "batch_size": 1}))
    path.chmod(0o644)
    return path


def submit_as(site: dict[str, Any], who: str | None, name: str) -> tuple[int, str]:
    return as_user(site[who] if who else None, "submit", "--state", str(site["state"]), str(job_file(site, name)))


def root_jobs(site: dict[str, Any]) -> dict[str, dict[str, Any]]:
    code, out = as_user(None, "jobs", "--state", str(site["state"]), "--json")
    assert code == 0, out
    return {j["name"]: j for j in json.loads(out)["jobs"]}


def events(site: dict[str, Any]) -> list[dict[str, Any]]:
    from scheduler.service.state.store import StateStore

    store = StateStore(site["state"], create=False, readonly=True)  # root, read-only: the server writes
    try:
        return store.events()
    finally:
        store.close()


def test_alice_submits_through_the_socket_and_owns_her_job(site: dict[str, Any]) -> None:
    code, out = submit_as(site, "alice", "a-owned")
    assert code == 0 and out.strip() == "a-owned", out
    job = root_jobs(site)["a-owned"]
    assert (job["owner"], job["owner_uid"]) == (site["alice"], pwd.getpwnam(site["alice"]).pw_uid)
    assert any(e["job"] == "a-owned" and e["kind"] == "submitted" and site["alice"] in e["detail"] for e in events(site))


def test_bob_cannot_cancel_read_or_write_into_alices_job(site: dict[str, Any]) -> None:
    assert submit_as(site, "alice", "a-private")[0] == 0
    for argv in (("cancel", "a-private"), ("logs", "a-private")):
        code, out = as_user(site["bob"], *argv, "--state", str(site["state"]))
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert "a-private" in out and "Traceback" not in out, out
    assert root_jobs(site)["a-private"]["state"] in ("queued", "running")
    refused = [e for e in events(site) if e["kind"] == "refused" and e["job"] == "a-private"]
    assert refused and all(site["bob"] in e["detail"] for e in refused), refused
    # the files: the state directory is the server's; owners only pass through it to their own job directories
    assert (site["state"].stat().st_mode & 0o777) == 0o711
    assert all((site["state"] / name).stat().st_mode & 0o077 == 0 for name in ("state.db", "state.db-wal")
               if (site["state"] / name).exists())
    code, out = as_user(site["bob"], "jobs", "--state", str(site["state"]), "--json")
    assert code == 0 and "a-private" not in out  # --private-data: bob does not see alice's jobs
    pid = os.fork()
    if pid == 0:
        entry = pwd.getpwnam(site["bob"])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
        try:  # a forked copy of the test: it must end here, whatever happens
            for attempt in (lambda: (site["state"] / "jobs" / "a-private" / "evil").write_text("x"),
                            lambda: open(site["state"] / "state.db", "rb").close(),
                            lambda: open(site["state"] / "state.db-wal", "rb").close(),
                            lambda: os.listdir(site["state"]), lambda: os.listdir(site["state"] / "jobs")):
                try:
                    attempt()
                    os._exit(1)
                except OSError:  # refused (or, for a job not started yet, no directory to write into)
                    pass
            os._exit(0)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "bob could list, read or write into the state directory"


def test_owners_and_admins_may_cancel(site: dict[str, Any]) -> None:
    assert submit_as(site, "alice", "a-mine")[0] == 0
    assert submit_as(site, "bob", "b-theirs")[0] == 0
    code, out = as_user(site["alice"], "cancel", "a-mine", "--state", str(site["state"]))
    assert code == 0, out
    code, out = as_user(site["carol"], "cancel", "b-theirs", "--state", str(site["state"]))  # @group admin
    assert code == 0, out
    code, out = as_user(site["carol"], "jobs", "--state", str(site["state"]), "--json")
    assert code == 0 and "a-mine" in out and "b-theirs" in out  # an admin sees every job
    wait_until(lambda: {root_jobs(site)[n]["state"] for n in ("a-mine", "b-theirs")} == {"cancelled"}, 60,
               "both cancellations")


def _http(site: dict[str, Any], path: str, body: bytes = b"{}", token: str | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", site["port"], timeout=60)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def _token(site: dict[str, Any], user: str, *extra: str) -> str:
    code, out = as_user(None, "token", "create", user, "--state", str(site["state"]), *extra)
    assert code == 0, out
    return out.splitlines()[0].strip()


def test_http_without_a_good_token_gets_401_and_changes_nothing(site: dict[str, Any]) -> None:
    good = _token(site, site["alice"])
    revoked = _token(site, site["alice"])
    expiring = _token(site, site["alice"], "--expires", "1")
    code, out = as_user(None, "token", "revoke", revoked.split(".")[0], "--state", str(site["state"]))
    assert code == 0, out
    code, out = as_user(site["alice"], "token", "create", site["alice"], "--state", str(site["state"]))
    assert code == 2, out  # alice is no admin
    time.sleep(1.5)  # the expiring token's second passes
    before = set(root_jobs(site))
    body = json.dumps({"jobs": [{"spec": {"name": "h-evil", "command": "sleep 1", "steps": 1, "batch_size": 1}}]})
    for token in (None, "nonsense", good.split(".")[0] + ".wrong", revoked, expiring):
        status, answer = _http(site, "/v1/submit", body.encode(), token)
        assert status == 401, (token and token[:8], status, answer)
        assert good.split(".")[1] not in json.dumps(answer)
    assert set(root_jobs(site)) == before
    log = (site["base"] / "serve.log").read_text()
    assert good.split(".")[1] not in log and revoked.split(".")[1] not in log  # no secret is logged
    status, answer = _http(site, "/v1/submit", body.replace("h-evil", "h-good").encode(), good)
    assert status == 200, answer
    assert root_jobs(site)["h-good"]["owner"] == site["alice"]


def test_hostile_clients_do_not_stop_rounds(site: dict[str, Any]) -> None:
    def rounds() -> int:
        code, out = as_user(None, "jobs", "--state", str(site["state"]), "--json")
        return int(json.loads(out)["rounds"]) if code == 0 else -1

    start = rounds()
    slow = socket.create_connection(("127.0.0.1", site["port"]))
    slow.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")  # and never the rest
    big = socket.socket(socket.AF_UNIX)  # identified by the kernel: the body's size is what is refused
    big.connect(str(site["base"] / "state.sock"))
    big.sendall(b"POST /v1/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
    with contextlib.suppress(OSError):
        big.sendall(b"x" * (8 << 20))  # the answer (413) may close the connection before all is sent
    assert b" 413 " in big.recv(200)
    deep = socket.socket(socket.AF_UNIX)
    deep.connect(str(site["base"] / "state.sock"))
    nested = b"[" * 100_000 + b"]" * 100_000
    deep.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(nested) + nested)
    assert b" 400 " in deep.recv(200)
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # 5 s of requests, as fast as one client goes
        status, _ = _http(site, "/v1/whoami")
        statuses[status] = statuses.get(status, 0) + 1
    assert set(statuses) <= {401, 429} and statuses.get(429, 0) > 0, statuses
    wait_until(lambda: rounds() >= start + 3, 60, "three more rounds while hostile clients were connected")
    slow.close(), big.close(), deep.close()


def test_kill_9_with_requests_in_flight_loses_no_acknowledged_submission(users: dict[str, str]) -> None:
    base = Path(tempfile.mkdtemp(prefix="colocate-kill-"))
    state = base / "state"
    cluster = write_cluster(base / "cluster.yaml", {"v100": 1})
    server = ServeProcess(state, cluster, "--backend", "local", "--round-s", "1", log=base / "serve.log").start()
    acknowledged: list[str] = []
    try:
        wait_until(lambda: (base / "state.sock").exists(), 60, "the server's socket", interval_s=0.2)
        from scheduler.service.front.remote import ApiClient

        client = ApiClient(str(state), socket=base / "state.sock")

        def submit_many(prefix: str) -> None:
            for i in range(10_000):
                name = f"{prefix}-{i}"
                spec = {"name": name, "command": "sleep 1", "steps": 1, "batch_size": 1}
                try:
                    client.call("submit", {"jobs": [{"spec": spec}]})
                except Exception:  # noqa: BLE001 - the server died: this one was not acknowledged
                    return
                acknowledged.append(name)

        threads = [threading.Thread(target=submit_many, args=(p,)) for p in ("k1", "k2")]
        for t in threads:
            t.start()
        wait_until(lambda: len(acknowledged) >= 20, 60, "submissions acknowledged", interval_s=0.1)
        server.kill9()
        for t in threads:
            t.join(timeout=120)
        from scheduler.service.state.store import StateStore

        store = StateStore(state, create=False, readonly=True)
        stored = {r.name for r in store.jobs()}
        store.close()
        assert set(acknowledged) <= stored, sorted(set(acknowledged) - stored)[:5]
    finally:
        server.stop()
        kill_groups(state)
        shutil.rmtree(base, ignore_errors=True)



def _uids_of_sleepers(marker: str) -> set[int]:
    """The real uids of the live processes whose command line is ``sleep <marker>``."""
    uids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                uids.add(int((entry / "status").read_text().split("\nUid:")[1].split()[0]))
        except (OSError, IndexError):
            continue
    return uids


def test_alices_job_submitted_through_the_socket_runs_as_alice(site: dict[str, Any]) -> None:
    """End to end: the owner the socket's peer credentials named is the uid the job's process runs with (serve
    ``--users multi`` as root), never root's."""
    marker = f"{600 + os.getpid() % 97}.{time.time_ns() % 10**9}"
    path = site["base"] / "a-runs.yaml"
    path.write_text(yaml.safe_dump({"name": "a-runs", "command": f"sleep {marker}", "steps": 10, "batch_size": 1}))
    path.chmod(0o644)
    for name, row in root_jobs(site).items():  # the one GPU: earlier tests' jobs make way
        if row["state"] in ("queued", "running"):
            assert as_user(None, "cancel", name, "--state", str(site["state"]))[0] == 0
    code, out = as_user(site["alice"], "submit", "--state", str(site["state"]), str(path))
    assert code == 0, out
    wait_until(lambda: bool(_uids_of_sleepers(marker)), 120, "alice's job to run")
    assert _uids_of_sleepers(marker) == {pwd.getpwnam(site["alice"]).pw_uid}
    assert as_user(site["alice"], "cancel", "a-runs", "--state", str(site["state"]))[0] == 0
