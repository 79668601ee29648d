"""A revocation the key cache would not hear of cannot be written: API keys' bulk writes
(`QuerySet.update()`, `bulk_update()`) send no post_save, so every process would go on
accepting the key from its cache; `ApiKey.objects` refuses them for anything but
`last_used_at`, and the service's revocation (a save) is refused at once."""

import pytest
from django.utils import timezone

from marketplace import services
from marketplace.models import ApiKey

pytestmark = pytest.mark.django_db


def test_a_key_cannot_be_revoked_by_a_bulk_update(customer):
    keys = ApiKey.objects.filter(pk=customer.api_key.pk)
    with pytest.raises(TypeError, match="revoked_at change through save"):
        keys.update(revoked_at=timezone.now())
    with pytest.raises(TypeError, match="hashed_key, revoked_at change through save"):
        keys.update(revoked_at=timezone.now(), hashed_key="0" * 64)
    api_key = keys.get()
    api_key.revoked_at = timezone.now()
    with pytest.raises(TypeError, match="revoked_at change through save"):
        ApiKey.objects.bulk_update([api_key], ["revoked_at"])
    # nor through the organization's keys (the related manager is the same queryset)
    with pytest.raises(TypeError):
        customer.organization.api_keys.update(revoked_at=timezone.now())
    assert ApiKey.objects.get(pk=customer.api_key.pk).revoked_at is None
    # the one column written in bulk (marking the key used) still is
    assert keys.update(last_used_at=timezone.now()) == 1


def test_the_services_revocation_is_heard_by_the_next_request(customer):
    assert customer.client.get("/api/v1/me").status_code == 200  # the key is now cached
    services.api_key_revoke(api_key=customer.api_key)
    assert customer.client.get("/api/v1/me").status_code == 401
