"""Reactions to accounts' own model changes (connected in apps.py). Thin: they call a service."""

from marketplace import services


def on_membership_deleted(sender, instance, **kwargs) -> None:
    services.api_keys_revoke_created_by(
        user=instance.user, organization_id=instance.organization_id
    )


def on_user_deleting(sender, instance, **kwargs) -> None:
    # Before the delete: it sets the keys' created_by to NULL, and they could not be found.
    services.api_keys_revoke_created_by(user=instance)


def on_user_saved(sender, instance, created, **kwargs) -> None:
    if not created and not instance.is_active:
        services.api_keys_revoke_created_by(user=instance)
