"""A launched replica that cannot be reached: relaunched once, by whichever process notices first, under the launch
key's lock (:mod:`.rendezvous`); a replica that dies again, or that nobody owns any longer, is an error. With other
replicas running, a client's calls go to them while a thread of this process relaunches the dead one
(:func:`recover_in_background`)."""

from __future__ import annotations

import logging
import threading

from ..processes import stop_servers
from ..transport.exceptions import LaunchError
from .launched import LaunchedService
from .ownership import adopt, claim_relaunch, relaunch_done
from .rendezvous import Record, exclusive_lock, nobody_holds
from .starting import MAX_LAUNCHES, STOP_WAIT_SECONDS, failure, ready_or_gone, start

__all__ = ["recover", "recover_in_background"]

logger = logging.getLogger(__name__)


def recover(service: LaunchedService, replica: int = 0) -> None:
    """For a replica that cannot be reached: return once it is ready (unreachable for a moment, or relaunched now:
    once, by whichever process notices first), or raise LaunchError (it died again, or nobody owns it)."""
    paths = service.paths[replica]
    name = service.command.name(replica)
    with exclusive_lock(paths.lock, service.start_timeout + STOP_WAIT_SECONDS, "waiting for the launch lock"):
        record = Record.read(paths.record)
        if record is not None and ready_or_gone(paths, record, STOP_WAIT_SECONDS):
            return
        if nobody_holds(paths.owners):
            raise LaunchError(
                f"the launched tokenizer service for {service.command.description} has stopped: every process "
                "that launched or attached to it has let it go (shutdown(), the end of its with-block, or exit)",
                log_path=paths.log,
            )
        launches = record.launches if record is not None else 1
        if launches >= MAX_LAUNCHES:
            raise failure(
                f"the launched {name} died again after its one relaunch",
                paths,
                silent="it wrote no error (killed by a signal? the out-of-memory killer, say)",
            )
        logger.warning(
            "the launched %s (pid %s) died; relaunching it (log: %s)", name, service.pid_of(replica), paths.log
        )
        [(process, record)] = start(service.command, {replica: paths}, launches + 1, service.start_timeout).values()
        if record.fingerprint != service.fingerprint:
            stop_servers([process], wait=STOP_WAIT_SECONDS)
            raise LaunchError(
                f"the relaunched {name} serves another tokenizer ({record.fingerprint}, not "
                f"{service.fingerprint}): were its files changed?",
                log_path=paths.log,
            )
        adopt(service.key, replica, process)


def recover_in_background(service: LaunchedService, replica: int) -> None:
    """:func:`recover` in a thread (one per replica in this process) while the others take its calls; a failed
    relaunch is logged, not tried again here."""
    if not claim_relaunch(service.key, replica):
        return
    thread = threading.Thread(
        target=_recover_quietly, args=(service, replica), name=f"relaunch-replica-{replica}", daemon=True
    )
    thread.start()


def _recover_quietly(service: LaunchedService, replica: int) -> None:
    try:
        recover(service, replica)
    except LaunchError as exc:
        logger.warning("%s; its calls go to the other replicas", exc)
        return  # stays claimed: given up on in this process
    except Exception:
        logger.exception("relaunching the %s failed", service.command.name(replica))
    relaunch_done(service.key, replica)
