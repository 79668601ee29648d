"""A ready delivery made directly in storage (no assembly): any number of files of any size,
with its manifest.json and DeliveryFile rows, for download, archive and export tests."""

import hashlib
import json
import random
from concurrent.futures import ThreadPoolExecutor

from django.utils import timezone

from datasets import storage
from datasets.models import Delivery, DeliveryFile
from orders.models import Order
from tests.factories import OrderFactory


def synthetic_files(count: int, *, size: int = 2048, big: int = 0, seed: int = 7) -> dict:
    """{path: bytes}: `count` files under data/ (some bigger when `big` bytes are asked)."""
    rng = random.Random(seed)
    files = {}
    for index in range(count):
        length = big if big and index % 100 == 0 else size + rng.randrange(0, size)
        files[f"data/chunk-{index // 500:03d}/file-{index:04d}.bin"] = rng.randbytes(length)
    files["meta/info.json"] = json.dumps({"codebase_version": "v3.0", "fps": 30}).encode()
    files["README.md"] = b"# A synthetic delivery\n"
    return files


def make_ready_delivery(organization, files: dict, *, order=None, workers: int = 8) -> Delivery:
    order = order or OrderFactory(organization=organization, status=Order.Status.DELIVERED)
    delivery = Delivery(order=order, kind=Delivery.Kind.FULL)
    delivery.prefix = f"deliveries/{order.id}/{delivery.id}"
    manifest = {
        "version": 1,
        "order": str(order.id),
        "delivery": str(delivery.id),
        "files": [
            {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for path, data in sorted(files.items())
        ],
    }
    manifest_bytes = json.dumps(manifest, indent=2).encode()
    everything = {**files, "manifest.json": manifest_bytes}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(
            pool.map(
                lambda item: storage.put_bytes(key=f"{delivery.prefix}/{item[0]}", data=item[1]),
                everything.items(),
            )
        )
    delivery.status = Delivery.Status.READY
    delivery.ready_at = timezone.now()
    delivery.episodes = 1
    delivery.save(force_insert=True)
    DeliveryFile.objects.bulk_create(
        [
            DeliveryFile(
                delivery=delivery,
                path=path,
                size_bytes=len(data),
                sha256="" if path == "manifest.json" else hashlib.sha256(data).hexdigest(),
            )
            for path, data in everything.items()
        ]
    )
    return delivery
