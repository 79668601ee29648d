from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Newest first; the id breaks ties so the cursor never skips or repeats a row."""

    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        """`?page_size=` is a whole number from 1; above the maximum it is capped. Anything else
        is refused (DRF would quietly fall back to the default and hide the caller's mistake)."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"A whole number from 1 (at most {self.max_page_size} are returned)."
                    ]
                }
            )
        return min(size, self.max_page_size)
