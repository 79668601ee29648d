"""portal/ is the top floor: it may import every domain app, and none of them imports it.

Pages reach other apps by importing them, never through settings that name dotted paths."""

import ast
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
DOMAIN_APPS = ("marketplace", "orders", "fleets", "datasets", "billing")
# The project's wiring names every app: the one place that may include portal.urls.
WIRING = {"marketplace/urls.py", "marketplace/settings.py"}


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


def _python_files(app: str):
    for path in sorted((ROOT / app).rglob("*.py")):
        if path.relative_to(ROOT).as_posix() not in WIRING:
            yield path


def test_no_domain_app_imports_the_portal():
    offenders = {
        path.relative_to(ROOT).as_posix(): sorted(
            m for m in _imported_modules(path) if m == "portal" or m.startswith("portal.")
        )
        for app in DOMAIN_APPS
        for path in _python_files(app)
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_no_domain_app_names_the_portal_in_a_string():
    # e.g. include("portal.urls") or import_string("portal...") outside the project's wiring
    named = [
        path.relative_to(ROOT).as_posix()
        for app in DOMAIN_APPS
        for path in _python_files(app)
        if '"portal.' in path.read_text() or "'portal." in path.read_text()
    ]
    assert named == []


def test_pages_are_composed_in_code_not_settings():
    for name in (
        "ORDER_PAGE_SECTIONS",
        "JOB_PAGE_SECTIONS",
        "ORDER_ENVIRONMENT_HOURS",
        "FLEET_PORTAL_LINKS",
    ):
        assert not hasattr(settings, name), name
    for path in sorted((ROOT / "portal").rglob("*.py")):
        assert "import_string" not in path.read_text(), path.relative_to(ROOT).as_posix()
