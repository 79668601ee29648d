"""Every web page's URL (server-rendered, session auth), included at the site root by
marketplace/urls.py. The API, the admin, probes and the Stripe webhook are wired there."""

from django.contrib.auth import views as auth_views
from django.urls import path

from portal.views import (
    accounts,
    billing,
    deliveries,
    disputes,
    exclusions,
    fleet,
    fleet_collection,
    media,
    operators,
    orders,
    staff,
)

urlpatterns = [
    # Accounts: home, sign up, log in and out, API keys (owners)
    path("", accounts.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("signup/", accounts.signup, name="signup"),
    path("signup/operator/", accounts.operator_signup, name="operator-signup"),
    path(
        "accounts/password-reset/",
        auth_views.PasswordResetView.as_view(
            template_name="portal/accounts/password_reset.html",
            email_template_name="portal/accounts/password_reset_email.txt",
            subject_template_name="portal/accounts/password_reset_subject.txt",
        ),
        name="password_reset",
    ),
    path(
        "accounts/password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(
            template_name="portal/accounts/password_reset_sent.html"
        ),
        name="password_reset_done",
    ),
    path(
        "accounts/reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            template_name="portal/accounts/password_reset_confirm.html"
        ),
        name="password_reset_confirm",
    ),
    path(
        "accounts/reset/done/",
        auth_views.PasswordResetCompleteView.as_view(
            template_name="portal/accounts/password_reset_complete.html"
        ),
        name="password_reset_complete",
    ),
    path("account/api-keys/", accounts.api_keys, name="api-keys"),
    path(
        "account/api-keys/<uuid:pk>/revoke/",
        accounts.api_key_revoke,
        name="api-key-revoke-page",
    ),
    # Customers: catalog, pricing, the order wizard, orders
    path("catalog/", orders.catalog, name="catalog"),
    path("pricing/", orders.price_calculator, name="pricing"),
    path("prices/", orders.price_list, name="price-list"),
    path("orders/", orders.order_list_page, name="order-list-page"),
    path("orders/new/", orders.order_new, name="order-new"),
    path("orders/new/<uuid:quote_id>/", orders.order_new_quote, name="order-new-quote"),
    path("orders/<uuid:pk>/", orders.order_detail, name="order-detail-page"),
    path("orders/<uuid:pk>/live/", orders.order_live, name="order-live-page"),
    path("orders/<uuid:pk>/episodes/", orders.order_episodes, name="order-episodes-page"),
    path(
        "orders/<uuid:pk>/exclusions/",
        exclusions.order_exclusions_page,
        name="order-exclusions-page",
    ),
    path(
        "orders/<uuid:pk>/episodes/<uuid:episode_pk>/",
        media.episode_detail,
        name="episode-detail-page",
    ),
    path(
        "orders/<uuid:pk>/episodes/<uuid:episode_pk>/poster/<str:camera_key>.jpg",
        media.episode_poster,
        name="episode-poster",
    ),
    path(
        "orders/<uuid:pk>/episodes/<uuid:episode_pk>/clip/<str:camera_key>",
        media.episode_clip,
        name="episode-clip",
    ),
    path("orders/<uuid:pk>/invoice/", billing.invoice_page, name="invoice-page"),
    path("orders/<uuid:pk>/invoice.pdf", billing.invoice_pdf_page, name="invoice-pdf-page"),
    path("orders/<uuid:pk>/cancel/", orders.order_cancel, name="order-cancel-page"),
    path("orders/<uuid:pk>/pay/", billing.order_pay_page, name="order-pay-page"),
    # Customers: deliveries (audited downloads, pilot review, revocation)
    path(
        "deliveries/<uuid:pk>/download/",
        deliveries.delivery_download_page,
        name="delivery-download-page",
    ),
    path(
        "deliveries/<uuid:pk>/archive.tar",
        deliveries.delivery_archive_page,
        name="delivery-archive-page",
    ),
    path(
        "deliveries/<uuid:pk>/export/", deliveries.delivery_export_page, name="delivery-export-page"
    ),
    path("downloads/marketplace-download.pyz", deliveries.download_client, name="download-client"),
    path("deliveries/<uuid:pk>/review/", deliveries.pilot_review_page, name="pilot-review-page"),
    path(
        "deliveries/<uuid:pk>/revoke/",
        deliveries.delivery_revoke_page,
        name="delivery-revoke-page",
    ),
    # Fleet operators: fleets, sites, robots, offers, jobs, earnings
    path("fleet/", fleet.fleet_overview, name="fleet-overview-page"),
    path("fleet/fleets/new/", fleet.fleet_new, name="fleet-new-page"),
    path("fleet/fleets/<uuid:pk>/", fleet.fleet_detail, name="fleet-detail-page"),
    path("fleet/fleets/<uuid:pk>/edit/", fleet.fleet_edit, name="fleet-edit-page"),
    path("fleet/fleets/<uuid:pk>/sites/new/", fleet.site_new, name="site-new-page"),
    path("fleet/fleets/<uuid:pk>/robots/new/", fleet.robot_new, name="robot-new-page"),
    path("fleet/sites/<uuid:pk>/edit/", fleet.site_edit, name="site-edit-page"),
    path("fleet/robots/<uuid:pk>/edit/", fleet.robot_edit, name="robot-edit-page"),
    # the collection plan (issue 30): a site's objects and scenes, a robot's calibrations
    path(
        "fleet/sites/<uuid:pk>/collection/",
        fleet_collection.site_collection,
        name="site-collection-page",
    ),
    path(
        "fleet/robots/<uuid:pk>/calibrations/",
        fleet_collection.robot_calibrations,
        name="robot-calibrations-page",
    ),
    path("fleet/offers/", fleet.offer_list, name="offer-list-page"),
    path("fleet/offers/<uuid:pk>/accept/", fleet.offer_accept, name="offer-accept-page"),
    path("fleet/offers/<uuid:pk>/decline/", fleet.offer_decline, name="offer-decline-page"),
    path("fleet/jobs/", fleet.job_list, name="job-list-page"),
    path("fleet/operators/", operators.fleet_operators, name="fleet-operators-page"),
    path("fleet/jobs/<uuid:pk>/", fleet.job_detail, name="job-detail-page"),
    path("fleet/jobs/<uuid:pk>/collect/", fleet.job_collect, name="job-collect-page"),
    path("fleet/earnings/", billing.fleet_earnings_page, name="fleet-earnings-page"),
    path("fleet/disputes/", disputes.fleet_dispute_list, name="fleet-disputes-page"),
    path("fleet/disputes/<uuid:pk>/", disputes.fleet_dispute_page, name="fleet-dispute-page"),
    # Staff: what needs attention, the dispatch board, recording bank transfers
    path("staff/", staff.attention, name="staff-attention"),
    path("staff/dispatch/", staff.dispatch_board, name="staff-dispatch"),
    path("staff/disputes/", disputes.staff_dispute_queue, name="staff-disputes"),
    path("staff/disputes/<uuid:pk>/", disputes.staff_dispute_page, name="staff-dispute-page"),
    path("staff/jobs/<uuid:pk>/redispatch/", staff.job_redispatch_page, name="staff-redispatch"),
    path(
        "staff/orders/<uuid:pk>/exclusions/",
        exclusions.staff_order_exclusions_page,
        name="staff-order-exclusions-page",
    ),
    path(
        "staff/deliveries/<uuid:pk>/retry/", staff.delivery_retry_page, name="staff-delivery-retry"
    ),
    path("staff/flags/<int:pk>/resolve/", staff.flag_resolve_page, name="staff-flag-resolve"),
    path(
        "staff/orders/<uuid:pk>/bank-transfer/",
        staff.bank_transfer_page,
        name="staff-bank-transfer",
    ),
]
