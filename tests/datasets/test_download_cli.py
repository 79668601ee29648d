"""`marketplace-download`: a 1,000-file delivery fetched through the audited link endpoint
(live server, local S3 server that checks signatures and expiry), killed with SIGKILL mid-way,
resumed, every file verified against manifest.json."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from django.db import connections

from datasets.models import DownloadEvent
from marketplace import services
from marketplace_client.download import JOURNAL, DeliveryDownloader, part_path
from marketplace_client.http import ApiClient, ApiError
from tests.datasets.synthetic_delivery import make_ready_delivery, synthetic_files

pytestmark = pytest.mark.django_db(transaction=True)


def run_cli(base_url, raw_key, delivery, dest, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marketplace_client.download",
            str(delivery.id),
            "--dest",
            str(dest),
            "--base-url",
            base_url,
            "--workers",
            "4",
            *extra,
        ],
        env={**os.environ, "MARKETPLACE_API_KEY": raw_key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def verified(dest) -> set:
    try:
        lines = (dest / JOURNAL).read_text().splitlines()
    except OSError:
        return set()
    paths = set()
    for line in lines:
        try:
            paths.add(json.loads(line)["path"])
        except ValueError:
            continue  # the line being written at the kill
    return paths


def verified_count(dest) -> int:
    return len(verified(dest))


def test_a_thousand_files_resume_after_sigkill_and_match_the_manifest(
    live_server, s3, customer, tmp_path
):
    # given: a ready delivery of 1,000 data files (+ info, card, manifest)
    files = synthetic_files(1000, size=1024)
    delivery = make_ready_delivery(customer.organization, files)
    dest = tmp_path / "dataset"

    # when: the command runs and is SIGKILLed once some files are in place
    first = run_cli(live_server.url, customer.raw_key, delivery, dest, "--quiet")
    deadline = time.monotonic() + 60
    while verified_count(dest) < 150 and time.monotonic() < deadline:
        assert first.poll() is None, first.stderr.read()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    done_before = verified_count(dest)
    assert 150 <= done_before < 1002, "killed too late to test resuming"
    # link requests the killed process had sent may still be answered (and recorded) by
    # the server, at any time: the second run has a key of its own, by which its links count
    second_key = services.api_key_create(
        organization=customer.organization,
        name="resume",
        created_by=customer.user,
        role=customer.api_key.role,
    )
    # a file cut off mid-way (its first half already on disk) and a damaged one
    state = verified(dest)
    missing = sorted(path for path in files if path not in state)
    cut, damaged = missing[0], missing[1]
    for path, content in ((cut, files[cut][: len(files[cut]) // 2]), (damaged, b"x" * 100)):
        part_path(dest, path).write_bytes(content)

    # and: it runs again to the end
    second = run_cli(live_server.url, second_key.raw_key, delivery, dest)
    out, err = second.communicate(timeout=240)

    # then: every file is there and matches the manifest; nothing verified was fetched again
    assert second.returncode == 0, (out, err)
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["failures"] == []
    assert summary["skipped"] >= done_before - 2  # the files verified before the kill
    assert summary["resumed"] >= 1  # the cut file continued by an HTTP Range request
    manifest = json.loads((dest / "manifest.json").read_text())
    assert len(manifest["files"]) == 1002
    for entry in manifest["files"]:
        data = (dest / entry["path"]).read_bytes()
        assert len(data) == entry["size"] and hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert data == files[entry["path"]]
    assert not list(dest.rglob("*.part"))  # (the partial files' folder is left empty)
    # every file went through the audited endpoint; the second run only for what was missing
    links_again = DownloadEvent.objects.filter(delivery=delivery, api_key=second_key.api_key)
    assert links_again.count() <= 1002 - done_before + 1 + 2  # + manifest, + re-fetches
    assert "All 1003 files verified against manifest.json" in err
    assert "LeRobotDataset(" in err


def test_the_installed_command_refuses_without_a_key_and_for_another_customer(
    live_server, s3, customer, other_customer, tmp_path
):
    delivery = make_ready_delivery(customer.organization, synthetic_files(3))
    # no key: a usage error
    no_key = subprocess.run(
        [sys.executable, "-m", "marketplace_client.download", str(delivery.id)],
        env={k: v for k, v in os.environ.items() if k != "MARKETPLACE_API_KEY"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_key.returncode == 2 and "MARKETPLACE_API_KEY" in no_key.stderr
    # another organization's key: the delivery does not exist for it
    other = run_cli(live_server.url, other_customer.raw_key, delivery, tmp_path / "x", "--quiet")
    _, err = other.communicate(timeout=60)
    assert other.returncode == 1 and "404" in err
    assert not DownloadEvent.objects.filter(delivery=delivery).exists()


def test_a_revoked_delivery_stops_the_download(live_server, s3, customer, tmp_path):
    delivery = make_ready_delivery(customer.organization, synthetic_files(5))
    delivery.revoked_at = delivery.ready_at
    delivery.save(update_fields=["revoked_at"])
    client = ApiClient(live_server.url, customer.raw_key)
    with pytest.raises(ApiError) as refused:
        DeliveryDownloader(client, str(delivery.id), tmp_path, quiet=True).run()
    assert refused.value.status == 409 and refused.value.code == "delivery_revoked"


def test_an_expired_signed_link_is_replaced_by_a_fresh_one(
    live_server, s3, customer, tmp_path, settings
):
    # given: a first link for each file that expired (1 s) before it is used; the fresh
    # links after it live for minutes (a 1 s fresh link could expire before its GET reached
    # storage on a busy machine)
    files = synthetic_files(2)
    delivery = make_ready_delivery(customer.organization, files)
    client = ApiClient(live_server.url, customer.raw_key)
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, quiet=True)
    real_link = downloader._link
    stale = {}
    signing = threading.Lock()  # the live server reads the expiry setting as it signs

    def signed(path, seconds):
        with signing:
            settings.DELIVERY_LINK_EXPIRY_SECONDS = seconds
            return real_link(path)

    def link(path):
        if path not in stale:  # the first link for each file is used only after it expired
            stale[path] = signed(path, 1)
            time.sleep(2.1)
            return stale[path]
        return signed(path, 600)

    downloader._link = link
    summary = downloader.run()
    assert summary.failures == [] and summary.fetched == len(files)
    for path, data in files.items():
        assert (tmp_path / path).read_bytes() == data


def test_links_come_in_a_few_batches_each_file_recorded_once(live_server, s3, customer, tmp_path):
    # given: 1,200 files (more than two full batches of 500)
    files = synthetic_files(1200, size=64)
    delivery = make_ready_delivery(customer.organization, files)
    client = ApiClient(live_server.url, customer.raw_key)
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, workers=8, quiet=True)
    # when
    summary = downloader.run()
    # then: every file verified; one audited link per file; batches from 32 doubling to 500
    assert summary.failures == [] and summary.fetched == len(files)
    events = DownloadEvent.objects.filter(delivery=delivery)
    assert events.count() == len(files) + 1  # + manifest.json
    assert sorted(events.values_list("path", flat=True)) == sorted([*files, "manifest.json"])
    assert set(events.values_list("api_key_id", flat=True)) == {customer.api_key.pk}
    assert downloader.links.batch_sizes == [32, 64, 128, 256, 500, 222]  # 1,202 files
    for path, data in files.items():
        assert (tmp_path / path).read_bytes() == data


def test_links_that_expire_in_the_book_are_renewed_before_storage_refuses_them(
    live_server, s3, customer, tmp_path, settings
):
    # given: links valid for 8 s, and a download slowed to 4 files a second per worker (60
    # files: ~7.5 s, past the 5.4 s the book trusts an 8 s link for, so links are renewed;
    # the book's margin before storage's expiry is then 1.6 s, which a busy machine's
    # scheduling does not eat up as it did the 0.5 s a 3 s link left)
    settings.DELIVERY_LINK_EXPIRY_SECONDS = 8
    files = synthetic_files(60, size=64)
    delivery = make_ready_delivery(customer.organization, files)
    client = ApiClient(live_server.url, customer.raw_key)
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, workers=2, quiet=True)
    refused = []
    real_stream = client.stream_to

    def slow_stream(url, part, **kwargs):
        time.sleep(0.25)
        try:
            return real_stream(url, part, **kwargs)
        except ApiError as exc:
            refused.append(exc.status)
            raise

    client.stream_to = slow_stream
    # when
    summary = downloader.run()
    # then: every file arrived; stale links were signed again in the book (not one by one
    # after storage refused them)
    assert summary.failures == [] and summary.fetched == len(files)
    assert refused == []
    assert downloader.links.requests >= 2
    assert DownloadEvent.objects.filter(delivery=delivery).count() > len(files) + 1
    for path, data in files.items():
        assert (tmp_path / path).read_bytes() == data


def test_a_delivery_revoked_mid_download_fails_the_files_still_waiting_for_links(
    live_server, s3, customer, tmp_path
):
    from marketplace_client.links import LinkBook

    files = synthetic_files(200, size=64)
    delivery = make_ready_delivery(customer.organization, files)
    client = ApiClient(live_server.url, customer.raw_key)
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, workers=2, quiet=True)
    real_request = downloader._request_links
    batches = []

    def request_then_revoke(paths):
        answer = real_request(paths)
        batches.append(len(paths))
        if len(batches) == 2:  # the manifest, then the first batch of files: revoke now
            customer.client.post(f"/api/v1/deliveries/{delivery.id}/revoke")
            connections.close_all()  # this runs in a download worker's thread
        return answer

    downloader._request_links = request_then_revoke
    downloader.links = LinkBook(request_then_revoke, batch=50, first_batch=50)
    summary = downloader.run()
    # the 50 files whose links came before the revocation arrived; the others failed with it
    assert summary.fetched == 50
    assert len(summary.failures) == len(files) - 50
    assert all("delivery_revoked" in failure for failure in summary.failures)
    assert DownloadEvent.objects.filter(delivery=delivery).count() == 1 + 50


def test_a_damaged_partial_file_is_fetched_again_whole(live_server, s3, customer, tmp_path):
    # given: a delivery, and a partial file left by an earlier run that holds wrong bytes
    files = synthetic_files(20, size=1024)
    delivery = make_ready_delivery(customer.organization, files)
    dest = tmp_path / "dataset"
    first = sorted(files)[0]
    (dest / first).parent.mkdir(parents=True)
    part_path(dest, first).parent.mkdir(parents=True)
    part_path(dest, first).write_bytes(b"x" * 100)
    # (and the file itself in place but not yet in the journal: killed within its flush)
    (dest / first).write_bytes(files[first])

    # when: the command runs
    run = run_cli(live_server.url, customer.raw_key, delivery, dest)
    out, err = run.communicate(timeout=120)

    # then: the resumed bytes do not match, so the file is fetched again whole, and all verify
    assert run.returncode == 0, (out, err)
    assert (dest / first).read_bytes() == files[first]
    assert json.loads(out.strip().splitlines()[-1])["failures"] == []


def test_a_file_that_failed_is_tried_once_more_before_it_is_reported(
    live_server, s3, customer, tmp_path
):
    from marketplace_client.http import TransientError

    files = synthetic_files(6)
    delivery = make_ready_delivery(customer.organization, files)
    client = ApiClient(live_server.url, customer.raw_key)
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, quiet=True)
    real_fetch, failing = downloader._fetch, sorted(files)[0]
    calls = []

    def fetch(entry, target, progress):
        calls.append(entry.path)
        if entry.path == failing and calls.count(failing) == 1:
            raise TransientError("storage kept answering 503")  # past the client's retries
        return real_fetch(entry, target, progress)

    downloader._fetch = fetch
    summary = downloader.run()
    assert summary.failures == [] and summary.fetched == len(files)
    assert calls.count(failing) == 2 and (tmp_path / failing).read_bytes() == files[failing]

    # a file that keeps failing is reported once, with its error
    calls.clear()
    (tmp_path / failing).unlink()
    (tmp_path / JOURNAL).unlink()
    downloader = DeliveryDownloader(client, str(delivery.id), tmp_path, quiet=True)
    real_fetch = downloader._fetch

    def down_for(entry, target, progress):
        if entry.path == failing:
            calls.append(entry.path)
            raise TransientError("storage is down")
        return real_fetch(entry, target, progress)

    downloader._fetch = down_for
    summary = downloader.run()
    assert summary.failures == [f"{failing}: storage is down"] and calls == [failing] * 2
