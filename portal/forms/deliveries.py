"""Web forms for deliveries: the copy into the customer's own bucket."""

from django import forms

from portal.forms.base import AccessibleFormMixin


class BucketExportForm(AccessibleFormMixin, forms.Form):
    bucket = forms.CharField(label="Bucket", max_length=63, help_text="e.g. my-lab-datasets")
    prefix = forms.CharField(
        label="Folder in the bucket", max_length=300, required=False, help_text="Optional."
    )
    region = forms.CharField(label="Region", max_length=40, initial="us-east-1")
    endpoint_url = forms.CharField(
        label="S3 endpoint",
        max_length=300,
        required=False,
        help_text="Leave empty for AWS S3.",
    )
    access_key_id = forms.CharField(label="Access key id", max_length=128)
    secret_access_key = forms.CharField(
        label="Secret access key",
        max_length=256,
        strip=True,
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
    )

    def __init__(self, *args, prefix_id: str = "", **kwargs):
        if prefix_id:
            kwargs.setdefault("auto_id", f"export-{prefix_id}-%s")
        super().__init__(*args, **kwargs)
