"""The floor plan holds: imports point down, services never import tasks, the orders and
deliveries views share the order page without importing each other (import-linter's contracts
in pyproject.toml); modules and functions stay small enough to read; no setting names code to
import; no service hides a project import inside a function."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("marketplace", "orders", "fleets", "datasets", "billing", "portal", "fleet_agent")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def our_modules():
    for package in OUR_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path


def test_imports_point_down_the_floors():
    lint_imports = pathlib.Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_no_module_over_600_lines_and_no_function_over_80():
    too_long = []
    for path in our_modules():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert not too_long, "\n".join(too_long)


def test_no_domain_app_imports_code_by_name_from_settings():
    offenders = [
        str(path.relative_to(ROOT))
        for path in our_modules()
        if "import_string" in path.read_text() and path.parts[-2] != "tests"
    ]
    assert not offenders, offenders


def test_no_service_imports_project_code_inside_a_function():
    """An import inside a service's function hides a cycle import-linter cannot see (claims
    and disputes had one: their shared part is datasets/services/claim_grants.py now)."""
    hidden = []
    for path in our_modules():
        if "services" not in path.parts and path.name != "services.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    names = [inner.module]
                elif isinstance(inner, ast.Import):
                    names = [alias.name for alias in inner.names]
                else:
                    continue
                if any(name.split(".")[0] in OUR_PACKAGES for name in names):
                    hidden.append(f"{path.relative_to(ROOT)}:{inner.lineno} {names}")
    assert not hidden, hidden
