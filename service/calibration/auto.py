"""``replicas="auto"``: the plan of this machine's kept calibration for the tokenizer (made now when there is none,
under a lock, so that a node's ranks calibrate once), or the default plan where there can be none: ``calibrate``
off, a busy machine, a probe that cannot run. A busy verdict is kept too, and stands for :data:`BUSY_STANDS`: the
starts within it take the default plan at once instead of probing a busy machine again. The plan says where it came
from (:attr:`ReplicaPlan.source`), for the one log line its caller writes."""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timedelta, timezone

from .. import sizing
from ..sizing import AUTO, DEFAULT_SOURCE, ReplicaPlan, plan_replicas
from .measure import MEASURED_AT, Calibration, CalibrationError, calibrate, identify
from .store import CALIBRATION_DIR_ENV, Kept, Key, keep, kept, locked

__all__ = ["BUSY_STANDS", "auto_plan"]

logger = logging.getLogger(__name__)

#: How long a kept busy verdict stands: a start within it takes the default plan without measuring again.
BUSY_STANDS = timedelta(hours=1)


def auto_plan(
    model: str | None,
    revision: str | None = None,
    *,
    threads: int | None = None,
    use_calibration: bool = True,
    python: str = sys.executable,
) -> ReplicaPlan:
    """The replicas and threads for ``model`` on the cores this process may use (``threads``, when given, wins)."""
    cores = sizing.available_cpus()
    if not use_calibration:
        return plan_replicas(AUTO, threads, cores, source=f"{DEFAULT_SOURCE}; calibration turned off")
    try:
        found = _kept_or_made(model, revision, cores, python)
    except CalibrationError as exc:
        return plan_replicas(AUTO, threads, cores, source=f"{DEFAULT_SOURCE}; the calibration could not run: {exc}")
    except OSError as exc:  # the calibrations' folder cannot be made or written (a read-only home)
        why = f"cannot keep a calibration ({exc}): set {CALIBRATION_DIR_ENV} to a writable folder"
        return plan_replicas(AUTO, threads, cores, source=f"{DEFAULT_SOURCE}; {why}")
    calibration = found.calibration
    assert calibration is not None
    if calibration.busy:
        why = "; ".join(calibration.busy)
        hours = BUSY_STANDS.total_seconds() / 3600
        again = f"a start after {hours:g} h measures again, `tokenizer-service calibrate` now"
        busy = f"this machine was busy at {calibration.measured_at}: {why}; {again}"
        return plan_replicas(AUTO, threads, cores, source=f"{DEFAULT_SOURCE}; {busy}")
    source = f"the calibration kept at {found.path} (measured {calibration.measured_at} on {calibration.texts})"
    return plan_replicas(AUTO, threads, cores, chosen=calibration.plan(), source=source)


def _kept_or_made(model: str | None, revision: str | None, cores: int, python: str) -> Kept:
    identity = identify(model, revision, python=python)
    key = Key.here(cores, identity["fingerprint"], identity["versions"])
    found = kept(key)
    if _stands(found.calibration):
        return found
    with locked(key):
        found = kept(key)  # another rank may have made it while this one waited
        if _stands(found.calibration):
            return found
        if found.ignored:
            logger.warning("the calibration kept at %s is %s: calibrating again", found.path, found.ignored)
        elif found.calibration is not None:
            logger.info("the busy verdict kept at %s is over %s old: calibrating again", found.path, BUSY_STANDS)
        logger.info("replicas=auto: calibrating this machine for this tokenizer (a few seconds, once)")
        calibration = calibrate(model, revision, cores=cores, python=python)
        return Kept(keep(calibration), calibration)


def _stands(calibration: Calibration | None) -> bool:
    """Whether a kept calibration is used as it is: a measurement always; a busy verdict for :data:`BUSY_STANDS`."""
    if calibration is None or not calibration.busy:
        return calibration is not None
    try:
        measured = datetime.strptime(calibration.measured_at, MEASURED_AT).replace(tzinfo=timezone.utc)
    except ValueError:
        return False
    return datetime.now(timezone.utc) - measured < BUSY_STANDS
