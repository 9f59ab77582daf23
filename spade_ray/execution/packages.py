"""The dependency whitelist: which host packages a candidate may import, and their versions.

Only the listed top-level packages are bound (read-only) into the jail; the interpreter's own
site-packages are not. Their versions go into every result's env_hash.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from spade_ray.execution.protocol import BackendUnavailable


def package_dirs(packages: tuple[str, ...]) -> dict[str, Path]:
    """Top-level import names -> their directory on the host (plus vendored `<name>.libs`)."""
    dirs = {}
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise BackendUnavailable(f"whitelisted package {name!r} is not an installed package")
        path = Path(list(spec.submodule_search_locations)[0])
        dirs[name] = path
        libs = path.parent / f"{name}.libs"
        if libs.is_dir():
            dirs[libs.name] = libs
    return dirs


def package_versions(dirs: dict[str, Path]) -> dict[str, str]:
    versions = {}
    for name in sorted(dirs):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "unknown"  # e.g. a vendored `<name>.libs` directory
    return versions
