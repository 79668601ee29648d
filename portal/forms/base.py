"""What every portal form shares: accessible markup and a service's refusals on the fields."""

from marketplace.errors import ServiceError


class AccessibleFormMixin:
    """Ties every input to its help text and error slot (aria-describedby, aria-invalid).

    The slot `id_<field>_error` is always rendered (see portal/_field.html), so the same
    place shows server-side errors and the errors live scripts report.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            bound = self[name]
            described = [f"{bound.auto_id}_error"]
            if field.help_text:
                described.insert(0, f"{bound.auto_id}_helptext")
            field.widget.attrs.setdefault("aria-describedby", " ".join(described))

    def full_clean(self):
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["aria-invalid"] = "true"

    def add_service_error(self, error: ServiceError) -> None:
        """A service's refusal, shown next to the fields it names (else above the form)."""
        for name, messages in (error.fields or {}).items():
            target = name if name in self.fields else None
            for message in messages if isinstance(messages, list | tuple) else [messages]:
                self.add_error(target, str(message))
        if not error.fields:
            self.add_error(None, error.message)
