"""The image's wheelhouse, made without a package index: pubmesh built from this checkout and its
runtime dependencies repacked from the distributions installed in this Python's environment.

    python deploy/wheelhouse.py DIR

pubmesh is built with ``setup.py build`` (the publish path compiled with mypyc, unless
PUBMESH_PURE_PYTHON is set) in a copy of the checkout, with the setuptools and mypy this environment
already has, so no isolated build environment has to be fetched. Each dependency (the closure of
pubmesh's requirements without extras) becomes a wheel again from the files its installation
recorded, under the tags it was installed with. Run it with the project's .venv, where `make`
installed all of them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
"""dist-info files an installer writes, not part of a wheel."""


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(out: Path, name: str, version: str, tag: str, files: dict[str, bytes]) -> Path:
    """A wheel of ``files`` (archive paths, the .dist-info's METADATA and WHEEL among them), with
    its RECORD."""
    stem = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    record = f"{stem}.dist-info/RECORD"
    lines = [f"{path},{_digest(data)},{len(data)}" for path, data in sorted(files.items())]
    wheel = out / f"{stem}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in sorted(files.items()):
            archive.writestr(path, data)
        archive.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    return wheel


def _tag(wheel_info: str) -> str:
    """The compressed tag set (``py3-none-any``, ``cp311-cp311-a.b``) of a WHEEL file's Tag lines."""
    tags = [line.split(":", 1)[1].strip() for line in wheel_info.splitlines() if line.startswith("Tag:")]
    if not tags:
        raise ValueError("no Tag in WHEEL")
    parts = [sorted({tag.split("-")[i] for tag in tags}) for i in range(3)]
    return "-".join(".".join(part) for part in parts)


def dependencies(root: str = "pubmesh") -> list[metadata.Distribution]:
    """The installed distributions ``root`` needs at run time (its requirements without extras,
    and theirs)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        dist = metadata.distribution(todo.pop())
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = canonicalize_name(requirement.name)
            if name not in found:
                found[name] = metadata.distribution(name)
                todo.append(name)
    return [found[name] for name in sorted(found)]


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists (scripts, which pip
    writes from entry points, and bytecode left out)."""
    wheel_info = dist.read_text("WHEEL")
    if wheel_info is None or dist.files is None:
        raise SystemExit(f"wheelhouse: {dist.metadata['Name']} was not installed from a wheel")
    files = {}
    for path in dist.files:
        if path.parts[0] == ".." or "__pycache__" in path.parts:
            continue
        if path.parts[0].endswith(".dist-info") and path.name in SKIPPED:
            continue
        files[path.as_posix()] = Path(str(dist.locate_file(path))).read_bytes()
    return write_wheel(out, dist.metadata["Name"], dist.version, _tag(wheel_info), files)


def _metadata(egg_info: Path) -> bytes:
    """METADATA from an .egg-info: its PKG-INFO with the requirements (requires.txt, by section)
    as Requires-Dist headers."""
    headers, _, body = (egg_info / "PKG-INFO").read_text().partition("\n\n")
    marker = ""
    extra = []
    requires = egg_info / "requires.txt"
    for line in requires.read_text().splitlines() if requires.exists() else []:
        if line.startswith("["):
            name, _, condition = line.strip("[]").partition(":")
            parts = [f"({condition})"] if condition else []
            parts += [f'extra == "{name}"'] if name else []
            marker = " and ".join(parts)
        elif line.strip():
            extra.append(f"Requires-Dist: {line.strip()}" + (f"; {marker}" if marker else ""))
    return "\n".join([headers, *extra]).encode() + b"\n\n" + body.encode()


def packages() -> list[str]:
    """The top-level packages pyproject.toml's package list includes (``name*`` patterns)."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        patterns = tomllib.load(file)["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*") for pattern in patterns]


def build_pubmesh(out: Path) -> Path:
    """pubmesh's wheel, built in a copy of the checkout (so the build leaves nothing behind in it)."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
        for package in packages():
            shutil.copytree(ROOT / package, tree / package, ignore=ignore)
        for name in ("setup.py", "pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, tree / name)
        (tree / "meta").mkdir()
        for command in (["build", "--build-base", "build"], ["egg_info", "--egg-base", "meta"]):
            subprocess.run([sys.executable, "setup.py", "-q", *command], cwd=tree, check=True)
        [lib] = [p for p in (tree / "build").iterdir() if p.name.startswith("lib")]
        info = tree / "meta" / "pubmesh.egg-info"
        files = {
            path.relative_to(lib).as_posix(): path.read_bytes()
            for path in sorted(lib.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }
        compiled = any(name.endswith(".so") for name in files)
        if compiled:
            platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
            python = f"cp{sys.version_info.major}{sys.version_info.minor}"
            tag = f"{python}-{python}-{platform}"
        else:
            tag = "py3-none-any"
        version = metadata.version("pubmesh")
        dist_info = f"pubmesh-{version}.dist-info"
        files[f"{dist_info}/METADATA"] = _metadata(info)
        for name in ("entry_points.txt", "top_level.txt"):
            files[f"{dist_info}/{name}"] = (info / name).read_bytes()
        files[f"{dist_info}/WHEEL"] = (
            "Wheel-Version: 1.0\nGenerator: pubmesh deploy/wheelhouse.py\n"
            f"Root-Is-Purelib: {'false' if compiled else 'true'}\nTag: {tag}\n"
        ).encode()
        return write_wheel(out, "pubmesh", version, tag, files)


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for dist in dependencies():
        repack(dist, out)
    build_pubmesh(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
