"""Run by the TARGET env's interpreter (`python -I env_probe.py`): what the env holds, as one
result line (`@@DDTREE-OVERLAY-RESULT@@` and JSON).

    python -I env_probe.py [--record cached|full] [--hash-cache DIR]

Standard library only, and no syntax newer than Python 3.8: this file never runs in the tool's
own interpreter, and it imports neither sglang nor torch (reading metadata and files is enough).

Checking sglang's RECORD means hashing its ~3 000-6 000 files. With ``--hash-cache DIR`` each
file's hash is kept in ``DIR/<key of the dist-info>.json`` beside its size, mtime, ctime and
inode, and reused while all four are unchanged (any write to a file changes its ctime); ``--record
full`` hashes every file again and rewrites the cache. A cache that cannot be read or written is
passed over: it only saves time.
"""

import base64
import contextlib
import csv
import hashlib
import importlib.util
import json
import os
import re
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


CACHE_VERSION = 1


def file_hash(path, mode):
    with open(path, "rb") as handle:
        digest = hashlib.new(mode, handle.read()).digest()
    return mode + "=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_entries(record_text):
    """(path as RECORD spells it, "mode=digest" or None) per row; read with csv rather than
    `dist.files`, whose pathlib objects cost more than the hashing they save."""
    return [(row[0], row[1] or None) for row in csv.reader(record_text.splitlines()) if row]


def record_check(record_text, site_dir, cache_path, full):
    if record_text is None:
        return {"present": False}
    entries = record_entries(record_text)
    cached = {} if full or cache_path is None else load_cache(cache_path)
    fresh = {}
    modified, missing, unhashed, hashed = [], [], 0, 0
    for name, expected in entries:
        if expected is None:
            unhashed += 1
            continue
        path = os.path.normpath(os.path.join(site_dir, name))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            missing.append(name)
            continue
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        known = cached.get(name)
        if isinstance(known, list) and len(known) == 5 and known[:4] == key:
            value = known[4]
        else:
            try:
                value = file_hash(path, expected.split("=", 1)[0])
            except (FileNotFoundError, ValueError):  # ValueError: a hash mode hashlib lacks
                missing.append(name)
                continue
            hashed += 1
        fresh[name] = [*key, value]
        if value != expected:
            modified.append(name)
    if cache_path is not None and (hashed or len(fresh) != len(cached)):
        save_cache(cache_path, fresh)
    return {
        "present": True,
        "sha256": hashlib.sha256(record_text.encode()).hexdigest(),
        "files": len(entries),
        "hashed": hashed,
        "modified": sorted(modified),
        "missing": sorted(missing),
        "unhashed": unhashed,
        "top_level": sorted({name.split("/")[0] for name, _ in entries if not name.startswith("..")}),
    }


def cache_file(cache_dir, dist_info):
    if cache_dir is None:
        return None
    key = hashlib.sha256(os.path.realpath(dist_info).encode()).hexdigest()[:16]
    return os.path.join(cache_dir, key + ".json")


def load_cache(path):
    try:
        with open(path, encoding="utf-8") as handle:
            body = json.load(handle)
        if body.get("version") == CACHE_VERSION and isinstance(body["files"], dict):
            return body["files"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    return {}


def save_cache(path, files):
    temp = "%s.%d.tmp" % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump({"version": CACHE_VERSION, "files": files}, handle)
        os.replace(temp, path)
    except OSError:  # a full or read-only disk: the next run hashes again
        with contextlib.suppress(OSError):
            os.unlink(temp)


def normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def distributions(name):
    """The metadata directories (`*.dist-info`, `*.egg-info`) of distribution ``name``, in
    sys.path order, as `importlib.metadata.distributions(name=...)` finds them: found by name
    here, because importing importlib.metadata takes longer than the rest of this probe."""
    found = []
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for item in names:
            stem, suffix = os.path.splitext(item)
            if suffix in (".dist-info", ".egg-info") and normalized(stem.split("-")[0]) == normalized(name):
                found.append(os.path.join(entry or ".", item))
    return found


def read_text(meta_dir, name):
    try:
        with open(os.path.join(meta_dir, name), encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def version_of(meta_dir):
    text = read_text(meta_dir, "METADATA") or read_text(meta_dir, "PKG-INFO") or ""
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line:  # the headers end at the first blank line
            break
    return None


def sglang_info(cache_dir, full):
    dists = distributions("sglang")
    if not dists:
        return None
    dist_info = dists[0]
    direct_url = read_text(dist_info, "direct_url.json")
    origin, location = package_dir("sglang")
    site_dir = os.path.dirname(dist_info)
    editable_pth = sorted(
        name
        for name in os.listdir(site_dir)
        if name.startswith("__editable__") and "sglang" in name.lower()
    )
    return {
        "version": version_of(dist_info),
        "installed_copies": len(dists),
        "dist_info": dist_info,
        "site_packages": site_dir,
        "origin": origin,
        "location": location,
        "direct_url": json.loads(direct_url) if direct_url else None,
        "editable_pth": editable_pth,
        "record": record_check(read_text(dist_info, "RECORD"), site_dir, cache_file(cache_dir, dist_info), full),
    }


def torch_cuda(torch_dir):
    path = os.path.join(torch_dir, "version.py")
    if not os.path.exists(path):
        return None
    import ast  # only envs with torch pay for it

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
    dists = distributions(dist_name)
    if not dists:
        return None
    _, location = package_dir(module)
    return {"version": version_of(dists[0]), "location": location}


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


def option(name, default):
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args else default


report = {
    "python": python_info(),
    "sglang": sglang_info(option("--hash-cache", None), option("--record", "cached") == "full"),
    "torch": torch_info(),
    "sgl_kernel": sgl_kernel_info(),
}
print("@@DDTREE-OVERLAY-RESULT@@ " + json.dumps(report))
