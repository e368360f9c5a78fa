"""What the tests share: constants, the ``Db`` handle and store helpers, the ADK harness, the
compiled Go controller stand-ins, the Matrix world, and the data they read (``vectors/``, the Go
overlays, the kagent runtime driver).

Importable as ``support`` because ``[tool.pytest.ini_options] pythonpath`` puts ``tests/`` on
``sys.path``; fixtures stay in ``tests/conftest.py``.  Nothing heavy is imported here: each
module is imported by the tests that need it.
"""
