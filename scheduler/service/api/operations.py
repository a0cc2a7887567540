"""What each API call does, with who may do it. Run on the round loop's thread, between rounds (:mod:`.web`
hands each call over), so the server's one connection stays the one writer of ``state.db``.

Every call gets the :class:`~.identity.Caller` and the request's JSON body and returns a JSON-able dict; bad input
is an :class:`InputError` (400), a call the caller may not make a :class:`Refused` (403). A state-changing call
(submit, cancel, token create and revoke) is an event naming its caller; so is every refused call on a job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError
from common.names import is_safe_name, shown
from scheduler.service.api.identity import Caller, is_admin, may_touch
from scheduler.service.api.tokens import TokenStore
from scheduler.service.config import ApiConfig
from scheduler.service.state.store import JobRow, StateStore

MAX_JOBS_PER_SUBMIT = 1000
MAX_LOG_BYTES = 64 * 1024
JOB_HIDDEN = "no job named {name!r} that you may see"


class Refused(InputError):
    """A call its caller may not make (403): not the job's owner, not an admin."""


@dataclass
class Operations:
    """The calls of one server: its store, its configuration, its tokens, and a count of refusals."""

    state: StateStore
    config: ApiConfig
    tokens: TokenStore
    on_refused: Callable[[str, Caller | None, str], None] = lambda kind, caller, why: None
    # why a job of this uid could never run here (serve's --users rule, common.owners.may_run_as), None if it can
    run_refusal: Callable[[int], str | None] = lambda uid: None
    _snapshot: tuple[int, dict[str, Any]] | None = None  # (the store's changes, what `jobs` answered then)
    _views: dict[int | None, dict[str, Any]] = field(default_factory=dict)  # that answer per viewer (None: all)

    def call(self, name: str, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        method = getattr(self, f"op_{name.replace('-', '_')}", None)
        if method is None:
            raise InputError(f"no call {shown(name)}", field="path", valid=", ".join(CALLS))
        result: dict[str, Any] = method(caller, body)
        return result

    # -- helpers -----------------------------------------------------------------------------------------
    def _admin(self, caller: Caller) -> bool:
        return is_admin(caller, self.config.admins)

    def _refuse(self, caller: Caller, what: str, job: str | None, why: str) -> Refused:
        with self.state.transaction() as db:
            db.event(job, "refused", f"{what} by {caller}: {why}")
        self.on_refused(what, caller, why)
        return Refused(f"{what} refused: {why}", field="caller", valid="the job's owner or an admin (serve --admin)")

    def _own_job(self, caller: Caller, body: dict[str, Any], what: str) -> JobRow:
        """The job ``body['name']`` names, when ``caller`` may act on it (else :class:`Refused`)."""
        name = body.get("name")
        if not is_safe_name(name):
            raise InputError(f"{shown(name)} is not a job name", field="name", valid="a job name colocate submit printed")
        row = self.state.job(name)
        if row is None:
            raise InputError(JOB_HIDDEN.format(name=name), field="NAME", valid="colocate jobs lists the jobs you may see")
        if not may_touch(caller, row.owner_uid, self.config.admins):
            refused = self._refuse(caller, what, name, f"{name} belongs to {row.owner or 'the server'}, not {caller.name}")
            if self.config.private_data:  # refused and recorded alike, but not told that the job exists
                raise Refused(JOB_HIDDEN.format(name=name), field="NAME", valid="colocate jobs lists the jobs you may see")
            raise refused
        return row

    # -- the calls ---------------------------------------------------------------------------------------
    def op_whoami(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return {"user": caller.name, "uid": caller.uid, "via": caller.via, "admin": self._admin(caller)}

    def op_submit(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        from scheduler.service.admission import check_feasible, known_cluster
        from scheduler.service.jobs.jobspec import job_from_dict

        refusal = self.run_refusal(caller.uid)
        if refusal is not None:  # refused at once, not when its group would start: nothing is queued
            raise self._refuse(caller, "submit", None, refusal)
        jobs = body.get("jobs")
        if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_JOBS_PER_SUBMIT:
            raise InputError("'jobs' is not a list of jobs", field="jobs", valid=f"1 to {MAX_JOBS_PER_SUBMIT} jobs")
        cluster = known_cluster(self.state)
        specs = []
        for i, job in enumerate(jobs):
            source = job.get("source") if isinstance(job, dict) else None
            source = source[:200] if isinstance(source, str) else f"job {i + 1}"
            data = job.get("spec") if isinstance(job, dict) else None
            if isinstance(data, dict) and data.get("gpu_types") == []:  # JobSpec.to_dict's "any type"
                data = {k: v for k, v in data.items() if k != "gpu_types"}
            spec = job_from_dict(data, source=source,
                                 gpu_types=tuple(cluster) if cluster is not None else None)
            check_feasible(spec, cluster, source=source)
            specs.append((spec, source))
        return {"names": self.state.submit_many(specs, caller.owner)}

    def op_cancel(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        row = self._own_job(caller, body, "cancel")
        return {"name": row.name, "previous": self.state.request_cancel(row.name, by=caller.owner)}

    def op_logs(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        from common.untrusted import UntrustedFile, read_regular
        from scheduler.executor.supervise import LOG_FILE
        from scheduler.service.groups import job_dir

        row = self._own_job(caller, body, "logs")
        try:
            data = read_regular(job_dir(self.state.dir, row.name), LOG_FILE, max_bytes=MAX_LOG_BYTES, tail=True)
        except UntrustedFile as err:
            raise InputError(f"its log {err}", source=row.name, field="log", valid="a job's own train.log") from None
        return {"name": row.name, "log": (data or b"").decode(errors="replace")}

    def op_jobs(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        from scheduler.service.front.views import jobs_snapshot

        # one snapshot per state of the store, one view of it per viewer: between rounds, many callers polling
        # `jobs` cost one build (and, in the web layer, one encoding: the same object is answered), not one each.
        # The answer is shared: callers read it, never change it.
        if self._snapshot is None or self._snapshot[0] != self.state.changes:
            self._snapshot, self._views = (self.state.changes, jobs_snapshot(self.state)), {}
        viewer = caller.uid if self.config.private_data and not self._admin(caller) else None
        if viewer not in self._views:
            snapshot = dict(self._snapshot[1])
            if viewer is not None:
                snapshot["jobs"] = [v for v in snapshot["jobs"] if v["owner_uid"] == viewer]
                snapshot["set_aside"] = []  # damaged rows name other users' jobs: an admin's business
            self._views[viewer] = snapshot
        return self._views[viewer]

    def op_learned(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        from scheduler.service.front.views import learned_view

        return learned_view(self.state)

    def op_check(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        from scheduler.service.front.client import check_store

        if not self._admin(caller):
            raise self._refuse(caller, "state check", None, f"{caller.name} is not an admin")
        return check_store(self.state)

    def _token_admin(self, caller: Caller, what: str) -> None:
        if not self._admin(caller):
            raise self._refuse(caller, what, None, f"{caller.name} is not an admin")

    def op_token_create(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        self._token_admin(caller, "token create")
        user, expires = body.get("user"), body.get("expires_s")
        if expires is not None and (isinstance(expires, bool) or not isinstance(expires, (int, float))
                                    or not 1 <= expires <= 10 * 365 * 86400):
            raise InputError(f"{shown(expires)}", field="--expires", valid="a duration in [1 s, 10 years]")
        from scheduler.service.api.identity import from_user

        if not isinstance(user, str) or from_user(user, "") is None:
            raise InputError(f"no user {shown(user)} on the server's machine", field="USER", valid="an existing user")
        token, record = self.tokens.create(user, expires)
        with self.state.transaction() as db:
            db.event(None, "token-created", f"token {record.id} for {user} by {caller}")
        return {"token": token, **record.shown()}

    def op_token_list(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        self._token_admin(caller, "token list")
        return {"tokens": [r.shown() for r in self.tokens.records()]}

    def op_token_revoke(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        self._token_admin(caller, "token revoke")
        token_id = body.get("id")
        if not isinstance(token_id, str):
            raise InputError(f"{shown(token_id)}", field="ID", valid="a token ID colocate token list shows")
        record = self.tokens.revoke(token_id)
        with self.state.transaction() as db:
            db.event(None, "token-revoked", f"token {record.id} of {record.user} by {caller}")
        return record.shown()


CALLS = tuple(n[3:].replace("_", "-") for n in vars(Operations) if n.startswith("op_"))
