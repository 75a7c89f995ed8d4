"""The cluster's roles, enforced where code would run: only a client's certificate submits tasks or runs
functions, and a worker's key runs nothing on the scheduler or on any other worker.

Mutual TLS (cluster_tls.py) lets in only certificates of the cluster's CA, but Dask then treats every peer
alike: any certificate could register as a client, submit tasks (which run outside the sandbox, as the
worker's user) or `run` a function on every worker. So each certificate names its role (a URI in its
subject alternative names, `urn:sgemm-grader:role:client`), and every server of the cluster (the
scheduler, each nanny and each worker: `grade scheduler` and `grade worker` preload this module) answers a
peer only as its role allows:

- the scheduler: a client may do anything; a worker (or its nanny) only what workers ask of a scheduler
  (register, heartbeats, report tasks on its stream, retire, log); anyone else is disconnected at once.
- a worker or a nanny: the scheduler and a client may do anything (the scheduler sends tasks, `run`, data
  requests); another worker only asks a worker for data, and a worker its own nanny to close.

Dask unpickles some of what it reads before any handler sees it, so a peer whose role may not run code
here cannot have a pickle loaded either: what such a peer sends is read with unpickling refused, on the
connections it opened and on those this server opened to it (a worker answering the scheduler's request).

Dask imports a preload module as it makes each server, before the server listens: the gate is installed
then, on Dask's classes, so no connection ever reaches an ungated server. Importing this module does that,
so nothing else imports it: only a Dask server's process loads it (a client's would refuse its results).
"""
from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass

from .cluster_tls import CLIENT, SCHEDULER, WORKER, roles_in

ANY = None  # a role that may ask for every operation
log = logging.getLogger("grader.classroom.cluster_preload")

# What workers and their nannies ask of the scheduler (Dask's worker.py and nanny.py), on their own
# connections and on the stream a worker registers.
WORKER_TO_SCHEDULER = frozenset({"register-worker", "register_nanny", "heartbeat_worker", "unregister", "log_event",
                                 "who_has", "retire_workers", "set_resources", "identity"})
WORKER_STREAM = frozenset({"task-finished", "task-erred", "release-worker-data", "add-keys", "long-running",
                           "reschedule", "keep-alive", "log-event", "worker-status-change",
                           "request-refresh-who-has"})


@dataclass(frozen=True)
class Rules:
    """One kind of server: for each role it answers, the operations it may ask (ANY: all) and the stream
    messages it may send; and whose pickles it loads. A role not listed is disconnected."""

    ops: dict[str, frozenset | None]
    stream: dict[str, frozenset | None]
    pickles_from: frozenset


SCHEDULER_RULES = Rules({CLIENT: ANY, WORKER: WORKER_TO_SCHEDULER}, {CLIENT: ANY, WORKER: WORKER_STREAM},
                        frozenset({CLIENT}))
WORKER_RULES = Rules({SCHEDULER: ANY, CLIENT: ANY, WORKER: frozenset({"get_data"})},
                     {SCHEDULER: ANY, CLIENT: ANY}, frozenset({SCHEDULER, CLIENT}))
NANNY_RULES = Rules({SCHEDULER: ANY, CLIENT: ANY, WORKER: frozenset({"close_gracefully"})},
                    {SCHEDULER: ANY, CLIENT: ANY}, frozenset({SCHEDULER, CLIENT}))

# The peer of the connection a server is answering now: (role, address); None outside such an answer.
_PEER: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("sgemm_peer", default=None)
# Set while reading from a peer whose pickles this server does not load.
_NO_PICKLES: contextvars.ContextVar[str] = contextvars.ContextVar("sgemm_no_pickles", default="")


def peer_role(comm) -> str:
    """The role the peer's certificate names ("" for none: no certificate, or one made before roles)."""
    certificate = (getattr(comm, "extra_info", None) or {}).get("peercert") or {}
    found = roles_in(list(certificate.get("subjectAltName", ())))
    return found[0] if len(found) == 1 else ""


def _kinds() -> tuple:
    from distributed import Nanny, Scheduler, Worker

    return (Scheduler, SCHEDULER_RULES), (Nanny, NANNY_RULES), (Worker, WORKER_RULES)


def rules_of(server) -> Rules | None:
    return next((rules for kind, rules in _kinds() if isinstance(server, kind)), None)


_this_process: list[Rules] = []  # found once: a process runs one server, the scheduler, a nanny or a worker


def _this_process_rules() -> Rules | None:
    if not _this_process:
        _this_process.extend(rules for kind, rules in _kinds() if list(kind._instances))
    return _this_process[0] if _this_process else None


class _Gate(dict):
    """A server's handlers, each given out only to the roles allowed to ask for it."""

    def __init__(self, handlers: dict, allowed: dict[str, frozenset | None], what: str):
        super().__init__(handlers)
        self.allowed, self.what = allowed, what

    def __getitem__(self, op):
        handler = super().__getitem__(op)
        peer = _PEER.get()
        if peer is None:  # not answering a peer: the server's own stream to whom it connected
            return handler
        ops = self.allowed.get(peer[0], frozenset())
        if ops is ANY or op in ops:
            return handler
        log.warning("refused %s %r from %s with a %s certificate", self.what, op, peer[1], peer[0] or "roleless")
        return _refusal(op, peer[0])


def _refusal(op: str, role: str):
    def refused(*args, **kwargs):
        raise PermissionError(f"{op!r} is not allowed to a {role or 'roleless'} certificate of this cluster: "
                              "only a client's certificate submits tasks or runs functions")

    return refused


def _gate(server, rules: Rules) -> None:
    """The server's handlers behind the gate, once (every handler is registered by the time it answers)."""
    if not isinstance(server.handlers, _Gate):
        server.handlers = _Gate(server.handlers, rules.ops, "operation")
        server.stream_handlers = _Gate(server.stream_handlers, rules.stream, "stream message")


def _install() -> None:
    from distributed.comm.tcp import TCP
    from distributed.core import Server
    from distributed.protocol import pickle

    if getattr(Server, "_sgemm_gated", False):
        return
    answer, read, loads = Server._handle_comm, TCP.read, pickle.loads

    async def gated_answer(self, comm):
        rules = rules_of(self)
        if rules is None:
            return await answer(self, comm)
        _gate(self, rules)
        role = peer_role(comm)
        if role not in rules.ops:
            log.warning("refused a connection from %s: its certificate is %s", comm.peer_address,
                        f"a {role}'s" if role else "of no role (made before certificates carried one?)")
            comm.abort()
            return None
        token = _PEER.set((role, comm.peer_address))
        try:
            return await answer(self, comm)
        finally:
            _PEER.reset(token)

    async def guarded_read(self, deserializers=None):
        rules = _this_process_rules()
        role = peer_role(self)
        refused = "" if rules is not None and role in rules.pickles_from else (role or "roleless")
        token = _NO_PICKLES.set(refused)
        try:
            return await read(self, deserializers)
        finally:
            _NO_PICKLES.reset(token)

    def guarded_loads(*args, **kwargs):
        refused = _NO_PICKLES.get()
        if refused:
            raise PermissionError(f"refused to unpickle what a {refused} certificate sent: only a client's "
                                  "certificate (or, to a worker, the scheduler's) may send code")
        return loads(*args, **kwargs)

    Server._handle_comm, TCP.read, pickle.loads = gated_answer, guarded_read, guarded_loads
    Server._sgemm_gated = True


_install()
