"""How a ``gs://`` root is reached: Cloud Storage with Application Default Credentials, or a GCS
emulator at ``STORAGE_EMULATOR_HOST`` (the variable Google's own clients read) with none.

Landing (pyarrow's ``GcsFileSystem``) and the lake (Google's Hadoop connector in Spark, see
``cs_platform.lake.gcs_connector``) read the same two facts from here, so the endpoint and the
credentials are the only things that differ between a local emulator and production.

Without an emulator, credentials must be findable before any object is touched; otherwise the
first write would fail deep inside a C++ or Java client (or hang retrying). :meth:`GcsAccess.check`
looks for them the way ADC does, without a network call: ``GOOGLE_APPLICATION_CREDENTIALS``,
gcloud's ADC file, or a Google Cloud VM (Dataproc, GKE, Compute Engine), whose metadata server
serves them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Mapping
from urllib.parse import urlsplit

from cs_platform.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyarrow import fs as pafs

EMULATOR_SETTING = "STORAGE_EMULATOR_HOST"
CREDENTIALS_SETTING = "GOOGLE_APPLICATION_CREDENTIALS"
# Transient errors are retried this long, then the call fails (pyarrow's default is 15 minutes).
RETRY_LIMIT = timedelta(seconds=60)


class StorageAccessError(InvalidArgumentError):
    """Raised when a gs:// root has neither an emulator endpoint nor findable credentials."""


@dataclass(frozen=True)
class GcsAccess:
    emulator: str | None  # http://host:port of a GCS emulator; None for Cloud Storage

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "GcsAccess":
        emulator = environ.get(EMULATOR_SETTING) or None
        if emulator is not None:
            parts = urlsplit(emulator if "://" in emulator else f"http://{emulator}")
            if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
                raise StorageAccessError(f"{EMULATOR_SETTING}={emulator!r} is not http://host:port: fix it, or unset it for Cloud Storage")
            emulator = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        return cls(emulator)

    def check(self, setting: str, root: str, environ: Mapping[str, str] = os.environ) -> None:
        """Fail now, naming the settings, if ``root`` (the value of ``setting``) cannot be reached."""
        if self.emulator is not None:
            return
        key_file = environ.get(CREDENTIALS_SETTING)
        if key_file:
            if not Path(key_file).is_file():
                raise StorageAccessError(
                    f"{setting}={root!r} needs Cloud Storage credentials, but {CREDENTIALS_SETTING}={key_file!r} is not a file: "
                    "point it at a service account key (JSON), or unset it to use gcloud's or the VM's credentials"
                )
            return
        if not (_gcloud_adc_file(environ).is_file() or _on_google_cloud()):
            raise StorageAccessError(
                f"{setting}={root!r} needs Cloud Storage credentials and none were found: set {CREDENTIALS_SETTING} to a "
                "service account key (JSON), run 'gcloud auth application-default login', or run on a Google Cloud VM "
                f"(Dataproc, GKE, Compute Engine); for a local GCS emulator set {EMULATOR_SETTING}=http://127.0.0.1:<port>"
            )

    def filesystem(self) -> "pafs.GcsFileSystem":
        from pyarrow import fs as pafs  # only where a gs:// root is used

        if self.emulator is None:
            return pafs.GcsFileSystem(retry_time_limit=RETRY_LIMIT)
        parts = urlsplit(self.emulator)
        return pafs.GcsFileSystem(
            anonymous=True, scheme=parts.scheme, endpoint_override=f"{parts.hostname}:{parts.port}", retry_time_limit=RETRY_LIMIT
        )


def storage_for(roots: list[str], environ: Mapping[str, str] = os.environ) -> GcsAccess | None:
    """How Spark must reach gs:// if any of ``roots`` is there; None when all are local."""
    return GcsAccess.from_environment(environ) if any(root.startswith("gs://") for root in roots) else None


def _gcloud_adc_file(environ: Mapping[str, str]) -> Path:
    config = environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    return Path(config) / "application_default_credentials.json"


def _on_google_cloud() -> bool:
    """A Google Cloud VM says so in its DMI product name (what google-auth checks before it asks
    the metadata server), so this needs no network."""
    try:
        return Path("/sys/class/dmi/id/product_name").read_text().startswith("Google")
    except OSError:
        return False
