"""The page blob adapter: a stream's page blob on Azure (a :class:`~vault_core.pagelog.PageLog`),
its leases, the owner-lease blobs, and the container of all streams.

What the bytes and the commit record mean is :mod:`vault_core.pagelog`; this module only puts
them in storage and reads them back: conditional page writes, the commit record as the blob's
metadata, range reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NamedTuple, cast

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineResponse
from azure.storage.blob import BlobClient, BlobLeaseClient, ContainerClient

# The SDK's own mapping of a storage error response to its exception classes (with the
# x-ms-error-code), which download_blob applies to the same GET: kept, so a read fails as before.
from azure.storage.blob._shared.response_handlers import process_storage_error

from vault_core.errors import NotFound, StreamLeased, StreamNotFound
from vault_core.pagelog import MAX_PAGE_WRITE, PAGE_SIZE, CommitState, HeldLease, ListedBlob
from vault_core.translation import create_if_missing, translate_errors


class Lease:
    """A lease this process holds on a blob. Every write to a leased blob carries it."""

    def __init__(self, client: BlobLeaseClient, name: str) -> None:
        self.client = client
        self.name = name

    @property
    def id(self) -> str:
        return str(self.client.id)

    def renew(self) -> None:
        """Renew for another full duration; raises LeaseLost if it expired and was taken."""
        with translate_errors(self.name):
            self.client.renew()

    def release(self) -> None:
        """Give the blob up at once (raises a VaultError if the lease expired or was taken)."""
        with translate_errors(self.name):
            self.client.release()


def _sdk(lease: HeldLease) -> BlobLeaseClient:
    assert isinstance(lease, Lease), "a lease taken through this adapter"
    return lease.client


class LeaseBlob:
    """An empty page blob that exists to be leased: whoever holds its lease owns something
    (a staging queue, docs/ARCHITECTURE.md §3.7)."""

    def __init__(self, client: BlobClient) -> None:
        self.client = client
        self.name = client.blob_name

    def acquire(self, seconds: int, lease_id: str) -> Lease | None:
        """The lease under ``lease_id``, or None if another holder has it; the blob is created first
        if it is missing. Taking a lease this ``lease_id`` already holds succeeds (and renews it)."""
        for _ in range(2):
            try:
                with translate_errors():
                    return Lease(
                        self.client.acquire_lease(lease_duration=seconds, lease_id=lease_id), self.name
                    )
            except StreamLeased:
                return None
            except NotFound:  # its first holder: create the blob, then lease it
                with translate_errors():
                    try:
                        self.client.create_page_blob(size=0, match_condition=MatchConditions.IfMissing)
                    except ResourceExistsError:
                        pass
        return None

    def mark_renewed(self, lease: HeldLease, renewed_ms: int) -> None:
        """See :class:`~vault_core.blobstore.OwnerBlob`: one Set Blob Metadata under the lease."""
        with translate_errors(self.name):
            self.client.set_blob_metadata({RENEWED_MS: str(renewed_ms)}, lease=_sdk(lease))

    def renewed_ms(self) -> int | None:
        """See :class:`~vault_core.blobstore.OwnerBlob`: one Get Blob Properties."""
        try:
            with translate_errors(self.name):
                props = self.client.get_blob_properties()
        except NotFound:
            return None
        raw = (props.metadata or {}).get(RENEWED_MS, "")
        return int(raw) if raw.isdigit() else None


RENEWED_MS = "mv_renewed_ms"
"""Metadata of an owner-lease blob: when its holder last renewed the lease (Unix ms)."""


_BODY_ATTEMPTS = 3
"""GETs of one range whose body broke off mid-transfer (as the SDK's downloader makes); a request
that fails before its body is retried by the client pipeline's retry policy instead."""
_BODY_RETRY_SECONDS = 1.0
_META = "x-ms-meta-"


class _Ranged(NamedTuple):
    data: bytes
    metadata: dict[str, str]
    etag: str | None
    blob_size: int


_BodyAndResponse = tuple[Iterator[bytes], PipelineResponse[Any, Any]]


def _body_and_response(
    response: PipelineResponse[Any, Any], body: Iterator[bytes], headers: dict[str, Any]
) -> _BodyAndResponse:
    """The generated operation's ``cls`` hook: the streamed body and the raw response (its headers)."""
    return body, response


class StreamBlob:
    """The page blob of one stream. Every write method takes the lease and an ETag."""

    def __init__(self, client: BlobClient, stream: str | None = None) -> None:
        self.client = client
        self.stream = stream or client.blob_name

    @classmethod
    def from_url(cls, url: str, stream: str) -> StreamBlob:
        """The blob at ``url``, which carries its credential (a SAS) in its query string."""
        return cls(BlobClient.from_blob_url(url), stream)

    # -- reads ---------------------------------------------------------------------------
    def state(self) -> CommitState:
        with translate_errors(self.stream):
            props = self.client.get_blob_properties()
        return CommitState.from_metadata(dict(props.metadata or {}), props.etag, props.size)

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)``; the caller keeps the range below ``committed``."""
        if length <= 0:
            return b""
        with translate_errors(self.stream):
            return self._get(start, length).data

    def read_with_state(self, start: int, length: int) -> tuple[bytes, CommitState]:
        """One GET: the bytes and the commit record returned with them (Get Blob returns metadata)."""
        if length <= 0:
            return b"", self.state()
        with translate_errors(self.stream):
            try:
                got = self._get(start, length)
            except HttpResponseError as exc:
                if exc.status_code != 416:
                    raise
                return b"", self.state()  # a range at or past the blob's end: nothing there
        return got.data, CommitState.from_metadata(got.metadata, got.etag, got.blob_size)

    def _get(self, start: int, length: int) -> _Ranged:
        """One Get Blob of ``[start, start+length)``: exactly one request (SDK errors propagate).

        Not ``download_blob``: on a page blob the SDK follows its first GET with a Get Page
        Ranges of the whole blob (to skip empty pages in any later chunk), a second request on
        every read, billed on Azure and slower the more page ranges a blob has, with nothing to
        skip in a log. This is the GET ``download_blob`` sends, through the client's own pipeline
        (credential, retry policy, the request budget's hook) with the SDK's error mapping. Every
        range is one GET, however long: the bytes below ``committed`` never change, so unlike the
        SDK's chunked download there is no If-Match for a concurrent append to fail.
        """
        ranged = f"bytes={start}-{start + length - 1}"
        for attempt in range(1, _BODY_ATTEMPTS + 1):
            try:
                body, response = cast(
                    _BodyAndResponse, self.client._client.blob.download(range=ranged, cls=_body_and_response)
                )
            except HttpResponseError as exc:
                process_storage_error(exc)
            try:
                data = b"".join(body)
            except (HttpResponseError, ServiceResponseError):  # the body broke off: GET it again
                if attempt == _BODY_ATTEMPTS:
                    raise
                time.sleep(_BODY_RETRY_SECONDS)
                continue
            headers = response.http_response.headers
            # A ranged GET's size is the range's: the blob's own is after the "/" of its Content-Range.
            total = str(headers.get("Content-Range") or "").rpartition("/")[2]
            return _Ranged(
                data,
                {k[len(_META) :]: v for k, v in headers.items() if k.lower().startswith(_META)},
                headers.get("ETag"),
                int(total) if total.isdigit() else int(headers.get("Content-Length") or 0),
            )
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- lifecycle -----------------------------------------------------------------------
    def create_if_missing(self) -> None:
        """Create an empty page blob; a no-op if the stream already exists (idempotent)."""
        with translate_errors(self.stream):
            try:
                self.client.create_page_blob(
                    size=0, metadata=CommitState().to_metadata(), match_condition=MatchConditions.IfMissing
                )
            except ResourceExistsError:
                pass

    def acquire_lease(self, seconds: int, lease_id: str | None = None) -> Lease:
        """The stream's lease (raises StreamLeased if another writer holds it); see PageLog."""
        with translate_errors(self.stream):
            try:
                return Lease(
                    self.client.acquire_lease(lease_duration=seconds, lease_id=lease_id), self.stream
                )
            except ResourceNotFoundError as exc:
                raise StreamNotFound(f"stream {self.stream!r} does not exist") from exc

    def break_lease(self) -> None:
        """End whatever lease the blob has, at once: its writer's next write fails with LeaseLost."""
        with translate_errors(self.stream):
            BlobLeaseClient(self.client).break_lease(lease_break_period=0)

    # -- conditional writes: lease + If-Match the writer's last known ETag ---------------
    def resize(self, size: int, lease: HeldLease, etag: str) -> str:
        with translate_errors(self.stream):
            result = self.client.resize_blob(
                size, lease=_sdk(lease), etag=etag, match_condition=MatchConditions.IfNotModified
            )
        return str(result["etag"])

    def write_pages(self, offset: int, data: bytes | memoryview, lease: HeldLease, etag: str) -> str:
        assert offset % PAGE_SIZE == 0 and len(data) % PAGE_SIZE == 0 and len(data) <= MAX_PAGE_WRITE
        with translate_errors(self.stream):
            result = self.client.upload_page(
                bytes(data),
                offset=offset,
                length=len(data),
                lease=_sdk(lease),
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return str(result["etag"])

    def commit(self, state: CommitState, lease: HeldLease, etag: str) -> str:
        with translate_errors(self.stream):
            result = self.client.set_blob_metadata(
                state.to_metadata(),
                lease=_sdk(lease),
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return str(result["etag"])


class PageBlobs:
    """The container that holds the streams' page blobs."""

    def __init__(self, client: ContainerClient) -> None:
        self.client = client
        self.name: str = client.container_name

    def create_if_missing(self) -> None:
        create_if_missing(self.client.create_container)

    def blob(self, stream: str) -> StreamBlob:
        return StreamBlob(self.client.get_blob_client(stream), stream)

    def list(self) -> list[ListedBlob]:
        """Every blob with its metadata: one listing, however many streams."""
        with translate_errors():
            return [
                ListedBlob(
                    b.name,
                    dict(b.metadata or {}),
                    b.etag,
                    b.size,
                    int(b.last_modified.timestamp() * 1000) if b.last_modified else 0,
                )
                for b in self.client.list_blobs(include=["metadata"])
            ]
