"""What the customers' dataset endpoints share: the caller's organization, and for the
endpoints under one of its orders, that order (another tenant's is a 404) and the ordering
role required to change anything there."""

from rest_framework.permissions import IsAuthenticated

from marketplace.errors import NotFound
from marketplace.permissions import CanOrder, IsCustomer
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle
from orders.models import Order
from orders.selectors import order_list


class CustomerApi:
    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]

    @property
    def organization(self):
        return caller_for_request(self.request).organization


class CustomerOrderApi(CustomerApi):
    """An endpoint under `orders/<pk>/`: anyone of the customer reads, POST needs CanOrder."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [IsAuthenticated(), IsCustomer(), CanOrder()]
        return super().get_permissions()

    def customer_order(self) -> Order:
        order = order_list(organization=self.organization).filter(pk=self.kwargs["pk"]).first()
        if order is None:
            raise NotFound("Order not found.")
        return order
