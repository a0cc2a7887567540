"""The command side of the API (standard library only: a client starts fast and needs nothing but Python).

Where a command goes (:func:`connect`):

* ``--server URL`` — HTTP(S) with a bearer token: ``COLOCATE_TOKEN``, else ``~/.config/colocate/token`` (which
  must be the caller's own and 0600: a token others can read is refused); ``COLOCATE_CA_FILE`` names a CA
  bundle for a server whose certificate is not signed by a public CA;
* ``--state DIR`` — the Unix socket next to it (:func:`~.config.socket_path`), where the kernel tells the server
  who calls. When no server answers there, the state directory's owner (the server's user) works on the
  directory directly, as before a server starts; anyone else gets one line saying no server runs.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common.errors import InputError

TOKEN_ENV = "COLOCATE_TOKEN"
CA_ENV = "COLOCATE_CA_FILE"
TIMEOUT_S = 60.0
SOCKET_SUFFIX = ".sock"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with its NUL


def socket_path(state_dir: Path) -> Path:
    """The server's Unix socket: next to the state directory, not in it (the directory is the server's alone,
    0700; the socket is what other users reach). ``/var/lib/colocate/state`` → ``/var/lib/colocate/state.sock``."""
    state = Path(state_dir).absolute()
    return state.with_name(state.name + SOCKET_SUFFIX)


def token_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "colocate" / "token"


def read_token() -> str:
    """The caller's token: ``COLOCATE_TOKEN``, else the token file (the caller's, 0600, else refused)."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    path = token_file()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise InputError(f"no token ({err.strerror or err})", source=path, field="token",
                         valid=f"a token from colocate token create, in this file (0600) or in {TOKEN_ENV}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise InputError(f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}: others could read the token",
                             source=path, field="token", valid="a regular file you own with mode 0600 (chmod 600)")
        text = os.read(fd, 1024).decode(errors="replace").strip()
    finally:
        os.close(fd)
    if not text:
        raise InputError("empty", source=path, field="token", valid="the token colocate token create printed")
    return text


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


class ServerDown(InputError):
    """No server answers where the command looked."""


class ApiClient:
    """Calls to one server: ``call(name, body)`` returns the result or raises the server's one-line refusal."""

    def __init__(self, where: str, *, socket: Path | None = None, url: str | None = None,
                 token: str | None = None) -> None:
        self.where, self.socket, self.url, self.token = where, socket, url, token

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        if self.socket is not None:
            return _UnixConnection(self.socket, TIMEOUT_S), "/v1/"
        parts = urlsplit(self.url or "")
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=os.environ.get(CA_ENV) or None)
            return http.client.HTTPSConnection(parts.netloc, timeout=TIMEOUT_S, context=context), parts.path.rstrip("/") + "/v1/"
        return http.client.HTTPConnection(parts.netloc, timeout=TIMEOUT_S), parts.path.rstrip("/") + "/v1/"

    def call(self, name: str, body: dict[str, Any] | None = None) -> Any:
        conn, prefix = self._connection()
        headers = {"Content-Type": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request("POST", prefix + name, body=json.dumps(body or {}), headers=headers)
            response = conn.getresponse()
            raw = response.read(64 * 2**20)
        except (ConnectionRefusedError, FileNotFoundError) as err:
            raise ServerDown(f"no colocate serve answers ({err.strerror or err})", source=self.where,
                             field="--server" if self.url else "--state",
                             valid="start colocate serve there, or name the running one") from None
        except ssl.SSLError as err:
            raise InputError(f"TLS failed ({err.reason or err})", source=self.where, field="--server",
                             valid=f"the server's https URL; {CA_ENV} for a private CA") from None
        except (OSError, http.client.HTTPException) as err:
            raise InputError(f"the server stopped answering ({err}); a submission may or may not have been queued: "
                             "colocate jobs shows it", source=self.where, field="--server" if self.url else "--state",
                             valid="retry once the server runs") from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise InputError(f"not a colocate server (HTTP {response.status})", source=self.where, field="--server",
                             valid="the URL of colocate serve --api-port")
        if response.status != 200:
            raise InputError(str(answer.get("error", f"HTTP {response.status}"))[:2000])
        return answer.get("ok")


def connect(state: Path | None, server: str | None) -> ApiClient | None:
    """The client for ``--server`` or ``--state``; None where the caller works on the state directory directly
    (no server answers on its socket and the caller owns the directory)."""
    if server is not None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(f"{server[:200]!r} is not an http(s) URL", field="--server",
                             valid="https://HOST:PORT (colocate serve --api-port)")
        return ApiClient(server, url=server, token=read_token())
    if state is None:
        raise InputError("where is the server?", field="--state", valid="--state DIR on its machine, or --server URL")
    path = socket_path(state)
    if _answers(path):
        _check_owner(path, state)
        return ApiClient(str(state), socket=path)
    if _owns(state):
        return None
    raise ServerDown(f"no colocate serve answers on {path}", source=state, field="--state",
                     valid="start colocate serve --state on it (only its owner works on it without a server)")


def _check_owner(path: Path, state: Path) -> None:
    """The socket is the state directory owner's: in a directory others may write (``/tmp``), anyone could have
    put a socket of theirs at that name to receive the submissions meant for the server."""
    try:
        owner, server = os.stat(path).st_uid, os.stat(state).st_uid
    except OSError as err:
        raise InputError(f"cannot look at it ({err.strerror or err})", source=state, field="--state",
                         valid="the state directory of a running colocate serve") from None
    if owner != server:
        raise InputError(f"the socket {path} belongs to uid {owner}, the state directory to uid {server}: refusing "
                         "to talk to it", source=state, field="--state",
                         valid="a socket made by the server itself (ask its operator)")


def _answers(path: Path) -> bool:
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False  # a socket a dead server left
    finally:
        probe.close()


def _owns(state: Path) -> bool:
    """The state directory (or, before it exists, the nearest existing parent) belongs to the caller."""
    for candidate in [Path(state), *Path(state).absolute().parents]:
        try:
            return candidate.stat().st_uid == os.geteuid()
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return False
