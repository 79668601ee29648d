"""Invoices: one per order, issued once (numbered without gaps per year) and never changed;
the customer's billing details; the PDF (WeasyPrint) of the same page customers see."""

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing.models import BillingProfile, Invoice, InvoiceCounter
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.models import Organization
from orders.models import Order
from orders.pricing import quantize_money

NOT_INVOICED = (Order.Status.DRAFT, Order.Status.CANCELLED)


def tax_split(total: Decimal, rate_percent: Decimal, currency: str) -> tuple[Decimal, Decimal]:
    """(net, tax) of a tax-inclusive total, rounded half-up to the minor unit; they add up."""
    if rate_percent <= 0:
        return total, Decimal("0").quantize(total)
    net = quantize_money(total * 100 / (100 + rate_percent), currency)
    return net, total - net


def _next_number(year: int) -> str:
    counter, _ = InvoiceCounter.objects.select_for_update().get_or_create(year=year)
    counter.last += 1
    counter.save(update_fields=["last"])
    return f"INV-{year}-{counter.last:06d}"


def invoice_for_order(*, order_id, organization: Organization) -> Invoice:
    """The order's invoice, issued now if it has none (the order locked, so once)."""
    existing = Invoice.objects.filter(order_id=order_id, organization=organization).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        order = (
            Order.objects.select_for_update().filter(pk=order_id, organization=organization).first()
        )
        if order is None:
            raise NotFound("Order not found.")
        existing = Invoice.objects.filter(order=order).first()
        if existing is not None:
            return existing
        if order.status in NOT_INVOICED:
            raise Conflict(f"An order that is {order.get_status_display().lower()} has no invoice.")
        now = timezone.now()
        profile = BillingProfile.objects.filter(organization=organization).first()
        rate = Decimal(settings.BILLING_TAX_RATE_PERCENT)
        net, tax = tax_split(order.total, rate, order.currency)
        number = _next_number(now.year)
        return Invoice.objects.create(
            number=number,
            order=order,
            organization=organization,
            issued_at=now,
            due_at=(now + timedelta(days=settings.BILLING_INVOICE_DUE_DAYS)).date(),
            seller_name=settings.BILLING_SELLER_NAME,
            seller_address=settings.BILLING_SELLER_ADDRESS,
            seller_tax_id=settings.BILLING_SELLER_TAX_ID,
            buyer_name=profile.legal_name if profile else organization.name,
            buyer_address=profile.address if profile else "",
            buyer_tax_id=profile.tax_id if profile else "",
            currency=order.currency,
            lines=order.lines,
            total=order.total,
            tax_rate_percent=rate,
            tax_amount=tax,
            net_amount=net,
            tax_note=settings.BILLING_TAX_NOTE[:300],
            payment_reference=f"MK-{number.removeprefix('INV-')}",
            bank_account_name=settings.BILLING_BANK_ACCOUNT_NAME,
            bank_iban=settings.BILLING_BANK_IBAN,
            bank_bic=settings.BILLING_BANK_BIC,
        )


def billing_profile_save(
    *, organization: Organization, legal_name: str, address: str, tax_id: str, email: str
) -> BillingProfile:
    """What the next invoices say about the customer (issued ones never change)."""
    if not legal_name.strip():
        raise invalid("legal_name", "Enter the name invoices are made out to.")
    profile, _ = BillingProfile.objects.update_or_create(
        organization=organization,
        defaults={
            "legal_name": legal_name.strip()[:200],
            "address": address.strip(),
            "tax_id": tax_id.strip()[:40],
            "email": email.strip(),
        },
    )
    return profile


def invoice_pdf(*, html: str, base_url: str) -> bytes:
    """The invoice page as a PDF (WeasyPrint renders HTML and CSS; no browser needed)."""
    from weasyprint import HTML

    return HTML(string=html, base_url=base_url).write_pdf()
