"""Web forms for a site's objects and scenes (issue 30). Shapes only: every rule (names
unique in the site, http(s) photo URLs, no arrangement in the future) is
fleets.services.collection's, shown next to the fields it names."""

from django import forms

from fleets.models import SizeClass
from portal.forms.base import AccessibleFormMixin


class SiteObjectForm(AccessibleFormMixin, forms.Form):
    """The same fields as `POST /api/v1/fleet/objects`."""

    name = forms.CharField(
        label="Object name",
        max_length=100,
        help_text="How episodes name it (unique at this site; it never changes).",
    )
    category = forms.CharField(
        label="Category", max_length=60, required=False, help_text="e.g. mug, tool, fabric."
    )
    size_class = forms.ChoiceField(
        label="Size", required=False, choices=[("", "Not given"), *SizeClass.choices]
    )
    photo_url = forms.CharField(
        label="Photo URL", max_length=500, required=False, widget=forms.URLInput()
    )
    notes = forms.CharField(label="Notes", required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def to_fields(self) -> dict:
        return dict(self.cleaned_data)


class SceneForm(AccessibleFormMixin, forms.Form):
    """The same fields as `POST /api/v1/fleet/scenes`."""

    name = forms.CharField(
        label="Scene name",
        max_length=100,
        help_text="One arrangement of the site. A moved robot or camera is a new scene.",
    )
    table = forms.CharField(label="Table", max_length=200, required=False)
    background = forms.CharField(label="Background", max_length=200, required=False)
    lighting = forms.CharField(label="Lighting", max_length=200, required=False)
    camera_placement = forms.CharField(label="Camera placement", max_length=200, required=False)
    notes = forms.CharField(label="Notes", required=False, widget=forms.Textarea(attrs={"rows": 2}))
    arranged_at = forms.DateTimeField(
        label="Arranged at (UTC)",
        required=False,
        help_text="When this arrangement was set up, e.g. 2026-12-01 09:30. Empty: now."
        " Calibrations made before it are stale.",
    )

    def to_fields(self) -> dict:
        return dict(self.cleaned_data)
