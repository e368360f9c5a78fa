"""Helpers for tests/series/test_kagent_patch.py: the cached kagent-adk 0.9.11 venv (runtime_venv), and
the driver and test controller that run inside it (driver.py, controller.py)."""
