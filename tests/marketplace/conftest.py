import pytest
from django.db import connections


@pytest.fixture
def kept():
    """A second connection to the test database under the alias "kept", idle between
    'requests' and in autocommit as gunicorn's are; closed after the test."""
    wrapper = connections.create_connection("default")
    wrapper.alias = "kept"
    connections["kept"] = wrapper
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()
    del connections["kept"]
