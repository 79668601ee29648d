"""Locust users for bench/load_bench.py: one user class per endpoint measured, plus `Mixed`
(every endpoint at once, weighted). The seeded world (API keys and ids) comes from the JSON
file named by LOAD_WORLD. Each request checks its status code (and what it must contain), so
anything else counts as a failure: a 500, a 409 from a lost race, a wrong idempotent replay.
"""

import hashlib
import json
import os
import random
import uuid

from locust import FastHttpUser, constant, events, task

from bench.load_scenarios import ENDPOINTS, user_class_name

WORLD = json.loads(open(os.environ["LOAD_WORLD"]).read())  # noqa: SIM115 - read once at import

DATASET_REQUEST = {
    "task_type": "peg-insertion",
    "embodiment": "franka-fr3",
    "hours": "120",
    "environments": 4,
    "sensors": ["wrist-camera"],
    "rush": True,
}


# What each successful write created, as "<kind> <marker>" lines: the bench compares them with
# the rows in the database afterwards (lost or duplicated writes).
WRITES: list[str] = []


@events.quitting.add_listener
def _save_writes(environment, **kwargs):
    with open(os.environ["LOAD_WRITES"], "a") as handle:
        handle.writelines(f"{line}\n" for line in WRITES)


class BenchUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)  # closed loop: each user sends its next request on an answer

    def on_start(self):
        self.customer = random.choice(WORLD["customers"])
        self.fleet = random.choice(WORLD["fleets"])
        self.replay: tuple[str, dict, str] | None = None  # (key, body, order id) to retry

    def call(self, method, path, *, name, key=None, body=None, expected=200, headers=None):
        headers = dict(headers or {})
        if key:
            headers["Authorization"] = f"Bearer {key}"
        with self.client.request(
            method, path, json=body, headers=headers, name=name, catch_response=True
        ) as response:
            if response.status_code != expected:
                response.failure(f"{response.status_code}: {(response.text or '')[:300]}")
                return None
            payload = response.json()
            response.success()
            return response, payload

    # --- the endpoints (each a task of its own user class below) --------------------------

    def bare(self):
        self.call("POST", "/bench/bare", name="bare", body={"hours": "120"}, expected=201)

    def order_list(self):
        done = self.call(
            "GET", "/api/v1/orders", name="order list", key=self.customer["key"], expected=200
        )
        if done and len(done[1]["results"]) != min(50, len(self.customer["orders"])):
            done[0].failure("wrong page size")

    def order_detail(self):
        order = random.choice(self.customer["orders"])
        self.call("GET", f"/api/v1/orders/{order}", name="order detail", key=self.customer["key"])

    def coverage(self):
        order = random.choice(self.customer["orders_in_collection"])
        done = self.call(
            "GET", f"/api/v1/orders/{order}/coverage", name="coverage", key=self.customer["key"]
        )
        if done and not done[1]["environments"]:
            done[0].failure("coverage without environments")

    def deliveries(self):
        order = random.choice(self.customer["orders_delivered"])
        done = self.call(
            "GET", f"/api/v1/orders/{order}/deliveries", name="deliveries", key=self.customer["key"]
        )
        if done and len(done[1]["results"]) != 1:
            done[0].failure("expected one delivery")

    def fleet_jobs(self):
        self.call("GET", "/api/v1/fleet/jobs", name="fleet job list", key=self.fleet["key"])

    def quote_preview(self):
        self.call(
            "POST",
            "/api/v1/quotes/preview",
            name="quote preview",
            key=self.customer["key"],
            body=DATASET_REQUEST,
        )

    def quote_create(self):
        self.call(
            "POST",
            "/api/v1/quotes",
            name="quote create",
            key=self.customer["key"],
            body=DATASET_REQUEST,
            expected=201,
        )

    def order_create(self):
        """A new order with a fresh Idempotency-Key; one time in four, a retry of the last one,
        which must return the same order without creating another."""
        if self.replay and random.random() < 0.25:
            idem_key, body, order_id = self.replay
            self.replay = None
            done = self.call(
                "POST",
                "/api/v1/orders",
                name="order create",
                key=self.customer["key"],
                body=body,
                expected=201,
                headers={"Idempotency-Key": idem_key},
            )
            if done and (
                done[1]["id"] != order_id or done[0].headers.get("Idempotent-Replayed") != "true"
            ):
                done[0].failure("an idempotent retry did not replay the first order")
            return
        idem_key = str(uuid.uuid4())
        body = {**DATASET_REQUEST, "notes": f"load {idem_key}"}
        done = self.call(
            "POST",
            "/api/v1/orders",
            name="order create",
            key=self.customer["key"],
            body=body,
            expected=201,
            headers={"Idempotency-Key": idem_key},
        )
        if done:
            self.replay = (idem_key, body, done[1]["id"])
            WRITES.append(f"order {idem_key}")

    def episode_register(self):
        job = random.choice(self.fleet["jobs"])
        size = random.randint(10_000, 1_000_000)
        marker = str(uuid.uuid4())
        done = self.call(
            "POST",
            f"/api/v1/fleet/jobs/{job['id']}/episodes",
            name="episode register",
            key=self.fleet["key"],
            body={
                "site": job["site"],
                "robot": job["robot"],
                "operator": f"op-{random.randint(1, 5)}",
                "task_instruction": f"insert the peg {marker}",
                "success": True,
                "fps": 30,
                "size_bytes": size,
                "sha256": hashlib.sha256(str(size).encode()).hexdigest(),
                "frames": 30,
            },
            expected=201,
        )
        if done:
            WRITES.append(f"episode {marker}")


def _only(method_name: str):
    """A task that calls one endpoint method of BenchUser."""
    return task(lambda self: getattr(self, method_name)())


# One user class per endpoint (`locust ... OrderList`), registered as module globals so that
# locust finds them; and Mixed, every endpoint but the yardstick at once, by weight.
for _name, (_method, _weight) in ENDPOINTS.items():
    globals()[user_class_name(_name)] = type(
        user_class_name(_name), (BenchUser,), {"tasks": [_only(_method)]}
    )


class Mixed(BenchUser):
    tasks = {_only(method): weight for method, weight in ENDPOINTS.values() if weight}
