"""The payload's Triton kernels build for sm_86, sm_90 and sm_120 with the triton each supported
release's torch pin brings into a user's env, not only with the tests' own (3.9.0): the
engine compiles them there, at its first round, and a kernel only a newer triton accepts would
stop it. Each triton is pip-installed (--no-deps) into the matrix cache and put first on the
path of the ahead-of-time build scripts the payload tests run (`aot_build`). Spills differ
between triton releases (the tests hold 3.9.0's); here only the builds are asked for.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from aot_build import run_aot_script
from release_wheels import stock_wheel

from ddtree_overlay.engine.datadir import bundled_releases
from ddtree_overlay.matrix.envs import cache_root, wheel_requirements

pytestmark = [pytest.mark.matrix, pytest.mark.slow]

# torch's own pin on triton, per torch release a supported sglang pins (torch's wheel METADATA:
# 2.11.0 `triton==3.6.0`, 2.13.0 `triton==3.7.1`, 2.14.1 `triton~=3.8.0`, read 2026-12-05).
TRITON_OF_TORCH = {"2.11.0": "3.6.0", "2.13.0": "3.7.1", "2.14.1": "3.8.0"}
# The payload test modules whose AOT_SCRIPT builds every Triton kernel the payload launches.
AOT_MODULES = (
    "test_payload_ddtree_kernels",
    "test_payload_ddtree_gdn_tree",
    "test_payload_ddtree_hybrid",
    "test_payload_ddtree_kv_move",
    "test_payload_ddtree_verify_attention",
)


PAYLOAD_TESTS = Path(__file__).resolve().parents[1] / "payload"


def aot_script(module_name: str) -> str:
    spec = importlib.util.spec_from_file_location(module_name, PAYLOAD_TESTS / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AOT_SCRIPT


def triton_install(version: str) -> Path:
    """triton ``version`` in the matrix cache, installed aside and renamed in whole, so an
    install cut off is never taken for one."""
    target = cache_root() / "triton" / version
    if not target.is_dir():
        partial = target.with_name(f"{version}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial), f"triton=={version}"],
            check=True,
        )
        partial.rename(target)
    return target


def test_every_supported_release_pins_a_torch_whose_triton_is_built_here() -> None:
    torches = {wheel_requirements(stock_wheel(release))["pins"].get("torch") for release in bundled_releases()}
    assert torches <= set(TRITON_OF_TORCH), f"add the triton of torch {sorted(torches - set(TRITON_OF_TORCH))}"


@pytest.mark.parametrize("version", sorted(set(TRITON_OF_TORCH.values())))
def test_the_payload_kernels_build_with_each_releases_triton(version: str) -> None:
    triton_dir = triton_install(version)
    probe = run_aot_script("import json, triton\nprint(json.dumps([triton.__version__]))", timeout=120, triton_dir=triton_dir)
    assert probe == [version]
    for name in AOT_MODULES:
        built = run_aot_script(aot_script(name), timeout=600, triton_dir=triton_dir)
        assert built, (version, name)
