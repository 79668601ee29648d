"""Every named API route resolves back to itself: no pattern earlier in the list (the hot
routes come first) takes another's paths."""

import uuid

from django.urls import URLPattern, URLResolver, get_resolver, resolve

SAMPLES = {"uuid": str(uuid.uuid4()), "int": "7", "slug": "a-slug", "str": "a-str", "path": "a/b"}


def routes(patterns, prefix=""):
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern) and entry.name:
            yield route, entry


def sample_path(route: str, pattern: URLPattern) -> str:
    path = route
    for name, converter in pattern.pattern.converters.items():
        kind = type(converter).__name__.removesuffix("Converter").lower()
        path = path.replace(f"<{kind}:{name}>", SAMPLES[kind]).replace(f"<{name}>", SAMPLES["str"])
    return "/" + path


def test_every_api_route_resolves_to_its_own_view():
    api = [(r, p) for r, p in routes(get_resolver().url_patterns) if r.startswith("api/v1/")]
    assert len(api) > 20 and any(r == "api/v1/quotes" for r, _ in api)
    for route, pattern in api:
        path = sample_path(route, pattern)
        if "<" in path:  # converters of their own: not sampled here
            continue
        assert resolve(path).url_name == pattern.name, (route, path, resolve(path).url_name)
