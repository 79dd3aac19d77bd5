"""pip wheel . / pip install: a wheel built against this environment's torch, named for it, installed into
a scratch directory and imported from elsewhere with no detops variables set; and the refusal to load
into another torch."""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import detops

REPO = pathlib.Path(__file__).resolve().parents[2]


def _env_without_detops():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETOPS_") and k != "PYTHONPATH"}
    # Where ccache is installed: shares compiled objects with build/ (scripts/build.sh sets the same).
    env["CCACHE_BASEDIR"] = str(REPO)
    env["CCACHE_NOHASHDIR"] = "1"
    return env


def _wheel_architectures():
    """build/'s CUDA architectures where build/ was compiled through ccache: the wheel build then compiles
    nothing build/ has not (scripts/build.sh). Otherwise 90 alone keeps this second build of the library short."""
    library = os.environ.get("DETOPS_LIBRARY")
    cache = pathlib.Path(library).parent / "CMakeCache.txt" if library else None
    if cache is not None and cache.is_file():
        text = cache.read_text()
        launcher = re.search(r"^CCACHE_PROGRAM:FILEPATH=(.+)$", text, re.MULTILINE)
        archs = re.search(r"^DETOPS_CUDA_ARCHITECTURES:STRING=(.+)$", text, re.MULTILINE)
        if launcher and not launcher.group(1).endswith("NOTFOUND") and archs:
            return archs.group(1).strip()
    return "90"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-w", str(wheels),
                            f"--config-settings=cmake.define.DETOPS_CUDA_ARCHITECTURES={_wheel_architectures()}"],
                           capture_output=True, text=True, env=_env_without_detops(), timeout=1800)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("detops-*.whl")
    target = tmp_path_factory.mktemp("site")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target),
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    return wheel, target


def _python_in(target, code):
    env = _env_without_detops()
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=pathlib.Path(target).anchor, timeout=300)


def test_the_wheel_names_the_torch_it_was_built_for(installed):
    wheel, _ = installed
    local = re.sub(r"[^A-Za-z0-9.]", ".", torch.__version__)
    assert wheel.name.startswith(f"detops-{detops.__version__}+torch{local}-"), wheel.name


def test_the_installed_package_imports_from_anywhere_with_no_variables(installed):
    _, target = installed
    result = _python_in(target, "import detops, torch; "
                                "print(detops.library_path()); print(len(detops.covered_ops())); "
                                "print(torch.ops.detops.index_add(torch.zeros(3), 0, torch.tensor([0, 0, 2]), "
                                "torch.ones(3)).tolist())")
    assert result.returncode == 0, result.stderr[-3000:]
    path, count, values = result.stdout.split("\n")[:3]
    assert pathlib.Path(path) == pathlib.Path(target) / "detops" / "libdetops.so"
    assert int(count) == len(detops.covered_ops())
    assert values == "[2.0, 0.0, 1.0]"


def test_the_installed_package_refuses_another_torch(installed):
    _, target = installed
    info = pathlib.Path(target) / "detops" / "_build_info.py"
    text = info.read_text()
    assert f'TORCH_VERSION = "{torch.__version__}"' in text
    info.write_text(text.replace(torch.__version__, "2.10.0+cu128"))
    try:
        result = _python_in(target, "import detops")
    finally:
        info.write_text(text)
    assert result.returncode == 1
    assert (f"ImportError: detops was built against torch 2.10.0+cu128, but this environment has torch "
            f"{torch.__version__}") in result.stderr
