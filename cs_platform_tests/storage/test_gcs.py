"""Landing on gs:// through a real GCS emulator (fake-gcs-server): the same files as on a local
disk, one object per read, whole or absent, rewritten whole when a read is landed again; and a gs://
root that cannot be reached is refused at once, naming the settings."""


import gzip
from datetime import timedelta

import pytest

from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import ROOT_SETTING, LandedRange, LandingStore, landed_range
from cs_platform.storage.gcs import CREDENTIALS_SETTING, EMULATOR_SETTING, StorageAccessError
from cs_platform.storage.location import Location
from cs_platform_tests.landing.test_store import T0, batch, landed_two_reads, record


def test_landing_on_gcs_is_one_whole_object_per_read_and_idempotent(gcs_bucket):
    store = LandingStore(f"{gcs_bucket}/landing")
    store.check_writable()
    read = batch(record("00000000", 2), record("00000001", 1))
    first = store.write("BankStream", "initial", read)
    assert first.path.startswith(f"{gcs_bucket}/landing/BankStream/initial/") and first.rows == 3
    again = store.write("BankStream", "initial", read)  # a run that died before its watermark moved lands it again
    assert again == first and store.files("BankStream") == [first.path]
    assert store.read("BankStream").num_rows == 3
    with store.filesystem.open_input_stream(first.path.removeprefix("gs://"), compression=None) as obj:
        assert len(gzip.decompress(obj.read()).splitlines()) == 3


def test_landed_range_reads_the_names_of_gcs_objects(gcs_bucket):
    files = landed_two_reads(LandingStore(f"{gcs_bucket}/landing"))
    bounds = (T0 - timedelta(seconds=5), T0 + timedelta(seconds=5))
    assert files[0].startswith("gs://") and landed_range(files) == LandedRange(5, *bounds)


def test_a_write_that_fails_midway_leaves_no_object(gcs_bucket):
    location = Location(f"{gcs_bucket}/landing", ROOT_SETTING)
    path = f"{location.base}/BankStream/initial/part.parquet"

    def fails_midway(out):
        out.write(b"PAR1 half a file")
        raise OSError("the writer died")

    with pytest.raises(OSError, match="the writer died"):
        location.write_atomic(path, fails_midway)
    assert not location.exists(path)


def test_reset_removes_a_tree_on_gcs(gcs_bucket):
    store = LandingStore(f"{gcs_bucket}/landing")
    store.write("BankStream", "initial", batch(record("00000000", 1)))
    assert store.location.delete_tree(store.stream_directory("BankStream"))
    assert store.files("BankStream") == [] and not store.location.delete_tree(store.stream_directory("BankStream"))


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No emulator, no key file, no gcloud login; not a Google Cloud VM (this machine is none)."""
    monkeypatch.delenv(EMULATOR_SETTING, raising=False)
    monkeypatch.delenv(CREDENTIALS_SETTING, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))


def test_gcs_without_an_endpoint_or_credentials_is_refused_at_once_naming_the_settings(no_credentials, spark, monkeypatch, tmp_path):
    with pytest.raises(StorageAccessError, match=rf"{ROOT_SETTING}='gs://bucket/landing' needs Cloud Storage credentials.*{CREDENTIALS_SETTING}.*{EMULATOR_SETTING}"):
        LandingStore("gs://bucket/landing")  # what the first sensor tick builds and checks
    with pytest.raises(StorageAccessError, match=r"CS_PLATFORM_LAKE_ROOT='gs://bucket/lake/BankStream' needs Cloud Storage credentials"):
        Lake(spark, "gs://bucket/lake/BankStream")  # what a lake run opens first
    monkeypatch.setenv(CREDENTIALS_SETTING, str(tmp_path / "missing-key.json"))
    with pytest.raises(StorageAccessError, match=rf"{CREDENTIALS_SETTING}='.*missing-key.json' is not a file"):
        LandingStore("gs://bucket/landing")
    monkeypatch.setenv(EMULATOR_SETTING, "not a url")
    with pytest.raises(StorageAccessError, match=rf"{EMULATOR_SETTING}='not a url' is not http://host:port"):
        LandingStore("gs://bucket/landing")
