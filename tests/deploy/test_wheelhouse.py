"""The image's wheelhouse is made without a package index: dependencies repacked from this
environment, pubmesh's metadata carried over from its egg-info (no Docker needed)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import zipfile
from pathlib import Path

from deploy.wheelhouse import ROOT, _metadata, _tag, dependencies, packages, repack


def test_the_dependencies_are_the_runtime_closure_without_extras() -> None:
    names = {dist.metadata["Name"].lower() for dist in dependencies()}
    assert {"trio", "attrs", "msgpack", "hypercorn", "sortedcontainers", "h11", "outcome"} <= names
    assert not names & {"pytest", "mypy", "nats-py", "redis", "pyspark"}  # (extras only)


def test_tags_are_compressed_as_wheel_names_write_them() -> None:
    assert _tag("Wheel-Version: 1.0\nTag: py3-none-any\n") == "py3-none-any"
    assert (
        _tag("Tag: cp311-cp311-manylinux_2_17_x86_64\nTag: cp311-cp311-manylinux2014_x86_64\n")
        == "cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64"
    )


def test_a_repacked_wheel_holds_the_installed_files_with_a_true_record(tmp_path: Path) -> None:
    dist = metadata.distribution("msgpack")  # (a compiled one)
    wheel = repack(dist, tmp_path)
    assert wheel.name.startswith(f"msgpack-{dist.version}-cp311-cp311-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        record = archive.read(f"msgpack-{dist.version}.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))
    assert any(name.endswith(".so") for name in names)
    assert not any("__pycache__" in name or name.endswith(("INSTALLER", "REQUESTED")) for name in names)


def test_egg_info_requirements_become_requires_dist(tmp_path: Path) -> None:
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: pubmesh\n\nThe description.\n")
    (tmp_path / "requires.txt").write_text(
        "trio>=0.25\n\n[:python_version < '3.12']\ntomli\n\n[dev]\npytest>=8\n"
    )
    assert _metadata(tmp_path).decode() == (
        "Metadata-Version: 2.1\nName: pubmesh\n"
        "Requires-Dist: trio>=0.25\n"
        "Requires-Dist: tomli; (python_version < '3.12')\n"
        'Requires-Dist: pytest>=8; extra == "dev"\n'
        "\nThe description.\n"
    )


def test_the_packages_built_are_those_pyproject_lists() -> None:
    assert {"routing", "transport", "node", "cluster"} <= set(packages())
    assert all((ROOT / package / "__init__.py").exists() for package in packages())
