from django.apps import AppConfig


class FleetsConfig(AppConfig):
    name = "fleets"
    verbose_name = "Fleets and dispatch"

    def ready(self) -> None:
        from fleets import receivers
        from orders import signals

        signals.order_paid.connect(receivers.on_order_paid, dispatch_uid="fleets.on_order_paid")
        signals.order_cancelled.connect(
            receivers.on_order_cancelled, dispatch_uid="fleets.on_order_cancelled"
        )
