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


class CompiledCursorSource:
    """What DRF's CursorPagination pages through, in place of a queryset: the page's statement
    compiled once per shape (marketplace/compiled_sql.py) and run with the request's values.

    `CompiledCursorSource(build, model=Order, position="created_at", organization_id="uuid")`,
    where `build(**values)` returns the `.values()` queryset of `model` to page through, stands
    for that
    queryset: `.bind(**values)` gives what `paginate_queryset` takes. The paginator itself is
    DRF's, unchanged (ordering, the cursor's position filter, offset, one row more than the
    page, `next`/`previous` links): of a queryset it only calls `order_by(*ordering)`,
    `filter(<position>__lt | __gt=<position text>)` and a slice, and lists the slice. Those
    calls are recorded here and are the statement's shape (the ordering, the position's
    comparison, the slice as LIMIT/OFFSET literals); the values (the bound ones and the
    cursor's position, prepared by the position field as the ORM prepares a lookup's value)
    are its parameters. Any other use raises TypeError. At most `max_shapes` shapes are kept
    per source; a shape beyond them is compiled for its one request."""

    def __init__(self, build, *, model, position: str, max_shapes: int = 64, **kinds: str):
        self.build = build
        self.position = position
        self.position_field = model._meta.get_field(position)
        self.kinds = kinds
        self.max_shapes = max_shapes
        self._shapes: dict[tuple, object] = {}

    def bind(self, **values) -> "_CompiledCursorQuery":
        if set(values) != set(self.kinds):
            raise TypeError(f"Expected the values {sorted(self.kinds)}, got {sorted(values)}.")
        return _CompiledCursorQuery(self, values, ordering=None, compare=None, window=None)

    def _query(self, ordering: tuple, compare: str | None, window: tuple):
        from marketplace.compiled_sql import CompiledQuery

        shape = (ordering, compare, window)
        query = self._shapes.get(shape)
        if query is None:
            kinds = dict(self.kinds, **({"_position": "datetime"} if compare else {}))

            def build(_position=None, **values):
                queryset = self.build(**values).order_by(*ordering)
                if compare:
                    queryset = queryset.filter(**{f"{self.position}__{compare}": _position})
                return queryset[window[0] : window[1]]

            query = CompiledQuery(build, **kinds)
            if len(self._shapes) < self.max_shapes:
                query = self._shapes.setdefault(shape, query)
        return query


class _CompiledCursorQuery:
    def __init__(self, source, values, *, ordering, compare, window, position_value=None):
        self._source, self._values = source, values
        self._ordering, self._compare, self._window = ordering, compare, window
        self._position_value = position_value

    def _with(self, **changes) -> "_CompiledCursorQuery":
        state = {
            "ordering": self._ordering,
            "compare": self._compare,
            "window": self._window,
            "position_value": self._position_value,
        }
        return _CompiledCursorQuery(self._source, self._values, **(state | changes))

    def order_by(self, *ordering):
        if self._window is not None:
            raise TypeError("Cannot reorder a slice.")
        return self._with(ordering=tuple(ordering))

    def filter(self, **lookups):
        (name, value), *more = lookups.items()
        field_name, _, compare = name.rpartition("__")
        if more or field_name != self._source.position or compare not in ("lt", "gt"):
            raise TypeError(f"Only {self._source.position}__lt or __gt, not {sorted(lookups)}.")
        if self._compare is not None or self._window is not None or self._ordering is None:
            raise TypeError("One position filter, after the ordering and before the slice.")
        prepared = self._source.position_field.get_prep_value(value)
        return self._with(compare=compare, position_value=prepared)

    def __getitem__(self, window):
        if not isinstance(window, slice) or window.step is not None or self._window is not None:
            raise TypeError("Only one slice [start:stop].")
        if self._ordering is None:
            raise TypeError("The ordering comes before the slice.")
        return self._with(window=(window.start or 0, window.stop))

    def __iter__(self):
        if self._window is None or self._window[1] is None:
            raise TypeError("Only a bounded slice is run.")
        query = self._source._query(self._ordering, self._compare, self._window)
        values = dict(self._values)
        if self._compare:
            values["_position"] = self._position_value
        return iter(query.values(**values))
