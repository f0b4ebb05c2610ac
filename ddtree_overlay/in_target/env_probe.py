"""Run by the TARGET env's interpreter (`python -I env_probe.py`): what the env holds, as one
result line (`@@DDTREE-OVERLAY-RESULT@@` and JSON).

Standard library only, and no syntax newer than Python 3.8: this file never runs in the tool's
own interpreter, and it imports neither sglang nor torch (reading metadata and files is enough).
"""

import ast
import base64
import hashlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import sys
import sysconfig


def python_info():
    stdlib = sysconfig.get_paths()["stdlib"]
    return {
        "version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "prefix": sys.prefix,
        "is_venv": sys.prefix != sys.base_prefix,
        "externally_managed": os.path.exists(os.path.join(stdlib, "EXTERNALLY-MANAGED")),
        "site_dirs": sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}),
    }


def package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None, None
    if spec is None:
        return None, None
    locations = list(spec.submodule_search_locations or [])
    return spec.origin, (locations[0] if locations else None)


def record_check(dist):
    files = dist.files
    if files is None:
        return {"present": False}
    modified, missing, unhashed = [], [], 0
    for entry in files:
        if entry.hash is None:
            unhashed += 1
            continue
        path = entry.locate()
        try:
            with open(str(path), "rb") as handle:
                digest = hashlib.new(entry.hash.mode, handle.read()).digest()
        except FileNotFoundError:
            missing.append(str(entry))
            continue
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != entry.hash.value:
            modified.append(str(entry))
    record_text = dist.read_text("RECORD") or ""
    return {
        "present": True,
        "sha256": hashlib.sha256(record_text.encode()).hexdigest(),
        "files": len(files),
        "modified": sorted(modified),
        "missing": sorted(missing),
        "unhashed": unhashed,
        "top_level": sorted({str(f).split("/")[0] for f in files if not str(f).startswith("..")}),
    }


def sglang_info():
    dists = list(metadata.distributions(name="sglang"))
    if not dists:
        return None
    dist = dists[0]
    dist_info = str(dist._path)  # the only way to the dist-info directory
    direct_url = dist.read_text("direct_url.json")
    origin, location = package_dir("sglang")
    site_dir = os.path.dirname(dist_info)
    editable_pth = sorted(
        name
        for name in os.listdir(site_dir)
        if name.startswith("__editable__") and "sglang" in name.lower()
    )
    return {
        "version": dist.version,
        "installed_copies": len(dists),
        "dist_info": dist_info,
        "site_packages": site_dir,
        "origin": origin,
        "location": location,
        "direct_url": json.loads(direct_url) if direct_url else None,
        "editable_pth": editable_pth,
        "record": record_check(dist),
    }


def torch_cuda(torch_dir):
    path = os.path.join(torch_dir, "version.py")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "cuda" for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def component(dist_name, module):
    try:
        version = metadata.version(dist_name)
    except metadata.PackageNotFoundError:
        return None
    _, location = package_dir(module)
    return {"version": version, "location": location}


def torch_info():
    info = component("torch", "torch")
    if info and info["location"]:
        info["cuda"] = torch_cuda(info["location"])
    return info


def sgl_kernel_info():
    info = component("sgl-kernel", "sgl_kernel")
    if info and info["location"]:
        info["shared_objects"] = sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(info["location"])
            for name in names
            if ".so" in name
        )
    return info


report = {
    "python": python_info(),
    "sglang": sglang_info(),
    "torch": torch_info(),
    "sgl_kernel": sgl_kernel_info(),
}
print("@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(report))
