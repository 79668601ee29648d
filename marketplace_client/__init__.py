"""The marketplace's Python client, standard library only: the HTTP transport shared with the
reference fleet agent (`marketplace_client.http`) and the customer's whole-dataset download
(`marketplace_client.download`, the `marketplace-download` command)."""

from marketplace_client.http import ApiClient, ApiError, RetryPolicy, TransientError

__all__ = ["ApiClient", "ApiError", "RetryPolicy", "TransientError"]
