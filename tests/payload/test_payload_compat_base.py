"""The family shims over ddtree_compat_base: each states only where its family differs from
0.5.14's answers, and each binds the whole interface the worker imports."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

pytest.importorskip("torch")
from payload_modules import OVERLAY, load_payload_module
from test_payload_compat_0515_0518 import load_shim

BASE = OVERLAY / "sglang/srt/speculative/ddtree_compat_base.py"
FAMILIES = {
    "sglang-0.5.14": (0, 5, 14),
    "sglang-0.5.15-0.5.18": (0, 5, 15),
    "sglang-0.5.19-0.5.23": (0, 5, 19),
}


def _without_docstring(function: ast.FunctionDef) -> str:
    function = copy.deepcopy(function)
    if ast.get_docstring(function) is not None:
        function.body = function.body[1:]
    return ast.dump(function)


def _methods(path: Path, class_name: str | None = None) -> dict[str, ast.FunctionDef]:
    """The methods of ``class_name`` in ``path`` (of its one class when not named)."""
    classes = [node for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)]
    (cls,) = [c for c in classes if class_name in (None, c.name)]
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_shim_overrides_only_what_differs_from_the_base(family: str) -> None:
    shim = OVERLAY / "shims" / family / "ddtree_compat.py"
    tree = ast.parse(shim.read_text())
    public_functions = [
        node.name for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]
    assert public_functions == [], "the interface goes through the CompatShim subclass"
    base = _methods(BASE, "CompatShim")
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    for cls in classes:
        assert [ast.unparse(b) for b in cls.bases] == ["CompatShim"]
        for method in (node for node in cls.body if isinstance(node, ast.FunctionDef)):
            assert method.name in base, f"{cls.name}.{method.name} is not in the interface"
            same = _without_docstring(method) == _without_docstring(base[method.name])
            assert not same, f"{cls.name}.{method.name} repeats the base's; drop the override"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_shim_binds_the_whole_interface(monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    base = load_payload_module("sglang.srt.speculative.ddtree_compat_base")
    compat = load_shim(monkeypatch, FAMILIES[family], OVERLAY / "shims" / family / "ddtree_compat.py")
    for name in base.INTERFACE:
        assert callable(getattr(compat, name)), name
    assert compat.CONTRACT is compat.api_contract_problems.__self__.CONTRACT


def test_the_interface_is_every_public_method_of_the_base() -> None:
    base = load_payload_module("sglang.srt.speculative.ddtree_compat_base")
    public = {name for name in _methods(BASE, "CompatShim") if not name.startswith("_")}
    assert public - {"module_names"} == set(base.INTERFACE)


@pytest.mark.parametrize(
    ("family", "release", "constrains"),
    [
        ("sglang-0.5.14", (0, 5, 14), False),
        ("sglang-0.5.15-0.5.18", (0, 5, 16), False),
        ("sglang-0.5.15-0.5.18", (0, 5, 17), True),
        ("sglang-0.5.19-0.5.23", (0, 5, 23), True),
    ],
)
def test_grammar_constrains_the_tree_verify_from_0517_and_stops_the_round_before(
    monkeypatch: pytest.MonkeyPatch, family: str, release: tuple[int, ...], constrains: bool
) -> None:
    """What runs on real releases is the matrix's grammar check; here, which ones take which path."""
    import types

    compat = load_shim(monkeypatch, release, OVERLAY / "shims" / family / "ddtree_compat.py")
    assert compat.GRAMMAR_TREE is constrains
    plain = types.SimpleNamespace(has_grammar=False)
    assert compat.grammar_tree(plain, None) is None
    assert compat.grammar_mask(plain, None, None, None) is None
    if not constrains:
        with pytest.raises(ValueError, match="cannot constrain its tree verify by grammar"):
            compat.grammar_tree(types.SimpleNamespace(has_grammar=True), None)


@pytest.mark.parametrize(
    ("family", "release", "returns"),
    [
        ("sglang-0.5.14", (0, 5, 14), False),
        ("sglang-0.5.15-0.5.18", (0, 5, 17), False),
        ("sglang-0.5.15-0.5.18", (0, 5, 18), True),
        ("sglang-0.5.19-0.5.23", (0, 5, 23), True),
    ],
)
def test_logprobs_come_from_the_verify_rows_from_0518_and_stop_the_round_before(
    monkeypatch: pytest.MonkeyPatch, family: str, release: tuple[int, ...], returns: bool
) -> None:
    """What runs on real releases is the matrix's logprob check; here, which ones take which path."""
    import types

    compat = load_shim(monkeypatch, release, OVERLAY / "shims" / family / "ddtree_compat.py")
    assert compat.SPEC_LOGPROBS is returns
    untouched = types.SimpleNamespace()
    compat.output_logprobs(types.SimpleNamespace(return_logprob=False), untouched, None, None)
    assert vars(untouched) == {}
    if not returns:
        with pytest.raises(ValueError, match="cannot return logprobs on this sglang release"):
            compat.output_logprobs(types.SimpleNamespace(return_logprob=True), untouched, None, None)


def _manifest_shims() -> list[tuple[str, Path]]:
    from overlay_helpers import REPO_ROOT

    from ddtree_overlay.engine.patchset import load_patch_set

    shims = []
    for manifest in sorted((REPO_ROOT / "manifests").glob("*.toml")):
        (shim,) = (f.source for f in load_patch_set(manifest).new_files if f.source.startswith("overlay/shims/"))
        shims.append((manifest.stem, REPO_ROOT / shim))
    return shims


@pytest.mark.parametrize(("preset", "flag"), [("grammar", "GRAMMAR_TREE"), ("logprobs", "SPEC_LOGPROBS")])
def test_verify_refuses_a_preset_exactly_on_the_releases_whose_shim_cannot_serve_it(
    monkeypatch: pytest.MonkeyPatch, preset: str, flag: str
) -> None:
    """verify's table of first releases per preset and the shims' flags state one fact twice."""
    from packaging.version import Version

    from ddtree_overlay.bench.check_presets import PRESET_RELEASES

    first = Version(PRESET_RELEASES[preset])
    shims = _manifest_shims()
    assert len(shims) == 11
    for name, shim in shims:
        release = Version(name).release
        compat = load_shim(monkeypatch, release, shim)
        assert getattr(compat, flag) is (Version(name) >= first), (name, flag)
