"""Crash injection at every write step of apply, rollback and recover, with every signal and
every write error, on a real pip-installed sglang 0.5.14.

Each run is a forked child (`forked.run_forked`) that fails at one (step, n) of the points a
clean run reaches, found by running it once (`forked.steps_reached`). The patch set is a small
one made from the shipped 0.5.14 series (one patch, two new files), so every point is cheap;
the transaction code it drives is the same for any patch set.

- SIGKILL: the env may be mid-way; the next `recover` makes it exactly pristine or applied.
- SIGTERM, SIGINT: the run itself stops at the next step boundary, undoes what it wrote (or
  finishes, past the commit point) and exits 143 / 130; nothing is left to recover.
- ENOSPC, EIO raised by a write: one error, exit 6, the env as it was (past the commit point:
  as it is to be); while recovering, exit 10 and the journal kept for the next `recover`.
After every case: no journal, no temp file in site-packages or the state dir, and the ledger
says what the files hold.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest
from forked import run_forked, steps_reached
from overlay_helpers import REPO_ROOT, site_packages

from ddtree_overlay.commands.apply import apply
from ddtree_overlay.commands.manifest_refresh import refresh_manifest
from ddtree_overlay.commands.recover import recover
from ddtree_overlay.commands.rollback import rollback
from ddtree_overlay.engine.envprobe import EnvInfo, probe_env
from ddtree_overlay.engine.errors import ExitCode
from ddtree_overlay.engine.files import TEMP_SUFFIX
from ddtree_overlay.engine.fingerprint import installed_patch_set
from ddtree_overlay.engine.settings import STATE_DIR_ENV

pytestmark = pytest.mark.slow

PATCH = "patches/0.5.14/0001-spec_info.patch"
NEW_FILES = ("ddtree_spec.py", "ddtree_utils.py")
TOUCHED = (
    "sglang/srt/speculative/spec_info.py",
    *(f"sglang/srt/speculative/{name}" for name in NEW_FILES),
)
SIGNAL_EXITS = {"KILL": -9, "TERM": int(ExitCode.TERMINATED), "INT": int(ExitCode.INTERRUPTED)}


@dataclass
class Scene:
    """One env with the small patch set, and saved starting states to reset it to."""

    env: Path
    manifest: Path
    state: Path
    info: EnvInfo
    saved: Path
    images: dict[str, dict[str, bytes | None]] = field(default_factory=dict)
    temps: dict[str, dict[Path, bytes]] = field(default_factory=dict)  # a cut run's temp files

    @property
    def env_vars(self) -> dict[str, str]:
        return {STATE_DIR_ENV: str(self.state), "DDTREE_OVERLAY_LOCK_TIMEOUT": "0"}

    def verb(self, name: str) -> Callable[[], object]:
        calls = {
            "apply": lambda: apply(self.info, manifest=self.manifest),
            "rollback": lambda: rollback(self.info),
            "recover": lambda: recover(self.info),
        }
        return calls[name]

    def files(self) -> dict[str, bytes | None]:
        site = site_packages(self.env)
        return {path: (site / path).read_bytes() if (site / path).exists() else None for path in TOUCHED}

    def save(self, name: str) -> None:
        self.images[name] = self.files()
        self.temps[name] = {path: path.read_bytes() for path in self.strays() if path.is_relative_to(self.env)}
        shutil.rmtree(self.saved / name, ignore_errors=True)
        shutil.copytree(self.state, self.saved / name)

    def reset(self, name: str) -> None:
        site = site_packages(self.env)
        for path, data in self.images[name].items():
            target = site / path
            if data is None:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(data)
        for directory in self.directories():
            for stray in directory.glob(f"*{TEMP_SUFFIX}"):
                stray.unlink()
        for path, data in self.temps[name].items():
            path.write_bytes(data)
        shutil.rmtree(self.state)
        shutil.copytree(self.saved / name, self.state)

    def directories(self) -> list[Path]:
        site = site_packages(self.env)
        return sorted({site / str(PurePosixPath(path).parent) for path in TOUCHED})

    def strays(self) -> list[Path]:
        found = [path for d in self.directories() for path in d.glob(f"*{TEMP_SUFFIX}")]
        return found + list(self.state.rglob(f"*{TEMP_SUFFIX}"))

    def problems(self, expected: tuple[str, ...]) -> list[str]:
        """What is wrong with the env now, given the states it may be in."""
        files = self.files()
        now = [name for name in expected if self.images[name] == files]
        problems = [] if now else [f"files match none of {expected}"]
        problems += [f"stray temp file {path.name}" for path in self.strays()]
        journal = list(self.state.glob("envs/*/journal.json"))
        problems += ["journal left"] if journal else []
        ledger_there = bool(list(self.state.glob("envs/*/ledger.json")))
        if now and ledger_there != (now[0] == "applied"):
            problems.append(f"ledger {'present' if ledger_there else 'absent'} with the env {now[0]}")
        return problems


@pytest.fixture(scope="module")
def scene(pristine_sglang_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = _fast_dir(tmp_path_factory)
    try:
        yield _scene(pristine_sglang_env, root)
    finally:
        shutil.rmtree(root)


def _scene(pristine_sglang_env: Path, root: Path) -> Scene:
    env = root / "venv"
    subprocess.run(["cp", "-a", str(pristine_sglang_env), str(env)], check=True)
    manifest = _small_manifest(root / "data")
    info = probe_env(env)
    refresh_manifest(manifest, info)
    assert installed_patch_set(info) is not None  # loaded once here, not in every child
    scene = Scene(env, manifest, root / "state", info, root / "saved")
    scene.state.mkdir()
    scene.save("pristine")
    assert run_forked(scene.verb("apply"), env_vars=scene.env_vars) == 0
    scene.save("applied")
    for start, verb, fault in (
        ("apply-cut-mid-way", "apply", "file-replaced:2:KILL"),
        ("apply-cut-after-commit", "apply", "journal-committed:1:KILL"),
        ("rollback-cut-mid-way", "rollback", "file-removed:1:KILL"),
    ):
        scene.reset("pristine" if verb == "apply" else "applied")
        assert run_forked(scene.verb(verb), fault=fault, env_vars=scene.env_vars) == -9
        scene.save(start)
    return scene


def _fast_dir(factory: pytest.TempPathFactory) -> Path:
    """tmpfs where there is room (fsync is free there), else the usual temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 512 * 2**20:
        return Path(tempfile.mkdtemp(prefix="ddtree-crash-", dir=shm))
    return factory.mktemp("crash")


def _small_manifest(data: Path) -> Path:
    for name in ("patches", "overlay"):
        shutil.copytree(REPO_ROOT / name, data / name)
    manifest = data / "manifests" / "crash-matrix.toml"
    manifest.parent.mkdir(parents=True)
    new_files = "".join(
        f'[[new_file]]\nsource = "overlay/sglang/srt/speculative/{name}"\n'
        f'target = "sglang/srt/speculative/{name}"\n\n'
        for name in NEW_FILES
    )
    manifest.write_text(
        '[patchset]\nid = "sglang-0.5.14-crash-matrix"\ndistribution = "sglang"\nversions = "==0.5.14"\n'
        'why = "a small patch set for the crash tests"\n\n'
        f'[[patch]]\npath = "{PATCH}"\nwhy = "the spec_info registration"\n\n{new_files}'
    )
    return manifest


# (verb, the state it starts from, the states it may end in)
RUNS = [
    ("apply", "pristine", ("pristine", "applied")),
    ("rollback", "applied", ("applied", "pristine")),
    ("recover", "apply-cut-mid-way", ("pristine",)),
    ("recover", "apply-cut-after-commit", ("applied",)),
    ("recover", "rollback-cut-mid-way", ("applied",)),
]


@pytest.mark.parametrize("signal", list(SIGNAL_EXITS))
@pytest.mark.parametrize(("verb", "start", "ends"), RUNS)
def test_a_signal_at_every_write_step_leaves_the_env_pristine_or_applied(
    scene: Scene, tmp_path: Path, verb: str, start: str, ends: tuple[str, ...], signal: str
) -> None:
    scene.reset(start)
    points = steps_reached(scene.verb(verb), tmp_path / "steps.json", env_vars=scene.env_vars)
    assert points
    failures = []
    for step, n in points:
        scene.reset(start)
        code = run_forked(scene.verb(verb), fault=f"{step}:{n}:{signal}", env_vars=scene.env_vars)
        if code != SIGNAL_EXITS[signal]:
            failures.append(f"{step}:{n}: exit {code}")
            continue
        if signal == "KILL":
            code = run_forked(scene.verb("recover"), env_vars=scene.env_vars)
            if code != 0:
                failures.append(f"{step}:{n}: recover exit {code}")
        failures += [f"{step}:{n}: {problem}" for problem in scene.problems(ends)]
    assert not failures, failures


# (verb, start, the state a failed write leaves, the state a failure past the commit point leaves)
FAILING_RUNS = [
    ("apply", "pristine", "pristine", "applied"),
    ("rollback", "applied", "applied", "pristine"),
]
COMMITTED = ("ledger-written", "kept-dropped", "journal-removed")


@pytest.mark.parametrize("error", ["ENOSPC", "EIO"])
@pytest.mark.parametrize(("verb", "start", "undone", "done"), FAILING_RUNS)
def test_a_failed_write_at_every_step_is_undone_with_one_error(
    scene: Scene, tmp_path: Path, verb: str, start: str, undone: str, done: str, error: str
) -> None:
    scene.reset(start)
    points = steps_reached(scene.verb(verb), tmp_path / "steps.json", env_vars=scene.env_vars)
    failures = []
    for step, n in points:
        scene.reset(start)
        code = run_forked(scene.verb(verb), fault=f"{step}:{n}:{error}", env_vars=scene.env_vars)
        if code != ExitCode.READ_ONLY:
            failures.append(f"{step}:{n}: exit {code}")
            continue
        if step in COMMITTED:  # the work is done; what it left, the next command clears
            run_forked(scene.verb("recover"), env_vars=scene.env_vars)
        expected = done if step in COMMITTED else undone
        failures += [f"{step}:{n}: {problem}" for problem in scene.problems((expected,))]
    assert not failures, failures


@pytest.mark.parametrize("error", ["ENOSPC", "EIO"])
@pytest.mark.parametrize(("start", "end"), [("apply-cut-mid-way", "pristine"), ("apply-cut-after-commit", "applied")])
def test_a_recovery_whose_write_fails_keeps_the_journal_for_the_next(
    scene: Scene, tmp_path: Path, start: str, end: str, error: str
) -> None:
    scene.reset(start)
    points = steps_reached(scene.verb("recover"), tmp_path / "steps.json", env_vars=scene.env_vars)
    failures = []
    for step, n in points:
        scene.reset(start)
        code = run_forked(scene.verb("recover"), fault=f"{step}:{n}:{error}", env_vars=scene.env_vars)
        if code not in (0, ExitCode.RECOVERY_NEEDED):
            failures.append(f"{step}:{n}: exit {code}")
        if run_forked(scene.verb("recover"), env_vars=scene.env_vars) != 0:
            failures.append(f"{step}:{n}: the second recover failed")
        failures += [f"{step}:{n}: {problem}" for problem in scene.problems((end,))]
    assert not failures, failures
