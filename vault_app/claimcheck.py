"""Claim-check: a batch too large for one queue message travels as a blob (docs/ARCHITECTURE.md).

Everything about those blobs lives here: when a batch needs one, what it is called, how it is
written, read back by the writer and deleted after the commit.

* **Decision**: a batch goes to a blob when its inline envelope would be over
  :data:`vault_app.envelope.INLINE_LIMIT` (queue messages are at most 64 KiB).
* **Name**: ``<stream>/<batch id>/<attempt>.records``, where ``attempt`` is fresh for every
  staging attempt. Two attempts at one batch (a retry racing the original POST, or two producers
  that picked the same id on different streams) never share a blob.
* **Write**: conditional (``If-None-Match: *``): a blob is never overwritten, so a queue message
  always finds the bytes its own attempt wrote.
* **Body**: the batch in the vault's record format with offsets from 0 (docs/FORMAT.md §6.8):
  compressed version 2 units where the app writes format 2, which the writer copies into the
  log as they are; version 1 records where it writes format 1. The writer reads either.
* **Delete**: after the commit that made the batch durable (or recognised it as a duplicate),
  up to 256 per Blob Batch request; anything left behind is removed by the container's
  lifecycle rule and is harmless meanwhile.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from vault_app import envelope
from vault_app.envelope import Envelope, EnvelopeError
from vault_core.blobstore import BlobStore
from vault_core.errors import VaultError
from vault_core.recordformat import NewMessage
from vault_core.retry import with_retries
from vault_core.unitformat import UNIT_VERSION
from vault_core.vault import Vault
from vault_core.writer import WriterSettings

_ATTEMPT = re.compile(r"[0-9a-f]{32}")


def claim_name(stream: str, batch_id: str) -> str:
    """A fresh name for one staging attempt's blob: ``<stream>/<batch id>/<attempt>.records``."""
    return f"{stream}/{batch_id}/{uuid.uuid4().hex}.records"


def is_claim_of(name: str, stream: str, batch_id: str) -> bool:
    """Whether ``name`` is a claim-check name of this stream and batch (any attempt): the writer
    reads only such a blob, so a queue message cannot make it append another batch's bytes."""
    prefix = f"{stream}/{batch_id}/"
    attempt = name[len(prefix) : -len(".records")] if name.endswith(".records") else ""
    return name.startswith(prefix) and _ATTEMPT.fullmatch(attempt) is not None


class AlreadyCommitted(Exception):
    """A claim-check batch whose blob is gone because its commit already happened."""


class ClaimChecks:
    def __init__(self, container: BlobStore, vault: Vault, settings: WriterSettings | None = None) -> None:
        self.container = container
        self.vault = vault
        self.settings = settings or WriterSettings()
        """The app's writer settings: a claim-check body is laid out as its writer writes."""

    # -- the HTTP tier ---------------------------------------------------------------------
    def queue_text(
        self,
        batch_id: str,
        stream: str,
        received_ms: int,
        messages: list[NewMessage],
        trace: str | None = None,
    ) -> tuple[str, bool]:
        """The queue message for a batch, uploading its claim-check blob first if it needs one.

        Inline messages if they fit one queue message; else, where the app writes format 2, its
        compressed units inline if they fit; else a claim-check blob of its units or records.
        Returns the text and whether a blob carries the batch. ``trace``: the POST's
        ``traceparent`` for the envelope to carry (telemetry on).
        """
        size = sum(len(m.value) for m in messages)
        claimed = size + 40 * len(messages) > envelope.INLINE_LIMIT  # cheap bound before encoding
        if not claimed:
            text = envelope.encode_messages(batch_id, stream, received_ms, messages, trace)
            if len(text) <= envelope.INLINE_LIMIT:
                return text, False
        body = envelope.encode_claim_body(messages, received_ms, self.settings)
        units = self.settings.record_format == UNIT_VERSION
        if units and 4 * len(body) // 3 < envelope.INLINE_LIMIT:  # base64 of the body: about this
            text = envelope.encode_units(batch_id, stream, received_ms, body, len(messages), trace)
            if len(text) <= envelope.INLINE_LIMIT:
                return text, False
        name = claim_name(stream, batch_id)
        with_retries(lambda: self._upload(name, body))
        pointer = envelope.encode_claim(
            batch_id, stream, received_ms, name, len(messages), trace, units=units
        )
        return pointer, True

    def _upload(self, name: str, body: bytes) -> None:
        self.container.upload_new(name, body)

    # -- the writer ------------------------------------------------------------------------
    def load(self, env: Envelope) -> Envelope:
        """Resolve a claim-check reference into the full envelope (inline envelopes pass through).

        Raises :class:`AlreadyCommitted` for a redelivery whose blob went with its commit,
        :class:`EnvelopeError` for a missing or corrupt blob of an uncommitted batch, or a name
        that is not the claim-check name of the envelope's stream and batch (permanent),
        and :class:`~vault_core.errors.StorageUnavailable` when storage cannot answer.
        """
        if env.claim is None:
            return env
        if not is_claim_of(env.claim, env.stream, env.batch_id):
            shown = env.claim if len(env.claim) <= 200 else env.claim[:200] + "..."
            raise EnvelopeError(
                f"claim-check name {shown!r} is not one of batch {env.batch_id} on stream {env.stream}"
            )
        body = self.container.download(env.claim)
        if body is None:
            if self._committed(env):
                raise AlreadyCommitted(env.batch_id)
            raise EnvelopeError(f"claim-check blob {env.claim!r} of batch {env.batch_id} is missing")
        return envelope.decode_claimed(env, body)

    def _committed(self, env: Envelope) -> bool:
        # In the Tables index, or (if the writer died before writing that row) still in the
        # stream's commit record.
        if self.vault.index.committed_batches(env.stream, [env.batch_id]):
            return True
        try:
            batches = self.vault.blob(env.stream).state().batches
        except VaultError:
            return False
        return any(b.batch_id == env.batch_id for b in batches)

    def delete(self, names: Sequence[str]) -> None:
        """Delete committed batches' blobs; failures are left to the lifecycle rule."""
        self.container.delete_many(names)
