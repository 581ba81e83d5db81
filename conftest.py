"""Root conftest for the project's own tests: enables the pytester fixture."""

pytest_plugins = ["pytester"]
