"""Build-time version of the detops wheel (a scikit-build-core metadata provider, see pyproject.toml).

The version is python_shim/detops/_version.py's, with the torch the wheel is built against as a local
version label: ``0.1.0+torch2.11.0.cu130``. libdetops.so is built against that exact torch (its C++ ABI),
and ``import detops`` refuses any other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

__all__ = ["dynamic_metadata", "environment_torch_version"]


def environment_torch_version() -> str:
    """torch.__version__ of the environment pip runs in. NB: pip's build isolation hides that environment's
    site-packages through PYTHONPATH; the probe runs the same interpreter without it, as CMake does."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError("detops builds against the torch of the environment it is installed into, and "
                           f"{sys.executable} cannot import torch: {probe.stderr.strip()[-500:]}")
    return probe.stdout.strip()


def dynamic_metadata(field: str, settings: Mapping[str, Any] | None = None) -> str:
    if field != "version":
        raise RuntimeError(f"detops_version provides the version only, not {field!r}")
    source = Path(__file__).resolve().parent.parent / "python_shim" / "detops" / "_version.py"
    match = re.search(r'^__version__ = "([0-9]+\.[0-9]+\.[0-9]+)"$', source.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no __version__ in {source}")
    local = re.sub(r"[^A-Za-z0-9.]", ".", environment_torch_version())
    return f"{match.group(1)}+torch{local}"
