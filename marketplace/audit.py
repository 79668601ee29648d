"""Audit trails: rows that are never changed once written, and how an actor is named.

Every audit row (order and job events, ledger entries, download events) names who acted in
`actor_label`, always in one of these forms:
    "system:<part>"    the platform itself (dispatcher, qa, billing, ...)
    "staff:<username>" a staff member, in the admin or a staff tool
    "user:<username>"  a signed-in member of an organization
    "api_key:<prefix>" a program using an API key
"""

from django.db import models


class AppendOnlyModel(models.Model):
    """A row that is inserted once and never updated or deleted (audit, ledger)."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError(f"{self._meta.verbose_name_plural.capitalize()} are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError(f"{self._meta.verbose_name_plural.capitalize()} are append-only.")


def system_label(part: str) -> str:
    return f"system:{part}"


def user_label(user) -> str:
    prefix = "staff" if user.is_staff else "user"
    return f"{prefix}:{user.get_username()}"


def public_label(label: str) -> str:
    """The label as the customer or fleet the row concerns may see it: which staff member
    acted stays internal (`staff:alice` -> `staff`)."""
    return "staff" if label.startswith("staff:") else (label or "system")


def actor_label(caller=None, *, system: str = "system") -> str:
    """The label of a tenancy Caller (marketplace.tenancy), or `system` when there is none."""
    if caller is None:
        return system
    if caller.user is not None:
        return user_label(caller.user)
    if caller.api_key is not None:
        return f"api_key:{caller.api_key.prefix}"
    return system
