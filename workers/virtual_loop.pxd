# Compiles workers/virtual_loop.py with Cython as it is (no types: its classes derive from asyncio's Python classes); see native/__init__.py.
