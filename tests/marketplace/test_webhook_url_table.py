"""One webhook-URL rule for fleets and customers (issue 28, item 9), applied identically at
registration and at send: every URL of the table is refused by the customer endpoint
(PUT /organization/webhook), by the fleet endpoints (POST /fleet/fleets, PATCH
/fleet/fleets/<id>) with the same code and the same sentence, and by the send path with that
same sentence, with the development flag (`*_WEBHOOK_ALLOW_INSECURE`, the test suite's hook
for loopback receivers) off and on. Plain loopback URLs are refused with the flag off and
accepted with it on, by all three alike."""

import pytest
from django.test import override_settings

from fleets.models import Fleet
from marketplace.models import Organization
from tests.fleets.test_api import FLEET
from tests.marketplace.test_outbound_webhooks import send

# refused whatever the flag: other spellings of an address, internal ranges, non-URLs
HOSTILE = [
    "https://0177.0.0.1/",  # 127.0.0.1 in octal
    "https://2130706433/",  # 127.0.0.1 as one number
    "https://127.1/",
    "https://0x7f.1/",
    "https://0x7f000001/",
    "https://192.168.1.1./",  # a trailing dot
    "https://127.0.0.1./",
    "https://localhost./",
    "https://LocalHost./",
    "https://1.2.3/",
    "https://example.123/",  # ends in a number: an IPv4 address to a resolver
    "https://%31%32%37.0.0.1/",  # percent-encoded digits
    "https://\uff11\uff12\uff17.0.0.1/",  # fullwidth digits (IDNA maps them to 127)
    "https://[fe80::1%25eth0]/",  # an IPv6 zone
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:192.168.1.1]/",
    "https://10.0.0.1/",
    "https://192.168.1.1/",
    "https://169.254.169.254/latest/meta-data/",
    "https://100.64.0.1/",
    "https://[fd00::1]/",
    "https://0.0.0.0/",
    "https://224.0.0.1/",
    "https://-bad-.example/",
    "https://a..b.example/",
    "https://exa mple.com/",
    "https://example.com:99999/",
    "https://user:secret@example.com/",
    "https://@example.com/",
    "https:///hooks",
    "ftp://example.com/",
    "javascript:alert(1)",
    "not a url",
]
# loopback written plainly: only for local development and the suite's own receivers
LOOPBACK = ["https://127.0.0.1/", "https://localhost/", "https://[::1]/"]
FLAGS = ("CUSTOMER_WEBHOOK_ALLOW_INSECURE", "FLEETS_WEBHOOK_ALLOW_INSECURE")


def _customer(tenant, url: str):
    return tenant.client.put("/api/v1/organization/webhook", {"url": url}, format="json")


def _fleet_created(tenant, url: str):
    return tenant.client.post("/api/v1/fleet/fleets", {**FLEET, "webhook_url": url}, format="json")


def _fleet_patched(tenant, url: str):
    fleet = Fleet.objects.filter(organization=tenant.organization).first()
    if fleet is None:
        response = _fleet_created(tenant, "")
        assert response.status_code == 201, response.json()
        fleet = Fleet.objects.get(pk=response.json()["id"])
    return tenant.client.patch(
        f"/api/v1/fleet/fleets/{fleet.id}", {"webhook_url": url}, format="json"
    )


def _sent(url: str, insecure: bool):
    return send(url, timeout=2, allow_loopback=insecure)


def _refusal(response, field: str) -> str:
    assert response.status_code == 400, (response.request["PATH_INFO"], response.json())
    body = response.json()
    assert body["code"] == "invalid_webhook_url", body
    [message] = body["fields"][field]
    assert body["message"] == message
    return message


@pytest.mark.django_db
@pytest.mark.parametrize("insecure", [False, True], ids=["https-only", "insecure-flag"])
def test_every_hostile_url_is_refused_alike_by_both_registrations_and_the_send(
    customer, fleet_operator, insecure
):
    sentences = {}
    with override_settings(**dict.fromkeys(FLAGS, insecure)):
        for url in HOSTILE:
            as_customer = _refusal(_customer(customer, url), "url")
            created = _refusal(_fleet_created(fleet_operator, url), "webhook_url")
            patched = _refusal(_fleet_patched(fleet_operator, url), "webhook_url")
            sent = _sent(url, insecure)
            assert as_customer == created == patched, url  # one rule, one sentence
            assert not sent.ok and sent.permanent and sent.status_code is None, url
            assert sent.error == f"refused: {as_customer}"[:500], url
            sentences[url] = as_customer

    assert Organization.objects.get(pk=customer.organization.pk).webhook_url == ""
    assert set(Fleet.objects.values_list("webhook_url", flat=True)) == {""}
    assert sentences["https://0177.0.0.1/"] == (
        "Webhook URLs must be public addresses: '0177.0.0.1' is an IPv4 address written"
        " another way: write it as a.b.c.d."
    )
    assert sentences["https://192.168.1.1./"].endswith("without the trailing dot.")


@pytest.mark.django_db
@pytest.mark.parametrize("url", LOOPBACK)
def test_plain_loopback_is_for_the_insecure_flag_only_on_both_kinds(customer, fleet_operator, url):
    with override_settings(**dict.fromkeys(FLAGS, False)):
        refused = _refusal(_customer(customer, url), "url")
        assert _refusal(_fleet_created(fleet_operator, url), "webhook_url") == refused
        assert _sent(url, False).error == f"refused: {refused}"
        # a name under .localhost is loopback whatever DNS says (RFC 6761)
        sub = url.replace("//localhost", "//api.localhost")
        if sub != url:
            assert _refusal(_customer(customer, sub), "url").endswith("is a loopback name.")
            assert _refusal(_fleet_created(fleet_operator, sub), "webhook_url").endswith(
                "is a loopback name."
            )
            assert _sent(sub, False).error.endswith("is a loopback name.")
    with override_settings(**dict.fromkeys(FLAGS, True)):
        assert _customer(customer, url).status_code == 200
        created = _fleet_created(fleet_operator, url)
        assert created.status_code == 201 and created.json()["webhook_url"] == url
        assert not _sent(url, True).error.startswith("refused")  # (nothing listens there)
    assert Organization.objects.get(pk=customer.organization.pk).webhook_url == url
