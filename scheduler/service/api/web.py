"""The API's web server: aiohttp in its own thread, on a Unix socket (peer credentials) and optionally on TCP
(bearer tokens, TLS), handing each call to the round loop's thread (:class:`Inbox`).

Limits, each answered at once with one line and counted (``colocate_api_refused_total{reason}``):

* a body larger than ``max_body_bytes`` (413; a declared length is refused before a byte is read);
* JSON that is not an object, nests deeper than :data:`common.safe_load.MAX_DEPTH` or is not JSON (400);
* more than ``rate_per_s`` calls a second from one caller, a burst of twice that (429; a caller is a uid, or the
  peer address before a token names it);
* more than :data:`NEW_TOKENS_PER_S` tokens a second that need their secret hashed (a token seen for the first
  time, or a wrong secret) from one peer address (429): each costs a scrypt hash, which runs on a worker thread,
  never on the event loop, so guessing secrets neither stalls other callers nor buys many guesses;
* a call not answered within ``request_timeout_s`` (503; a call still waiting then is dropped, never run late);
* no token, or a wrong, expired or revoked one over TCP (401).

The event loop only parses and checks; nothing it does waits on the database, so a slow or hostile client
never holds a round up, and a round never blocks the event loop (a call waits in the inbox).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import queue
import socket
import ssl
import stat
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.untrusted import printable
from scheduler.service.api.identity import Caller, from_peer, from_user, peer_credentials
from scheduler.service.api.operations import Operations, Refused
from scheduler.service.api.tokens import UNVERIFIED
from scheduler.service.config import ApiConfig
from scheduler.service.front.remote import MAX_SOCKET_PATH

LOOPBACK = ("127.0.0.1", "::1", "localhost")
NEW_TOKENS_PER_S = 2.0  # scrypt hashes a second one peer address may cause (a bearer's later calls hit the cache)
SLOW_DOWN = "too many new or wrong tokens from this address"  # _caller's answer that is a 429, not a 401


class Inbox:
    """Calls waiting for the round loop's thread, which runs them between rounds (:meth:`serve_for`)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = queue.SimpleQueue()

    def put(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((future, call))
        return future

    def serve_for(self, seconds: float) -> None:
        """Run the calls that arrive within ``seconds`` (the round loop's wait between rounds)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                future, call = self._calls.get(timeout=left)
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue  # its caller gave up (request timeout): not run late
            try:
                future.set_result(call())
            except BaseException as err:  # noqa: BLE001 - handed to the waiting request
                future.set_exception(err)

    def close(self) -> None:
        """The server stops: calls still waiting fail (their callers get 503; nothing was done)."""
        while True:
            try:
                future, _ = self._calls.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(ConnectionAbortedError("the server is stopping"))


class RateLimit:
    """A token bucket per caller: ``rate`` a second, bursts of ``2 × rate``."""

    def __init__(self, rate: float) -> None:
        self.rate, self.burst = rate, max(2 * rate, 1.0)
        self._buckets: dict[Any, tuple[float, float]] = {}

    def allow(self, key: Any) -> bool:
        now = time.monotonic()
        level, then = self._buckets.get(key, (self.burst, now))
        level = min(self.burst, level + (now - then) * self.rate)
        if len(self._buckets) > 10_000:  # many callers (addresses): forget the idle ones
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60}
        self._buckets[key] = (level - 1, now) if level >= 1 else (level, now)
        return level >= 1


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The server's TLS context from ``--tls-cert``/``--tls-key`` (both or neither), checked before anything runs."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise InputError("--tls-cert and --tls-key go together", field="--tls-cert" if cert is None else "--tls-key",
                         valid="both files (PEM), or neither")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise InputError(f"cannot load the certificate and key ({err})", source=cert, field="--tls-cert",
                         valid="a PEM certificate and its private key") from None
    return context


def listen_tcp(host: str, port: int, tls: ssl.SSLContext | None) -> socket.socket:
    """The API's TCP socket, bound now (a busy port is refused before the state directory is touched); beyond
    loopback only with TLS: a token sent in clear over a network is anyone's who listens."""
    if host not in LOOPBACK and tls is None:
        raise InputError(f"refusing to serve the API on {host} without TLS: bearer tokens would cross the network "
                         "in clear", field="--api-host", valid="--tls-cert and --tls-key, or --api-host 127.0.0.1")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
    except OSError as err:
        raise InputError(f"cannot listen on {host}:{port} ({err.strerror or err})", field="--api-port",
                         valid="a free TCP port") from None
    sock.setblocking(False)
    return sock


def _unlink_stale(path: Path) -> None:
    """Remove a socket a dead server left (this server holds the state's lock: no live one uses it)."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise InputError(f"the API socket path is longer than {MAX_SOCKET_PATH} bytes", source=path, field="--state",
                         valid="a state directory with a shorter path")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise InputError("exists and is not a socket", source=path, field="--state",
                         valid="move it aside: colocate serve puts its API socket there")
    try:
        os.unlink(path)
    except OSError as err:  # another user's socket in a sticky directory: not ours to remove
        raise InputError(f"a socket this server cannot remove ({err.strerror or err})", source=path, field="--state",
                         valid="a state directory whose parent only its server's user may write") from None


class ApiServer:
    """The API's thread: its event loop, the sites it listens on, the calls it hands to the round loop."""

    def __init__(self, ops: Operations, socket_path: Path, config: ApiConfig, *, tcp: socket.socket | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.ops, self.socket_path, self.config, self.tcp, self.tls = ops, socket_path, config, tcp, tls
        self.inbox = Inbox()
        self.refused: Counter[str] = Counter()  # reason -> count (the metric's source)
        self.on_refused: Callable[[str], None] = lambda reason: None
        self._limit = RateLimit(config.rate_per_s)
        self._hashes = RateLimit(NEW_TOKENS_PER_S)  # per peer address: see NEW_TOKENS_PER_S
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._halt: asyncio.Event | None = None  # made on the loop; set to stop it
        self._last_answer: tuple[Any, str] | None = None  # (an answer, its JSON): see _encoded
        ops.on_refused = lambda what, caller, why: self._count("forbidden", f"refused {what} by {caller}: {why}")

    # -- lifetime ----------------------------------------------------------------------------------------
    def start(self) -> None:
        _unlink_stale(self.socket_path)
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="colocate-api", daemon=True)
        self._thread.start()
        ready.result(timeout=30)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._halt is not None:
            self._loop.call_soon_threadsafe(self._halt.set)
            self._thread.join(timeout=10)
        self.inbox.close()
        try:
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)
        except OSError:
            pass

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main(ready))
        except BaseException as err:  # noqa: BLE001 - told to the starting thread
            if not ready.done():
                ready.set_exception(err)
        finally:
            self._loop.close()

    async def _main(self, ready: concurrent.futures.Future[None]) -> None:
        from aiohttp import web

        self._halt = halt = asyncio.Event()
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[])
        app.router.add_post("/v1/{call}", self._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            await web.UnixSite(runner, str(self.socket_path)).start()
            os.chmod(self.socket_path, 0o666)  # every local user may connect; the kernel says who they are
            if self.tcp is not None:
                await web.SockSite(runner, self.tcp, ssl_context=self.tls).start()
            ready.set_result(None)
            await halt.wait()
        finally:
            await runner.cleanup()

    # -- one request -------------------------------------------------------------------------------------
    def _count(self, reason: str, line: str) -> None:
        self.refused[reason] += 1
        self.on_refused(reason)
        print(printable(f"api: {line}", 500), file=sys.stderr, flush=True)

    async def _caller(self, request: Any, peer: str) -> tuple[Caller | None, str]:
        """The caller: the kernel's peer credentials on the Unix socket, a live token's user over TCP (a token's
        first check, or a wrong secret, hashes on a worker thread, at most :data:`NEW_TOKENS_PER_S` a peer)."""
        sock = request.transport.get_extra_info("socket") if request.transport is not None else None
        if sock is not None and sock.family == socket.AF_UNIX:
            return from_peer(*peer_credentials(sock)), ""
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or len(header) > 512:
            return None, "no bearer token"
        token = header[7:].strip()
        record, why = self.ops.tokens.check(token, may_hash=False)
        if why == UNVERIFIED:
            if not self._hashes.allow(peer):
                return None, SLOW_DOWN
            record, why = await asyncio.to_thread(self.ops.tokens.check, token)
        if record is None:
            return None, why
        caller = from_user(record.user, f"token {record.id}")
        return (caller, "") if caller is not None else (None, f"token {record.id}: user {record.user} is gone")

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        def answer(status: int, reason: str, line: str) -> Any:
            if status != 200:
                self._count(reason, f"{status} {request.path} from {who}: {line}")
            return web.json_response({"error": line} if status != 200 else line, status=status)

        peer = request.remote or "local"
        caller, why = await self._caller(request, peer)
        who = str(caller) if caller is not None else peer
        if why == SLOW_DOWN:
            return answer(429, "rate", f"{SLOW_DOWN} (at most {NEW_TOKENS_PER_S:g} a second); slow down")
        if not self._limit.allow(caller.uid if caller is not None else peer):
            return answer(429, "rate", f"more than {self.config.rate_per_s:g} calls a second; slow down")
        if caller is None:
            return answer(401, "authentication", f"not authenticated ({why})")
        if (request.content_length or 0) > self.config.max_body_bytes:
            return answer(413, "body", f"a body of {request.content_length} bytes; at most {self.config.max_body_bytes}")
        try:
            try:
                body = await self._body(request)
            except asyncio.TimeoutError:
                return answer(408, "timeout", f"the body took longer than {self.config.request_timeout_s:g} s")
            future = self.inbox.put(lambda: self.ops.call(request.match_info["call"], caller, body))
            try:
                result = await asyncio.wait_for(asyncio.wrap_future(future), self.config.request_timeout_s)
            except (asyncio.TimeoutError, ConnectionAbortedError):
                future.cancel()
                return answer(503, "timeout", "the server did not answer in time (busy with a round, or stopping); "
                                              "nothing was done unless colocate jobs shows it")
        except Refused as err:  # counted and logged by the call, with its event
            return web.json_response({"error": str(err)}, status=403)
        except InputError as err:
            return answer(400, "input", str(err))
        except web.HTTPRequestEntityTooLarge:
            return answer(413, "body", f"a body larger than {self.config.max_body_bytes} bytes")
        return web.Response(text=self._encoded(result), content_type="application/json")

    def _encoded(self, result: Any) -> str:
        """``{"ok": result}`` as JSON; the same answer object as the last one (a `jobs` snapshot many callers poll
        between two rounds) is encoded once."""
        if self._last_answer is not None and self._last_answer[0] is result:
            return self._last_answer[1]
        text = json.dumps({"ok": result})
        self._last_answer = (result, text)  # holds the object: its id cannot be reused while it is compared
        return text

    async def _body(self, request: Any) -> dict[str, Any]:
        from common.safe_load import parse_json

        raw = await asyncio.wait_for(request.read(), self.config.request_timeout_s)
        if not raw:
            return {}
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("the body is not UTF-8", field="body", valid="a JSON object") from None
        body = parse_json(text, source="request", field="body", valid="a JSON object")
        if not isinstance(body, dict):
            raise InputError("the body is not a JSON object", field="body", valid="a JSON object")
        return body
