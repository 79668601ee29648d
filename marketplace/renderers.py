"""The API's JSON renderer: orjson (through drf-orjson-renderer), saying what DRF's JSONRenderer
said. orjson writes the built-in types itself (str, int, float, bool, None, dict, list, UUID,
date, time, datetime with "Z" for UTC as DRF writes it, enums, numpy); everything else goes
through DRF's own JSONEncoder.default (lazy translations, timedelta, a raw Decimal as a number
as DRF writes it: serializers give strings, bytes, QuerySets, IP addresses, iterables). Keys
that are not strings become strings as json.dumps makes them ("1", "true", "null").

Whatever orjson refuses (an integer beyond 64 bits, an aware time, an unknown type) is rendered
by DRF's JSONRenderer itself, so it succeeds or fails as before. One difference is kept: NaN and
infinities, which DRF refuses with an error (a 500), are written as null.
tests/marketplace/test_renderers.py compares both renderers on real endpoints' responses."""

import orjson
from drf_orjson_renderer.renderers import ORJSONRenderer
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_drf_default = JSONEncoder().default


class ApiJSONRenderer(ORJSONRenderer):
    options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS
    default = staticmethod(_drf_default)

    def render(self, data, media_type=None, renderer_context=None) -> bytes:
        try:
            return super().render(data, media_type, renderer_context)
        except orjson.JSONEncodeError:
            return JSONRenderer().render(data, media_type, renderer_context)
