from django.apps import AppConfig


class FleetsConfig(AppConfig):
    name = "fleets"
    verbose_name = "Fleets and dispatch"

    def ready(self) -> None:
        from fleets import receivers
        from fleets.supply import supply_check
        from orders import signals
        from orders.supply import register_supply_check

        # orders asks it before a customer pays (orders cannot import fleets)
        register_supply_check(supply_check)

        signals.order_paid.connect(receivers.on_order_paid, dispatch_uid="fleets.on_order_paid")
        signals.order_cancelled.connect(
            receivers.on_order_cancelled, dispatch_uid="fleets.on_order_cancelled"
        )
