"""What an object store refused, said in one line that names no credential, and a file system
whose calls say it so (:class:`Guarded`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from oodsim.errors import StoreError

#: environment variables whose values are secrets (their names hold one of these words)
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "ACCESS_KEY", "ACCOUNT_KEY", "SAS")
#: values shorter than this are not searched for (they would match ordinary words)
SHORTEST_SECRET = 6


def redacted(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with the value of every secret-named variable of ``environ`` replaced by
    ``***``, and anything of the form ``key=...``/``secret=...`` cut."""
    for name, value in environ.items():
        if any(word in name.upper() for word in SECRET_WORDS) and len(value) >= SHORTEST_SECRET:
            text = text.replace(value, "***")
    return re.sub(r"(?i)\b(secret|token|password|key)=\S+", r"\1=***", text)


def no_bucket(error: BaseException) -> bool:
    """Whether ``error`` says that the location's bucket does not exist."""
    text = str(error).lower()
    return isinstance(error, FileNotFoundError) and (
        "bucket does not exist" in text or "nosuchbucket" in text
    )


def plain_error(error: BaseException, location: str) -> str:
    """What ``error`` of the store at ``location`` means, and the fix, in one line."""
    name = type(error).__name__
    text = " ".join(str(error).split()) or name
    bucket = location.split("://", 1)[-1].split("/", 1)[0]
    if no_bucket(error):
        said = f"the bucket {bucket} does not exist; create it, or fix the location"
    elif isinstance(error, PermissionError) or re.search(
        r"(?i)access ?denied|forbidden|invalidaccesskeyid|signaturedoesnotmatch|403", text
    ):
        said = (
            f"access denied ({text}); check the credentials of the environment "
            "(AWS_ACCESS_KEY_ID, AWS_PROFILE, ...) or of fsspec's configuration"
        )
    elif name in ("NoCredentialsError", "PartialCredentialsError"):
        said = "no credentials found: set them in the environment or fsspec's configuration"
    elif name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        said = f"the service cannot be reached ({text})"
    else:
        said = f"{name}: {text}"
    return redacted(said, os.environ)


class Guarded:
    """A file system whose calls raise what the service refused (credentials, a missing
    bucket, an unreachable endpoint) as a :class:`~oodsim.errors.StoreError` of one line that
    names the location, never a credential; a missing or existing object stays the
    ``FileNotFoundError`` or ``FileExistsError`` the store reads as an answer."""

    def __init__(self, fs: Any, location: str) -> None:
        self._fs, self._location = fs, location

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_fs", "_location"):  # (pickle, copy: none here)
            raise AttributeError(name)
        attribute = getattr(self._fs, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except FileExistsError:
                raise
            except Exception as error:  # botocore, aiohttp and fsspec raise many kinds
                if isinstance(error, FileNotFoundError) and not no_bucket(error):
                    raise  # an object that is not there: an answer, not a refusal
                raise StoreError(
                    f"cannot use the cache {self._location}: {plain_error(error, self._location)}"
                ) from None

        return call
