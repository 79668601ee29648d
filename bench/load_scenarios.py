"""The endpoints bench/load_bench.py measures, shared with its locustfile (which the bench
process must not import: locust monkey-patches the standard library with gevent)."""

# request name -> (BenchUser method, weight in the mixed scenario; 0: not in it)
ENDPOINTS = {
    "order list": ("order_list", 4),
    "order detail": ("order_detail", 6),
    "coverage": ("coverage", 3),
    "deliveries": ("deliveries", 2),
    "fleet job list": ("fleet_jobs", 3),
    "quote preview": ("quote_preview", 4),
    "quote create": ("quote_create", 2),
    "order create": ("order_create", 1),
    "episode register": ("episode_register", 3),
    "bare": ("bare", 0),
}


def user_class_name(endpoint: str) -> str:
    """The locust user class that calls only this endpoint: "order list" -> OrderList."""
    return "".join(part.capitalize() for part in endpoint.split())
