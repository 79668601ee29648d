from django.apps import AppConfig


class MarketplaceConfig(AppConfig):
    name = "marketplace"
    verbose_name = "Accounts"

    def ready(self):
        from marketplace import schema  # noqa: F401 - registers the OpenAPI auth extension
