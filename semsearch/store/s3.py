"""A few signed S3 requests, for the writer lease of an index on S3 (:mod:`.lease`).

LanceDB reads and writes the tables; it has no call for a conditional PUT of an object of our
own, which is what the lease needs. The requests are signed with AWS Signature Version 4 by
hand (``hashlib``/``hmac``, ``http.client``): boto3 is 80 MB of dependencies for four requests.
Path-style addressing when an endpoint is set (SeaweedFS, MinIO, moto and most S3-compatible
servers), virtual-hosted otherwise (AWS), as LanceDB's object store does.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from semsearch.config import RemoteLocation
from semsearch.errors import StoreError

TIMEOUT = 30.0  # seconds for one request
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class Response:
    """An answer: status, headers (names in lower case), body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def code(self) -> str:
        """The S3 error code of an error body (``NoSuchBucket``, ``AccessDenied``, ...), or ""."""
        found = re.search(rb"<Code>([^<]{1,100})</Code>", self.body)
        return found[1].decode("ascii", "replace") if found else ""


class S3Client:
    """Signed requests for objects under one bucket, with the location's storage options."""

    def __init__(self, location: RemoteLocation) -> None:
        options = location.storage_options
        self._location = location
        self._bucket = location.bucket
        self._key_id = options.get("aws_access_key_id", "")
        self._secret = options.get("aws_secret_access_key", "")
        self._token = options.get("aws_session_token", "")
        self._region = options.get("aws_region") or DEFAULT_REGION
        endpoint = options.get("aws_endpoint")
        if endpoint:
            parsed = urllib.parse.urlsplit(endpoint)
            self._https = parsed.scheme != "http"
            self._host = parsed.netloc
            self._base = parsed.path.rstrip("/") + "/" + self._bucket
        else:
            self._https = True
            self._host = f"{self._bucket}.s3.{self._region}.amazonaws.com"
            self._base = ""

    def request(
        self, method: str, key: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Response:
        """One request for the object ``key``; :class:`StoreError` naming the endpoint when the
        server cannot be reached."""
        path = self._base + "/" + urllib.parse.quote(key, safe="/-_.~")
        sent = {**(headers or {}), **self._signed(method, path, body, headers or {})}
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = kind(self._host, timeout=TIMEOUT)
        try:
            connection.request(method, path, body=body or None, headers=sent)
            answer = connection.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise StoreError(unreachable_message(self._location, str(exc))) from exc
        finally:
            connection.close()
        found = {name.lower(): value for name, value in answer.getheaders()}
        return Response(answer.status, found, data)

    def _signed(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> dict[str, str]:
        """The host, date and payload headers, and the SigV4 ``Authorization`` when there are
        credentials (without, the request goes unsigned: a server open to anyone)."""
        now = datetime.datetime.now(datetime.timezone.utc)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(body).hexdigest()
        added = {"host": self._host, "x-amz-date": stamp, "x-amz-content-sha256": payload}
        if self._token:
            added["x-amz-security-token"] = self._token
        if not (self._key_id and self._secret):
            return added
        signing = {name.lower(): str(value).strip() for name, value in {**headers, **added}.items()}
        names = sorted(signing)
        canonical = "\n".join(
            [
                method,
                path,
                "",
                *(f"{name}:{signing[name]}" for name in names),
                "",
                ";".join(names),
                payload,
            ]
        )
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = ("AWS4" + self._secret).encode()
        for part in (day, self._region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        added["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self._key_id}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return added


def unreachable_message(location: RemoteLocation, reason: str) -> str:
    """The index's object store did not answer."""
    where = location.endpoint or f"the {location.scheme}:// service"
    return (
        f"Cannot reach the object store at {where} for {location}: {reason}. Check the "
        "endpoint (AWS_ENDPOINT_URL or storageOptions.aws_endpoint) and the network."
    )


def refused_message(location: RemoteLocation, code: str, writing: bool = False) -> str:
    """What an error code of the object store means for the index at ``location``."""
    if code in ("NoSuchBucket", "ContainerNotFound", "BucketNotFound"):
        return (
            f"The bucket {location.bucket} does not exist (index {location}). Create it, or "
            "check the URI."
        )
    if writing and code == "AccessDenied":
        return (
            f"The object store refused to write to {location} (AccessDenied): these "
            "credentials may read the index but not write it. An index run needs write access."
        )
    return (
        f"The object store refused the credentials for {location} ({code or 'forbidden'}). "
        "Check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or storageOptions)."
    )
