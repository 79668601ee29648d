"""marketplace.services.customer_signup: a user, a customer organization, an owner membership."""

import pytest

from marketplace.errors import ServiceError
from marketplace.models import Membership, Organization, User
from marketplace.services import customer_signup

pytestmark = pytest.mark.django_db


def test_signup_makes_the_user_owner_of_a_new_customer_organization():
    organization = customer_signup(
        username=" ada ",
        email="Ada@Example.COM",
        password="pw-long-enough-1",
        organization_name="Lab",
    )
    user = User.objects.get(username="ada")
    assert user.email == "Ada@example.com"  # the domain is normalized
    assert user.check_password("pw-long-enough-1")
    assert organization.kind == Organization.Kind.CUSTOMER
    assert Membership.objects.get(user=user, organization=organization).role == "owner"


def test_signup_refuses_taken_usernames_and_emails_case_insensitively():
    customer_signup(
        username="ada", email="ada@example.com", password="x" * 12, organization_name="A"
    )
    with pytest.raises(ServiceError) as refused:
        customer_signup(
            username="ADA", email="ADA@example.com", password="x" * 12, organization_name=" "
        )
    assert set(refused.value.fields) == {"username", "email", "organization_name"}
    assert User.objects.count() == 1
    assert Organization.objects.count() == 1
