"""The portal's pages, one module per area; portal/urls.py maps every web URL to them."""
