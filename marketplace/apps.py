from django.apps import AppConfig


class MarketplaceConfig(AppConfig):
    name = "marketplace"
    verbose_name = "Accounts"

    def ready(self):
        from django.db.models.signals import post_delete, post_save, pre_delete

        # schema registers the auth scheme; api_key_cache connects its invalidation
        from marketplace import api_key_cache, receivers, schema  # noqa: F401
        from marketplace.models import Membership, User

        # Admin deletions and cascades included: the keys of whoever leaves stop working.
        post_delete.connect(
            receivers.on_membership_deleted, sender=Membership, dispatch_uid="keys.membership"
        )
        post_save.connect(receivers.on_user_saved, sender=User, dispatch_uid="keys.user")
        pre_delete.connect(receivers.on_user_deleting, sender=User, dispatch_uid="keys.user_del")
