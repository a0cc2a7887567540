"""The API's parts without a running server or other users: tokens, the owner columns of an older database, the
client's token file, the TLS rule, and ownership under random sequences of calls (an oracle)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InputError
from scheduler.service.api.identity import Caller
from scheduler.service.api.operations import Operations, Refused
from scheduler.service.api.tokens import TokenStore
from scheduler.service.config import ApiConfig
from scheduler.service.state.store import JobOwner, StateStore


def test_a_token_is_stored_as_a_salted_hash_only_and_checked_expired_and_revoked(tmp_path: Path) -> None:
    tokens = TokenStore(tmp_path)
    token, record = tokens.create("alice", None)
    secret = token.split(".")[1]
    text = (tmp_path / "tokens.json").read_text()
    assert secret not in text and record.hash in text
    assert (tmp_path / "tokens.json").stat().st_mode & 0o777 == 0o600
    assert tokens.check(token)[0] == record
    assert TokenStore(tmp_path).check(token)[0] == record  # read back from the file
    assert tokens.check(token.split(".")[0] + ".wrong")[0] is None
    assert tokens.check("nonsense")[0] is None
    tokens.revoke(record.id)
    assert tokens.check(token) == (None, f"token {record.id} revoked")
    old, old_record = tokens.create("bob", 1.0)
    data = json.loads((tmp_path / "tokens.json").read_text())
    for entry in data["tokens"]:
        if entry["id"] == old_record.id:
            entry["expires"] = entry["created"] - 1
    (tmp_path / "tokens.json").write_text(json.dumps(data))
    assert TokenStore(tmp_path).check(old) == (None, f"token {old_record.id} expired")


def test_a_token_is_hashed_once_and_only_when_the_caller_lets_it(tmp_path: Path) -> None:
    from scheduler.service.api.tokens import UNVERIFIED

    tokens = TokenStore(tmp_path)
    token, record = tokens.create("alice", None)
    fresh = TokenStore(tmp_path)
    assert fresh.check(token, may_hash=False) == (None, UNVERIFIED)  # first sight: needs the slow hash
    assert fresh.check(token.split(".")[0] + ".wrong", may_hash=False) == (None, UNVERIFIED)
    assert fresh.check("nonsense", may_hash=False) == (None, "unknown token")  # refused without a hash
    assert fresh.check(token)[0] == record
    assert fresh.check(token, may_hash=False)[0] == record  # verified once: no hash again


def test_guessing_secrets_over_tcp_is_throttled_per_address_and_never_stalls_the_socket(tmp_path: Path) -> None:
    """Each wrong secret costs a scrypt hash: from one address at most a burst of them is hashed (then 429, no
    hash), on a worker thread, so a local user's call over the Unix socket is answered meanwhile."""
    import urllib.error
    import urllib.request

    from scheduler.service.api.web import NEW_TOKENS_PER_S, ApiServer, listen_tcp
    from scheduler.service.front.remote import ApiClient

    sock = listen_tcp("127.0.0.1", 0, None)
    port = sock.getsockname()[1]
    ops = _ops(tmp_path / "state")
    token, _ = ops.tokens.create(JobOwner.of_process().name, None)
    api = ApiServer(ops, tmp_path / "state.sock", ops.config, tcp=sock)
    api.start()
    stop = threading.Event()
    runner = threading.Thread(target=lambda: [api.inbox.serve_for(0.05) for _ in iter(stop.is_set, True)])
    runner.start()
    statuses: list[int] = []

    def guess(secret: str) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/whoami", data=b"{}", method="POST",
                                         headers={"Authorization": f"Bearer {token.split('.')[0]}.{secret}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as err:
            return err.code

    try:
        guessers = [threading.Thread(target=lambda i=i: statuses.append(guess(f"guess{i}"))) for i in range(12)]
        for thread in guessers:
            thread.start()
        assert ApiClient("test", socket=tmp_path / "state.sock").call("whoami")["via"].startswith("socket")
        for thread in guessers:
            thread.join()
        hashed = statuses.count(401)
        assert statuses.count(429) >= 12 - 2 * NEW_TOKENS_PER_S - 2 and hashed + statuses.count(429) == 12
        assert 1 <= hashed <= 2 * NEW_TOKENS_PER_S + 2  # the burst (and what refilled while it ran)
        assert api.refused["rate"] == statuses.count(429)
        time.sleep(1.5 / NEW_TOKENS_PER_S)  # the bucket refills: the right secret is hashed once, then cached
        client = ApiClient("test", url=f"http://127.0.0.1:{port}", token=token)
        assert all(client.call("whoami")["via"].startswith("token") for _ in range(10))
    finally:
        stop.set()
        runner.join()
        api.stop()
        ops.state.close()


def test_a_database_from_before_owners_gets_its_columns_on_a_writable_open(tmp_path: Path) -> None:
    StateStore(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "state.db")  # the first layout: the jobs table without owners
    conn.execute("ALTER TABLE jobs DROP COLUMN owner")
    conn.execute("ALTER TABLE jobs DROP COLUMN owner_uid")
    conn.execute("INSERT INTO jobs (name, spec, state, submitted_at, seq) VALUES ('old', '{}', 'queued', 1, 1)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="lacks column 'owner'.*start colocate serve on it once"):
        StateStore(tmp_path, create=False, readonly=True)
    store = StateStore(tmp_path, create=False)
    row = store.job("old")
    assert row is not None and row.owner_uid == tmp_path.stat().st_uid and row.owner
    store.close()


def test_a_token_file_others_can_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.service.front.remote import read_token

    monkeypatch.delenv("COLOCATE_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "colocate" / "token"
    path.parent.mkdir()
    path.write_text("abc.def\n")
    path.chmod(0o644)
    with pytest.raises(InputError, match="others could read the token.*chmod 600"):
        read_token()
    path.chmod(0o600)
    assert read_token() == "abc.def"


def test_the_api_refuses_the_network_without_tls() -> None:
    from scheduler.service.api.web import listen_tcp

    with pytest.raises(InputError, match="without TLS"):
        listen_tcp("0.0.0.0", 1, None)


ALICE, BOB, CAROL = (Caller(n, uid, uid, frozenset(g), "test") for n, uid, g in
                     (("alice", 50001, ()), ("bob", 50002, ()), ("carol", 50003, ("ops",))))


def _ops(state: Path, private: bool = False) -> Operations:
    store = StateStore(state)
    return Operations(store, ApiConfig(admins=("@ops",), private_data=private), TokenStore(state))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["submit", "cancel", "logs", "jobs"]), st.sampled_from([ALICE, BOB, CAROL]),
                          st.integers(0, 3)), min_size=1, max_size=12), st.booleans())
def test_only_owners_and_admins_touch_a_job_whatever_the_sequence(calls: list[tuple[str, Caller, int]],
                                                                  private: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ops = _ops(Path(tmp) / "state", private)
        owners: dict[str, Caller] = {}
        for op, caller, n in calls:
            name = f"j{n}"
            if op == "submit":
                spec = {"name": name, "command": "sleep 1", "steps": 1, "batch_size": 1}
                if name in owners:
                    with pytest.raises(InputError, match="already submitted"):
                        ops.call("submit", caller, {"jobs": [{"spec": spec}]})
                else:
                    assert ops.call("submit", caller, {"jobs": [{"spec": spec}]}) == {"names": [name]}
                    owners[name] = caller
                continue
            if op == "jobs":  # answered from one snapshot per state of the store: never one from before a change
                from scheduler.service.front.views import jobs_snapshot

                fresh = {j["name"]: j for j in jobs_snapshot(ops.state)["jobs"]}
                seen = {j["name"]: j for j in ops.call("jobs", CAROL, {})["jobs"]}
                assert seen == fresh and set(seen) == set(owners)
                continue
            allowed = name in owners and (owners[name] == caller or caller is CAROL)
            before = [e for e in ops.state.events() if e["kind"] == "refused"]
            if allowed:
                ops.call(op, caller, {"name": name})
                if op == "cancel":
                    row = ops.state.job(name)
                    assert row is not None and row.cancel_requested
            else:
                with pytest.raises(InputError) as err:
                    ops.call(op, caller, {"name": name})
                after = [e for e in ops.state.events() if e["kind"] == "refused"]
                assert len(after) == len(before) + (name in owners)  # a refusal on a real job is recorded
                assert isinstance(err.value, Refused) == (name in owners)
        for name, owner in owners.items():
            row = ops.state.job(name)
            assert row is not None and (row.owner, row.owner_uid) == (owner.name, owner.uid)
            if private:
                seen = {j["name"] for j in ops.call("jobs", BOB, {})["jobs"]}
                assert (name in seen) == (owner is BOB)
        ops.state.close()


def test_https_with_a_token_from_another_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API over TLS on loopback, served here without a round loop (a thread runs its calls)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a self-signed certificate")
    from scheduler.service.api.web import ApiServer, listen_tcp, tls_context
    from scheduler.service.front.remote import ApiClient

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    tls = tls_context(cert, key)
    sock = listen_tcp("127.0.0.1", 0, tls)
    port = sock.getsockname()[1]
    ops = _ops(tmp_path / "state")
    user = JobOwner.of_process().name
    token, _ = ops.tokens.create(user, None)
    api = ApiServer(ops, tmp_path / "state.sock", ops.config, tcp=sock, tls=tls)
    api.start()
    stop = threading.Event()
    runner = threading.Thread(target=lambda: [api.inbox.serve_for(0.05) for _ in iter(stop.is_set, True)])
    runner.start()
    try:
        monkeypatch.setenv("COLOCATE_CA_FILE", str(cert))
        answer: Any = ApiClient("test", url=f"https://127.0.0.1:{port}", token=token).call("whoami")
        assert answer["user"] == user and answer["via"].startswith("token ")
        with pytest.raises(InputError, match="not authenticated"):
            ApiClient("test", url=f"https://127.0.0.1:{port}", token=token + "x").call("whoami")
        with pytest.raises(InputError):  # plain HTTP to the TLS port
            ApiClient("test", url=f"http://127.0.0.1:{port}", token=token).call("whoami")
        assert ApiClient("test", socket=tmp_path / "state.sock").call("whoami")["via"].startswith("socket")
    finally:
        stop.set()
        runner.join()
        api.stop()
        ops.state.close()
    assert not os.path.exists(tmp_path / "state.sock")


def test_a_socket_not_made_by_the_state_directorys_owner_is_not_trusted(tmp_path: Path) -> None:
    """Someone else's socket at the server's name (in a directory others may write) never gets a submission."""
    import socket

    from scheduler.service.front.remote import connect

    state = tmp_path / "state"
    state.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "state.sock"))
    listener.listen(1)
    try:
        assert connect(state, None) is not None  # the same owner: trusted
        if os.geteuid() != 0:
            pytest.skip("needs root to give the directory to another uid (CI runs as root)")
        os.chown(state, 12345, -1)
        with pytest.raises(InputError, match="belongs to uid 0, the state directory to uid 12345"):
            connect(state, None)
    finally:
        listener.close()
