"""OpenAI's Files and Batches: rows in the database, bytes in the batch file store
(controlplane.batches.files: WHARF_BATCH_DIR or the bucket of WHARF_BATCH_STORE, one folder or
prefix per workspace). A file's row exists only once its bytes are stored whole, and a write
whose row is not saved is removed (nothing half-written, no orphan). A batch's runnable lines
become queue items on the Standard services their models name (controlplane.queues.store
leases them to the gateways after Async items); its last answer settles it: the output and
error files are written and its items go.

Expiry: a batch still running 24 h after it was created expires when anything next looks at
its workspace's batches, a gateway leases work or the workers' beat comes (`expire_due`): its
waiting requests go to its error file (`batch_expired`), those that ran are in its output file.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from contracts import batch as contract
from contracts.spec import typed_spec
from contracts.spec_job import is_job
from contracts.spec_queue import is_async
from controlplane.batches import files
from controlplane.batches.models import Batch, File
from controlplane.queues.models import ItemState, QueueItem, QueueName
from controlplane.queues.store import FAILED_DELIVERY, QueueRefusal, check_queued
from controlplane.services.choices import DesiredState
from controlplane.services.models import Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import ApiKey

log = logging.getLogger(__name__)

RUNNING = (contract.VALIDATING, contract.IN_PROGRESS, contract.FINALIZING, contract.CANCELLING)


def key_of(key_id: str) -> ApiKey:
    """The API key (its public id, "k<pk>") a gateway authorized: files and batches are its
    workspace's."""
    if not key_id.startswith("k") or not key_id[1:].isdigit():
        raise QueueRefusal(403, "files and batches take an API key, not a service token")
    key = ApiKey.objects.active(timezone.now()).filter(pk=int(key_id[1:])).first()
    if key is None:
        raise QueueRefusal(401, "the API key is no longer valid")
    return key


def name_of(file: File) -> str:
    """The file's name in the store: under its workspace's folder or prefix."""
    return f"{file.workspace_id}/{file.id}"


def content_of(file: File) -> files.Content:
    """The file's bytes, to stream."""
    return files.configured().open(name_of(file))


def bytes_of(file: File) -> bytes:
    """The whole file (an input file, read when its batch is made: at most
    WHARF_BATCH_FILE_MAX_BYTES)."""
    return files.configured().read(name_of(file))


def _stored(file: File, source: files.Readable) -> File:
    """The bytes written, then the row saved; if the row is not, the bytes go too."""
    files.configured().write(name_of(file), source)
    try:
        file.save()
    except BaseException:
        files.discard(name_of(file))
        raise
    return file


def save_file(key: ApiKey, filename: str, purpose: str, upload: UploadedFile) -> File:
    if purpose != contract.PURPOSE:
        raise QueueRefusal(400, "purpose: Wharf takes files for batches only ('batch')")
    if (upload.size or 0) > settings.WHARF_BATCH_FILE_MAX_BYTES:
        raise QueueRefusal(
            413, f"file: at most {settings.WHARF_BATCH_FILE_MAX_BYTES} bytes "
            "(WHARF_BATCH_FILE_MAX_BYTES)",
        )  # fmt: skip
    file = File(id=contract.new_id("file-"), workspace=key.workspace, key_id=key.public_id,
                filename=filename[:255], purpose=purpose, bytes=upload.size or 0)  # fmt: skip
    upload.seek(0)  # as UploadedFile.chunks() does
    return _stored(file, upload)


def _written(batch: Batch, name: str, data: bytes, written: list[str]) -> File:
    file = File(id=contract.new_id("file-"), workspace_id=batch.workspace_id,
                key_id=batch.key_id, filename=f"{batch.id}_{name}.jsonl",
                purpose=f"batch_{name}", bytes=len(data))  # fmt: skip
    written.append(name_of(file))
    return _stored(file, io.BytesIO(data))


def file_of(key: ApiKey, file_id: str) -> File:
    file = File.objects.filter(id=file_id, workspace=key.workspace).first()
    if file is None:
        raise QueueRefusal(404, f"No such File object: {file_id}")
    return file


def delete_file(file: File) -> None:
    """The row and the bytes, or neither (a store that fails rolls the row back)."""
    name = name_of(file)  # before delete(), which clears the id
    with transaction.atomic():
        file.delete()
        files.configured().delete(name)


def _services(key: ApiKey) -> dict[str, Service]:
    """Each model name the key may call with a Standard service serving it."""
    found: dict[str, Service] = {}
    services = Service.objects.filter(workspace=key.workspace).exclude(
        desired_state=DesiredState.DELETED
    )
    for service in services.order_by("name"):
        if key.services is not None and service.name not in key.services:
            continue
        spec = typed_spec(service.plain_spec())
        if is_async(spec) or is_job(spec):
            continue
        for name in (service.name, *spec.served_model_names):
            found.setdefault(name, service)
    return found


def _served_body(service: Service, body: dict[str, Any]) -> bytes:
    """The body for the engine, which knows its served model names only (as the gateway)."""
    served = typed_spec(service.plain_spec()).served_model_names
    if served and body["model"] not in served:
        body = {**body, "model": served[0]}
    return json.dumps(body).encode()


def _checked(
    number: int,
    line: contract.Line | contract.LineError,
    services: dict[str, Service],
    seen: set[str],
) -> contract.Line | contract.LineError:
    """A well-formed line that may still not run: a custom_id used before, or a model the key
    may not call (as the gateway's 404 for an online call)."""
    if isinstance(line, contract.LineError):
        return line
    if line.custom_id in seen:
        why = f"custom_id {line.custom_id} is used twice"
        return contract.LineError(number, line.custom_id, "duplicate_custom_id", why)
    if line.model not in services:
        why = f"no model {line.model} this key may call (a Standard service's name)"
        return contract.LineError(number, line.custom_id, "model_not_found", why)
    return line


def create_batch(
    key: ApiKey, input_file_id: str, endpoint: str, window: str, metadata: Any
) -> Batch:
    if endpoint not in contract.ENDPOINTS:
        raise QueueRefusal(400, f"endpoint: one of {', '.join(contract.ENDPOINTS)}")
    if window != contract.COMPLETION_WINDOW:
        raise QueueRefusal(400, "completion_window: only '24h' is supported")
    if metadata is not None and not isinstance(metadata, dict):
        raise QueueRefusal(400, "metadata: an object of strings")
    file = file_of(key, input_file_id)
    if file.purpose != contract.PURPOSE:
        raise QueueRefusal(400, "input_file_id: the file's purpose is not 'batch'")
    in_flight = Batch.objects.filter(workspace=key.workspace, status__in=RUNNING).count()
    if in_flight >= settings.WHARF_BATCH_MAX_IN_FLIGHT:
        raise QueueRefusal(
            429, f"the workspace has {in_flight} batches in flight, the most it may "
            "(WHARF_BATCH_MAX_IN_FLIGHT): wait for one to end",
        )  # fmt: skip
    texts = [t for t in bytes_of(file).decode(errors="replace").splitlines() if t.strip()]
    if len(texts) > settings.WHARF_BATCH_MAX_LINES:
        raise QueueRefusal(
            400, f"input_file_id: {len(texts)} lines, over {settings.WHARF_BATCH_MAX_LINES} "
            "(WHARF_BATCH_MAX_LINES)",
        )  # fmt: skip
    services = _services(key)
    runnable: list[tuple[contract.Line, Service]] = []
    rejected: list[dict[str, Any]] = []
    line_errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, text in enumerate(texts, 1):
        line = _checked(number, contract.read_line(number, text, endpoint), services, seen)
        if isinstance(line, contract.LineError):
            rejected.append(contract.error_line(line.custom_id, line.code, line.message))
            line_errors.append(contract.batch_error(line))
            continue
        seen.add(line.custom_id)
        runnable.append((line, services[line.model]))
    now = timezone.now()
    with transaction.atomic():
        check_queued(key.workspace_id, len(runnable))  # refused before anything is written
        batch = Batch.objects.create(
            id=contract.new_id("batch_"), workspace=key.workspace, key_id=key.public_id,
            endpoint=endpoint, input_file_id=file.id, metadata=metadata,
            status=contract.IN_PROGRESS, rejected=rejected, line_errors=line_errors,
            total=len(texts),
            expires_at=now + timezone.timedelta(seconds=contract.WINDOW_S), in_progress_at=now,
        )  # fmt: skip
        QueueItem.objects.bulk_create(
            QueueItem(
                service=service,
                queue=QueueName.INPUT,
                request_id=str(uuid.uuid4()),
                data=_served_body(service, line.body),
                path=line.url,
                content_type="application/json",
                key_id=key.public_id,
                batch=batch,
                custom_id=line.custom_id,
            )  # fmt: skip
            for line, service in runnable
        )
    if runnable:
        publish_snapshot()  # the gateways feed these services now
    else:
        settle(batch.id)
    return Batch.objects.get(pk=batch.pk)


def cancel(batch: Batch) -> Batch:
    """Its waiting requests go; those in work finish, then it is cancelled."""
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status in (contract.VALIDATING, contract.IN_PROGRESS):
            locked.status, locked.cancelling_at = contract.CANCELLING, timezone.now()
            locked.save(update_fields=["status", "cancelling_at"])
            QueueItem.objects.filter(
                batch=locked, queue=QueueName.INPUT, state=ItemState.PENDING
            ).delete()
    settle(batch.id)
    return Batch.objects.get(pk=batch.pk)


def expire_due() -> None:
    """Batches past their window: waiting requests go, and they end expired."""
    due = Batch.objects.filter(status=contract.IN_PROGRESS, expires_at__lt=timezone.now())
    for batch in due:
        with transaction.atomic():
            waiting = QueueItem.objects.filter(
                batch=batch, queue=QueueName.INPUT, state=ItemState.PENDING
            )
            why = "the batch expired before this request ran"
            lost = [contract.error_line(c, "batch_expired", why)
                    for c in waiting.values_list("custom_id", flat=True)]  # fmt: skip
            waiting.delete()
            Batch.objects.filter(pk=batch.pk, status=contract.IN_PROGRESS).update(
                status=contract.EXPIRED, expired_at=timezone.now(), rejected=batch.rejected + lost
            )
        settle(batch.id)


def settle_orphans() -> None:
    """Batches whose requests all went without an answer that settles them (their service was
    deleted, which deletes its queue items): settled with what they have."""
    running = Batch.objects.filter(status__in=(contract.IN_PROGRESS, contract.CANCELLING))
    for batch in running.exclude(items__queue=QueueName.INPUT).distinct():
        settle(batch.id)


def settle(batch_id: str) -> None:
    """Once none of its requests waits or runs: its output and error files, its end status.
    A store that fails leaves the batch as it was (its answers kept, what was written removed)
    for the next call or the workers' beat (settle_orphans) to settle."""
    written: list[str] = []
    try:
        settled = _settled(batch_id, written)
    except BaseException as exc:
        for name in written:
            files.discard(name)
        if not isinstance(exc, files.StoreUnavailable):
            raise
        log.warning("batch %s is settled later: %s", batch_id, exc.message)
        return
    if settled:
        publish_snapshot()  # a service with no more batch work is not fed for it


def _settled(batch_id: str, written: list[str]) -> bool:
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(pk=batch_id).first()
        if batch is None or batch.output_file_id or batch.error_file_id:
            return False
        if QueueItem.objects.filter(batch=batch, queue=QueueName.INPUT).exists():
            return False
        if batch.status in (contract.COMPLETED, contract.FAILED, contract.CANCELLED):
            return False
        answers = QueueItem.objects.filter(batch=batch, queue=QueueName.SINK).order_by("id")
        output, errors = [], list(batch.rejected)
        completed = failed = 0
        for item in answers:
            status = item.status or 0
            if status == FAILED_DELIVERY and "lastMessage" in item.tags:
                errors.append(contract.error_line(item.custom_id, "delivery_failed",
                                                  item.tags["lastMessage"]))  # fmt: skip
                failed += 1
                continue
            output.append(contract.output_line(item.custom_id, status, item.request_id,
                                               bytes(item.data)))  # fmt: skip
            completed, failed = (completed + 1, failed) if status < 400 else (completed, failed + 1)
        now = timezone.now()
        batch.completed, batch.failed = completed, failed + len(batch.rejected)
        batch.finalizing_at = now
        if output:
            batch.output_file_id = _written(batch, "output", contract.jsonl(output), written).id
        if errors:
            batch.error_file_id = _written(batch, "error", contract.jsonl(errors), written).id
        if batch.status == contract.CANCELLING:
            batch.status, batch.cancelled_at = contract.CANCELLED, now
        elif batch.status != contract.EXPIRED:
            batch.status, batch.completed_at = contract.COMPLETED, now
        batch.save()
        answers.delete()
    return True
