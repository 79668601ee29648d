from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders and catalog"

    def ready(self) -> None:
        from orders import catalog  # noqa: F401  (connects the catalog cache's invalidation)
