"""The API's knobs (a nested part of ``ServeConfig``: ``--admin``, ``--private-data``, limits) and where it lives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.bounds import check_number
from common.errors import InputError
from common.names import is_safe_name
from common.options import option as _option

SOCKET_SUFFIX = ".sock"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with its NUL


def socket_path(state_dir: Path) -> Path:
    """The server's Unix socket: next to the state directory, not in it (the directory is the server's alone,
    0700; the socket is what other users reach). ``/var/lib/colocate/state`` → ``/var/lib/colocate/state.sock``."""
    state = Path(state_dir).absolute()
    return state.with_name(state.name + SOCKET_SUFFIX)


@dataclass(frozen=True)
class ApiConfig:
    """Who may do what through the API, and the limits every request meets."""

    admins: tuple[str, ...] = _option((), "A user (NAME) or a group (@NAME) who may cancel and read every job and "
                                          "manage tokens; repeatable. Root and the server's user always may.",
                                      flag="--admin", metavar="USER|@GROUP")
    private_data: bool = _option(False, "Hide other users' jobs from non-admins (as Slurm's PrivateData=jobs).")
    max_body_bytes: int = _option(1 << 20, "Largest request body, bytes.", experimental=True)
    request_timeout_s: float = _option(30.0, "A request not answered in this long gets 503, seconds.",
                                       experimental=True)
    rate_per_s: float = _option(50.0, "Requests per second one caller may make (a burst of twice that).",
                                experimental=True)

    def __post_init__(self) -> None:
        for name in self.admins:
            if not is_safe_name(name.removeprefix("@")):
                raise InputError(f"{name!r} is not a user or group name", field="admins",
                                 valid="USER or @GROUP (letters, digits, '.', '_', '-')")
        check_number(self.max_body_bytes, field="max_body_bytes", low=1024, high=1 << 30, integer=True)
        check_number(self.request_timeout_s, field="request_timeout_s", low=0.1, high=3600)
        check_number(self.rate_per_s, field="rate_per_s", low=0.1, high=1e6)
