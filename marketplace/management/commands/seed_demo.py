"""Create demo accounts for a local run: a customer, a fleet operator and a staff admin.

Safe to run again: accounts are reused, and each run issues a fresh demo API key per
organization (revoking the previous one), since a key's secret is only shown once.
"""

import json

from django.core.management.base import BaseCommand
from django.db import transaction

from marketplace import services
from marketplace.models import ApiKey, Membership, Organization, User

DEMO_PASSWORD = "demo-pass-123"  # noqa: S105 - demo accounts on a local run, printed on purpose
DEMO_KEY_NAME = "demo key"


class Command(BaseCommand):
    help = "Create demo accounts and print their logins and fresh API keys."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print the credentials as JSON.")

    @transaction.atomic
    def handle(self, *args, **options):
        admin = self._user("admin", "admin@example.com", staff=True)
        customer = self._user("customer", "customer@example.com")
        operator = self._user("operator", "operator@example.com")
        customer_org = self._organization("Demo Robotics Lab", Organization.Kind.CUSTOMER, customer)
        fleet_org = self._organization(
            "Demo Teleop Factory", Organization.Kind.FLEET_OPERATOR, operator
        )
        credentials = {
            "password": DEMO_PASSWORD,
            "admin": admin.username,
            "customer": customer.username,
            "operator": operator.username,
            "customer_api_key": self._fresh_key(customer_org, customer),
            "fleet_api_key": self._fresh_key(fleet_org, operator),
            "customer_organization": str(customer_org.id),
            "fleet_organization": str(fleet_org.id),
        }
        if options["json"]:
            self.stdout.write(json.dumps(credentials))
            return
        self.stdout.write(
            "Demo accounts (password for all: {password}):\n"
            "  staff admin:     {admin}      -> /admin/\n"
            "  customer:        {customer}\n"
            "  fleet operator:  {operator}\n"
            "Customer API key:  {customer_api_key}\n"
            "Fleet API key:     {fleet_api_key}\n".format(**credentials)
        )

    def _user(self, username: str, email: str, staff: bool = False) -> User:
        user, created = User.objects.get_or_create(username=username, defaults={"email": email})
        if created:
            user.set_password(DEMO_PASSWORD)
            user.is_staff = user.is_superuser = staff
            user.save()
        return user

    def _organization(self, name: str, kind: str, owner: User) -> Organization:
        organization = Organization.objects.filter(name=name, kind=kind).first()
        if organization is None:
            organization = services.organization_create(name=name, kind=kind, owner=owner)
        Membership.objects.get_or_create(
            user=owner, organization=organization, defaults={"role": Membership.Role.OWNER}
        )
        return organization

    def _fresh_key(self, organization: Organization, owner: User) -> str:
        for old in ApiKey.objects.filter(
            organization=organization, name=DEMO_KEY_NAME, revoked_at=None
        ):
            services.api_key_revoke(api_key=old)
        return services.api_key_create(
            organization=organization,
            name=DEMO_KEY_NAME,
            created_by=owner,
            role=Membership.Role.OWNER,
        ).raw_key
