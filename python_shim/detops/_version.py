"""The detops version: its one source (CMakeLists.txt and pyproject.toml read it)."""

__version__ = "0.1.0"
